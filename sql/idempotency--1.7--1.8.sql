-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: a bounded number of claims sleep for a key] ---------------------

--
-- A claim given a wait keeps its connection while it sleeps, and the
-- key's holder usually needs one from the same pool or transaction pooler
-- to finish: duplicates that took every connection starved the holder
-- until its lease ran out, and the request ran again.  From 1.8 at most
-- idempotency.max_waiters_per_key claims (superuser-set, default 1) sleep
-- for a key at a time; the others answer in_progress at once, with the
-- time to retry.  In the C edition the library does it for every symbol;
-- this statement restates claim() with the symbol it bound in 1.7, so
-- that the portable edition's body, which changed, lands in an updated
-- installation.
--
CREATE OR REPLACE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_claim_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
