-- idempotency 1.8 -> 1.9 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.9 and an
-- updated one are the same.
--
-- 1.9 keeps exactly-once behind transaction poolers and makes the portable
-- edition's hot paths cheaper.  Each section says what it changes and why.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.9'" to load this file. \quit

-- [section: grants repair] -------------------------------------------------

--
-- Last, after every grant of this script: through pg_tle, grants made by
-- an update script are recorded as initial privileges and pg_dump would
-- leave them out; queue_pending_grants() (1.8) makes them ordinary grants
-- at the commit.  Keep it the script's final statement.
SELECT idempotency.queue_pending_grants();
