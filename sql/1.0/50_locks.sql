--
-- Section 5: advisory-lock helpers.
--
CREATE FUNCTION idempotency.lock_key(key text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idempotency_lock_key'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.lock_key(text) IS 'stable 64-bit advisory lock id of a key: first 8 bytes of its SHA-256';

CREATE FUNCTION idempotency.try_lock(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idempotency_try_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.try_lock(text) IS 'pg_try_advisory_xact_lock(lock_key(key)): transaction-scoped, non-blocking';
