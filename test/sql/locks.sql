-- Advisory-lock helpers.
\i test/sql/include/error_of.sql

-- stable: the first 8 bytes of SHA-256, big-endian, computable anywhere
SELECT idempotency.lock_key('order-42');
SELECT idempotency.lock_key('order-42') =
       ('x' || left(encode(sha256(convert_to('order-42', 'UTF8')), 'hex'), 16))::bit(64)::bigint
       AS matches_sql_formula;
SELECT idempotency.lock_key('a') <> idempotency.lock_key('b') AS differs;
SELECT idempotency.lock_key('ключ');
-- try_lock takes pg_advisory_xact_lock(lock_key(key)) and does not block
BEGIN;
SELECT idempotency.try_lock('order-42');
SELECT locktype, objid::bigint | (classid::bigint << 32) = idempotency.lock_key('order-42') AS same_lock,
       mode, granted
  FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT idempotency.try_lock('order-42') AS reentrant;
COMMIT;
SELECT count(*) AS held_after_commit FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- these should all fail
SELECT pg_temp.error_of($$SELECT idempotency.lock_key(NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.lock_key('')$$);
SELECT pg_temp.error_of($$SELECT idempotency.lock_key(repeat('k', 256))$$);
SELECT pg_temp.error_of($$SELECT idempotency.try_lock(NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.try_lock('')$$);
