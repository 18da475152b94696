-- idempotency 1.2 -> 1.3 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.3 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-- [section: keys] ------------------------------------------------------------

--
-- key_hash becomes a plain column that the library writes with every new
-- key, instead of a stored generated column: logical replication (pgoutput
-- of 15 and 17) does not send generated columns, and key_hash is the
-- primary key, so the replica identity.  A CHECK constraint holds it to
-- idempotency.key_hash(scope, idempotency_key), as the generated column
-- did.  No rewrite; the check reads the table once (doc/operations.md,
-- "Upgrades").
--
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN key_hash DROP EXPRESSION;
ALTER TABLE idempotency.idempotency_keys
    ADD CONSTRAINT idempotency_keys_key_hash_check
        CHECK (key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(scope, idempotency_key));
COMMENT ON COLUMN idempotency.idempotency_keys.key_hash IS 'idempotency.key_hash(scope, idempotency_key), written with the row (a CHECK holds it): the primary key; look a key up with WHERE key_hash = idempotency.key_hash(scope, key)';

-- [section: state machines] --------------------------------------------------

-- [section: outbox] ----------------------------------------------------------

-- [section: views and privileges] --------------------------------------------
