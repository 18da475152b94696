-- idempotency 1.1 -> 1.2 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.2 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.2'" to load this file. \quit

--
-- Request keys are indexed by a 16-byte hash of (scope, key) instead of
-- the two texts: the primary key's entries are 24 bytes whatever the key's
-- length, so the index has about half the pages for UUID keys, and half
-- the full-page images in the WAL after each checkpoint (the keys arrive
-- in random order, each on a random leaf).  The full key is still stored
-- and compared, so two keys never share a row; doc/reference.md, "Tables".
--
CREATE FUNCTION idempotency.key_hash(scope text, key text)
RETURNS uuid
AS 'MODULE_PATHNAME', 'idempotency_key_hash'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.key_hash(text, text) IS 'the primary key of idempotency_keys: the first 16 bytes of SHA-256 of the scope''s length, the scope and the key';
REVOKE ALL ON FUNCTION idempotency.key_hash(text, text) FROM PUBLIC;

-- Rewrites the table (ACCESS EXCLUSIVE while it runs): see
-- doc/operations.md, "Upgrades", for the time it takes per million keys.
ALTER TABLE idempotency.idempotency_keys
    ADD COLUMN key_hash uuid
        GENERATED ALWAYS AS (idempotency.key_hash(scope, idempotency_key)) STORED,
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (key_hash);
COMMENT ON COLUMN idempotency.idempotency_keys.key_hash IS 'idempotency.key_hash(scope, idempotency_key): the primary key; look a key up with WHERE key_hash = idempotency.key_hash(scope, key)';
