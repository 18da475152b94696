-- pgTAP: the shape of request keys, tokens and locks (doc/reference.md),
-- and their contract in a
-- transaction that is rolled back.
BEGIN;
SELECT plan(40);

SELECT has_schema('idempotency');
SELECT has_table('idempotency', 'idempotency_keys', 'request keys table');
SELECT col_is_pk('idempotency', 'idempotency_keys', 'key_hash', 'keys: PK key_hash (since 1.2)');
SELECT col_type_is('idempotency', 'idempotency_keys', 'request_hash', 'bytea', 'request_hash is bytea');
SELECT col_type_is('idempotency', 'idempotency_keys', 'status', 'idempotency.key_status', 'status is key_status');
SELECT col_type_is('idempotency', 'idempotency_keys', 'fence', 'bigint', 'fence is bigint');
SELECT col_type_is('idempotency', 'idempotency_keys', 'expires_at', 'timestamp with time zone', 'expires_at is timestamptz');
SELECT enum_has_labels('idempotency', 'key_status', ARRAY['processing', 'completed', 'failed']);
SELECT has_table('idempotency', 'tokens', 'tokens table');

SELECT has_function('idempotency', 'fingerprint', ARRAY['jsonb']);
SELECT has_function('idempotency', 'claim', ARRAY['text', 'jsonb', 'text', 'interval', 'interval', 'interval']);
SELECT has_function('idempotency', 'complete', ARRAY['text', 'bigint', 'jsonb', 'integer', 'text', 'interval', 'interval']);
SELECT has_function('idempotency', 'fail', ARRAY['text', 'bigint', 'jsonb', 'integer', 'boolean', 'text', 'interval', 'interval']);
SELECT has_function('idempotency', 'checkpoint', ARRAY['text', 'bigint', 'text', 'interval', 'text']);
SELECT has_function('idempotency', 'release', ARRAY['text', 'bigint', 'text']);
SELECT has_function('idempotency', 'lookup', ARRAY['text', 'text']);
SELECT has_function('idempotency', 'execute', ARRAY['text', 'jsonb', 'text', 'text[]', 'text', 'interval', 'interval', 'interval']);
SELECT has_function('idempotency', 'issue_token', ARRAY['text', 'interval']);
SELECT has_function('idempotency', 'consume_token', ARRAY['uuid', 'text']);
SELECT has_function('idempotency', 'lock_key', ARRAY['text']);
SELECT has_function('idempotency', 'try_lock', ARRAY['text']);
SELECT volatility_is('idempotency', 'fingerprint', ARRAY['jsonb'], 'immutable');
SELECT volatility_is('idempotency', 'claim', ARRAY['text', 'jsonb', 'text', 'interval', 'interval', 'interval'], 'volatile');

-- nothing is usable by PUBLIC
SELECT is(has_function_privilege('public', 'idempotency.claim(text,jsonb,text,interval,interval,interval)', 'EXECUTE'),
          false, 'PUBLIC cannot execute claim');
SELECT is(has_table_privilege('public', 'idempotency.idempotency_keys', 'SELECT'),
          false, 'PUBLIC cannot read the keys');
SELECT is(has_schema_privilege('public', 'idempotency', 'USAGE'), false, 'PUBLIC has no schema usage');

-- the contract
SELECT is((idempotency.claim('tap-1', '{"a": 1}')).outcome, 'claimed', 'a fresh key is claimed');
SELECT is((idempotency.claim('tap-1', '{"a": 1}')).outcome, 'in_progress', 'a held key is in progress');
SELECT is((idempotency.claim('tap-1', '{"a": 2}')).outcome, 'mismatch', 'another body is a mismatch');
SELECT lives_ok($$SELECT idempotency.complete('tap-1', (SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'tap-1'), '{"ok": 1}')$$,
                'the holder completes');
SELECT results_eq($$SELECT outcome, response_code, response_body FROM idempotency.claim('tap-1', '{"a": 1}')$$,
                  $$VALUES ('replay', 200, '{"ok": 1}'::jsonb)$$, 'a completed key replays');
SELECT throws_ok($$SELECT idempotency.complete('tap-1', 0, '{}')$$, '55000', NULL, 'a stale fence is refused');
SELECT throws_ok($$SELECT idempotency.claim('')$$, '22023', NULL, 'an empty key is refused');
SELECT throws_ok($$SELECT idempotency.claim('k', NULL, NULL)$$, '22023', NULL, 'a NULL scope is refused');
SELECT throws_ok($$SELECT idempotency.claim('k', NULL, '', '5 seconds')$$, '22023', NULL, 'a ttl shorter than the lease is refused');
SELECT throws_ok($$SELECT idempotency.execute('k', NULL, 'SELECT 1; SELECT 2')$$, '42601', NULL, 'execute runs one statement');
SELECT is(idempotency.consume_token(idempotency.issue_token()), true, 'a fresh token is consumed');
SELECT is(idempotency.lock_key('x'), ('x' || left(encode(sha256('x'::bytea), 'hex'), 16))::bit(64)::bigint,
          'lock_key is the first 8 bytes of SHA-256');
SELECT ok(idempotency.try_lock('tap-lock'), 'try_lock takes a free lock');
SELECT is(length(idempotency.fingerprint('{}')), 32, 'a fingerprint is 32 bytes');

SELECT * FROM finish();
ROLLBACK;
