-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: execute() runs the one statement it reads] ----------------------

--
-- The portable body of execute() (sql/portable/execute.sql) changed in 1.8
-- and its C symbol did not: its lexer reads a statement as the server does
-- under the session's standard_conforming_strings, and it prepares nothing
-- under a name (a statement planted under one ran in the caller's place).
-- It is stated again so that an installation of the portable edition
-- updated to 1.8 gets it; in the C edition it binds the symbol of 1.7.
-- (The portable edition's helper portable_setting_ms is replaced by this
-- script too: its pattern no longer depends on that setting.)
--
CREATE OR REPLACE FUNCTION idempotency.execute(
    key          text,
    request      jsonb,
    statement    text,
    params       text[]   DEFAULT '{}',
    scope        text     DEFAULT '',
    ttl          interval DEFAULT NULL,
    response_ttl interval DEFAULT NULL,
    wait         interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_execute_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
