-- idempotency 1.2 -> 1.3 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.3 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-- [section: keys] ------------------------------------------------------------

-- [section: state machines] --------------------------------------------------

-- [section: outbox] ----------------------------------------------------------

-- [section: views and privileges] --------------------------------------------
