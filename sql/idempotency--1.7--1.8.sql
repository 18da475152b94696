-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: settings refused alike in both editions] ------------------------

--
-- The C refuses a bad idempotency.* value at SET (22023); the portable
-- edition reads every setting through one reader per type
-- (sql/portable/settings.sql, replaced by this version's script), which
-- refuses it with the same error at the first call that reads it.
-- execute(), whose portable body reads idempotency.max_response_bytes
-- itself (it runs with the caller's rights, who may not call the owner's
-- readers), is stated again for its portable body; in the C edition it
-- binds the symbol it bound before.
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
