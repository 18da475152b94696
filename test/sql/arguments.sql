-- Every bad argument of request keys, tokens and locks, and its SQLSTATE (doc/reference.md, "Errors").
\i test/sql/include/error_of.sql
SELECT outcome FROM idempotency.claim('held', NULL, '', NULL, '1 hour');
CREATE TEMP TABLE cases (n serial, sql text);
INSERT INTO cases (sql) VALUES
  -- claim
  ($$SELECT idempotency.claim(NULL)$$),
  ($$SELECT idempotency.claim('')$$),
  ($$SELECT idempotency.claim(repeat('k', 256))$$),
  ($$SELECT idempotency.claim(repeat('é', 256))$$),
  ($$SELECT idempotency.claim('k', NULL, NULL)$$),
  ($$SELECT idempotency.claim('k', NULL, repeat('s', 256))$$),
  ($$SELECT idempotency.claim('k', NULL, '', '0 seconds')$$),
  ($$SELECT idempotency.claim('k', NULL, '', '-1 hour')$$),
  ($$SELECT idempotency.claim('k', NULL, '', '1000 years')$$),
  ($$SELECT idempotency.claim('k', NULL, '', '1 hour', '0 seconds')$$),
  ($$SELECT idempotency.claim('k', NULL, '', '1 hour', '-5 seconds')$$),
  ($$SELECT idempotency.claim('k', NULL, '', '10 seconds')$$),
  ($$SELECT idempotency.claim('k', NULL, '', '1 minute', '2 minutes')$$),
  -- complete
  ($$SELECT idempotency.complete(NULL, 1, '{}')$$),
  ($$SELECT idempotency.complete('', 1, '{}')$$),
  ($$SELECT idempotency.complete('held', NULL, '{}')$$),
  ($$SELECT idempotency.complete('held', 1, NULL)$$),
  ($$SELECT idempotency.complete('held', 1, '{}', NULL)$$),
  ($$SELECT idempotency.complete('held', 1, '{}', 99)$$),
  ($$SELECT idempotency.complete('held', 1, '{}', 600)$$),
  ($$SELECT idempotency.complete('held', 1, '{}', 200, NULL)$$),
  ($$SELECT idempotency.complete('held', 1, '{}', 200, repeat('s', 256))$$),
  -- fail
  ($$SELECT idempotency.fail(NULL, 1)$$),
  ($$SELECT idempotency.fail('held', NULL)$$),
  ($$SELECT idempotency.fail('held', 1, NULL, NULL)$$),
  ($$SELECT idempotency.fail('held', 1, NULL, 500, NULL)$$),
  ($$SELECT idempotency.fail('held', 1, NULL, 500, true, NULL)$$),
  -- checkpoint
  ($$SELECT idempotency.checkpoint(NULL, 1, 'p')$$),
  ($$SELECT idempotency.checkpoint('held', NULL, 'p')$$),
  ($$SELECT idempotency.checkpoint('held', 1, '')$$),
  ($$SELECT idempotency.checkpoint('held', 1, 'p', '0 seconds')$$),
  ($$SELECT idempotency.checkpoint('held', 1, 'p', NULL, NULL)$$),
  -- release
  ($$SELECT idempotency.release(NULL, 1)$$),
  ($$SELECT idempotency.release('held', NULL)$$),
  ($$SELECT idempotency.release('held', 1, NULL)$$),
  -- lookup
  ($$SELECT idempotency.lookup(NULL)$$),
  ($$SELECT idempotency.lookup('')$$),
  ($$SELECT idempotency.lookup('held', NULL)$$),
  -- execute
  ($$SELECT idempotency.execute(NULL, NULL, 'SELECT 1')$$),
  ($$SELECT idempotency.execute('k', NULL, 'SELECT 1', '{}', NULL)$$),
  ($$SELECT idempotency.execute('k', NULL, 'SELECT 1', '{}', '', '-1 day')$$),
  -- a stale fence on a held key
  ($$SELECT idempotency.complete('held', 0, '{}')$$);
SELECT n, pg_temp.error_of(sql) FROM cases ORDER BY n;
-- nothing was claimed or changed by any of them
SELECT idempotency_key, status FROM idempotency.idempotency_keys
 WHERE idempotency_key IN ('k', 'held') ORDER BY 1;

-- settings are bounded
SELECT pg_temp.error_of($$SET idempotency.lease_timeout = '0'$$);
SELECT pg_temp.error_of($$SET idempotency.lease_timeout = '-1 second'$$);
SELECT pg_temp.error_of($$SET idempotency.default_ttl = 'soon'$$);
SELECT pg_temp.error_of($$SET idempotency.token_ttl = '200 years'$$);
SELECT pg_temp.error_of($$SET idempotency.max_key_length = 0$$);
SELECT pg_temp.error_of($$SET idempotency.max_key_length = 401$$);
SELECT pg_temp.error_of($$SET idempotency.max_response_bytes = 0$$);
SELECT pg_temp.error_of($$SET idempotency.unknown_setting = 1$$);
SET idempotency.lease_timeout = 'PT45S';
SHOW idempotency.lease_timeout;
SET idempotency.lease_timeout = '2 min';
SHOW idempotency.lease_timeout;
RESET idempotency.lease_timeout;
-- (make test's second pass sets idempotency.direct_writes off: its boot_val)
SELECT name, CASE WHEN name = 'idempotency.direct_writes' THEN boot_val ELSE setting END AS setting,
       context
  FROM pg_settings WHERE name LIKE 'idempotency.%' ORDER BY name;
-- a default lease longer than the ttl: 22023 too
SET idempotency.lease_timeout = '2 hours';
SELECT pg_temp.error_of($$SELECT idempotency.claim('k', NULL, '', '1 hour')$$);
RESET idempotency.lease_timeout;
