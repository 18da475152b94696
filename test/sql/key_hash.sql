-- key_hash (doc/reference.md, "Table idempotency_keys"): since 1.3 a plain
-- column that the library writes, so that logical replication sends the
-- primary key; a trigger holds it to idempotency.key_hash(scope, key) (1.4;
-- a CHECK constraint in 1.3), and a
-- row inserted without it (a dump of 1.2, a 1.2 publisher) gets it.
SELECT attname, attgenerated = '' AS plain_column, attnotnull
  FROM pg_attribute
 WHERE attrelid = 'idempotency.idempotency_keys'::regclass AND attname = 'key_hash';
-- the replica identity is the primary key on key_hash
SELECT c.relreplident, i.indexrelid::regclass AS identity_index,
       pg_get_indexdef(i.indexrelid) AS definition
  FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
 WHERE c.oid = 'idempotency.idempotency_keys'::regclass;
SELECT tgname, tgenabled FROM pg_trigger
 WHERE tgrelid = 'idempotency.idempotency_keys'::regclass AND NOT tgisinternal;
-- the library writes it
SELECT outcome FROM idempotency.claim('kh-1', scope => 'shop');
SELECT key_hash = idempotency.key_hash('shop', 'kh-1') AS written FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'kh-1';
-- a row without it gets it, as a restored 1.2 dump's rows do
INSERT INTO idempotency.idempotency_keys (scope, idempotency_key, status, fence, response_code,
       response_body, expires_at)
VALUES ('', 'kh-restored', 'completed', nextval('idempotency.fence_seq'), 201, '{"id": 3}',
        now() + interval '1 hour');
SELECT outcome, response_code, response_body FROM idempotency.claim('kh-restored');
-- also in a replica session (logical replication's apply worker)
SET session_replication_role = replica;
INSERT INTO idempotency.idempotency_keys (scope, idempotency_key, status, fence, expires_at)
VALUES ('', 'kh-replica', 'processing', nextval('idempotency.fence_seq'), now() + interval '1 hour');
RESET session_replication_role;
SELECT key_hash = idempotency.key_hash('', 'kh-replica') AS filled FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'kh-replica';
-- a wrong hash is refused, on insert and when the key is changed by hand
\set VERBOSITY sqlstate
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, status, fence, expires_at)
VALUES (idempotency.key_hash('', 'other'), '', 'kh-wrong', 'processing', 1, now() + interval '1 hour');
UPDATE idempotency.idempotency_keys SET idempotency_key = 'kh-renamed' WHERE idempotency_key = 'kh-1';
UPDATE idempotency.idempotency_keys SET key_hash = idempotency.key_hash('', 'other')
 WHERE idempotency_key = 'kh-1';
UPDATE idempotency.idempotency_keys SET scope = 'elsewhere' WHERE idempotency_key = 'kh-1';
\set VERBOSITY default
-- a change of the three columns that keeps them consistent is allowed, and
-- updates of the other columns do not look at the hash
UPDATE idempotency.idempotency_keys SET scope = 'elsewhere', key_hash = idempotency.key_hash('elsewhere', 'kh-1')
 WHERE idempotency_key = 'kh-1';
UPDATE idempotency.idempotency_keys SET response_code = 299 WHERE idempotency_key = 'kh-1';
SELECT scope, response_code, key_hash = idempotency.key_hash(scope, idempotency_key) AS consistent
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'kh-1';
DELETE FROM idempotency.idempotency_keys;
