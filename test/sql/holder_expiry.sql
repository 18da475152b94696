-- Holder calls against the key's ttl, and the replay window set when the
-- answer is stored (doc/reference.md, "Holder functions").
\set VERBOSITY terse
\i test/sql/include/error_of.sql
\i test/sql/include/fence_of.sql
-- make a key's ttl run out now, with its holder still holding its fence
CREATE FUNCTION pg_temp.expire(k text) RETURNS void LANGUAGE sql AS $$
  UPDATE idempotency.idempotency_keys
     SET expires_at = now() - interval '1 second', locked_until = now() - interval '1 second'
   WHERE idempotency_key = k
$$;

-- these should all fail with 55000: an expired key is gone, even for the
-- fence that held it and that nobody replaced
SELECT outcome FROM idempotency.claim('ex-1', '{"n": 1}');
SELECT pg_temp.fence_of('ex-1') AS f1 \gset
SELECT pg_temp.expire('ex-1');
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('ex-1', %s, '{}')$$, :f1)) AS complete,
       pg_temp.error_of(format($$SELECT idempotency.fail('ex-1', %s, retryable => false)$$, :f1)) AS fail;
SELECT pg_temp.error_of(format($$SELECT idempotency.checkpoint('ex-1', %s, 'step', '1 hour')$$, :f1)) AS checkpoint,
       pg_temp.error_of(format($$SELECT idempotency.release('ex-1', %s)$$, :f1)) AS release;
-- nothing was stored, the checkpoint did not bring it back, and a claim
-- takes it afresh
SELECT status, response_body, recovery_point, expires_at < now() AS still_expired
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ex-1';
SELECT outcome, attempts, recovery_point FROM idempotency.claim('ex-1', '{"n": 1}');
SELECT pg_temp.fence_of('ex-1') > :f1 AS larger_fence;

-- fences that never held a key: 0, negative, the largest bigint
SELECT pg_temp.error_of($$SELECT idempotency.complete('ex-1', 0, '{}')$$) AS fence_0,
       pg_temp.error_of($$SELECT idempotency.complete('ex-1', -1, '{}')$$) AS fence_negative,
       pg_temp.error_of($$SELECT idempotency.checkpoint('ex-1', 9223372036854775807, 'x')$$) AS fence_max;

-- complete() with ttl: the answer is replayed for ttl from now
SELECT idempotency.complete('ex-1', pg_temp.fence_of('ex-1'), '{"ok": 1}', ttl => '2 hours');
SELECT expires_at = updated_at + interval '2 hours' AS window_from_now
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ex-1';
-- a short window, shorter than the claim's ttl, is fine
SELECT outcome FROM idempotency.claim('ex-2', ttl => '1 day');
SELECT idempotency.complete('ex-2', pg_temp.fence_of('ex-2'), '{}', ttl => '5 minutes');
SELECT expires_at = updated_at + interval '5 minutes' AS short_window
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ex-2';
-- NULL keeps the claim's ttl
SELECT outcome FROM idempotency.claim('ex-3', ttl => '3 hours');
SELECT idempotency.complete('ex-3', pg_temp.fence_of('ex-3'), '{}', ttl => NULL);
SELECT expires_at = created_at + interval '3 hours' AS claim_window
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ex-3';
-- a final failure too
SELECT outcome FROM idempotency.claim('ex-4');
SELECT idempotency.fail('ex-4', pg_temp.fence_of('ex-4'), '{"e": "declined"}', 402, false, ttl => '10 minutes');
SELECT status, expires_at = updated_at + interval '10 minutes' AS window_from_now
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ex-4';
SELECT outcome, response_code FROM idempotency.claim('ex-4');

-- these should all fail with 22023 and change nothing
SELECT outcome FROM idempotency.claim('ex-5');
SELECT pg_temp.error_of(format($$SELECT idempotency.fail('ex-5', %s, ttl => '1 hour')$$, pg_temp.fence_of('ex-5'))) AS retryable_with_ttl,
       pg_temp.error_of(format($$SELECT idempotency.complete('ex-5', %s, '{}', ttl => '0')$$, pg_temp.fence_of('ex-5'))) AS zero_ttl,
       pg_temp.error_of(format($$SELECT idempotency.complete('ex-5', %s, '{}', ttl => '-1 hour')$$, pg_temp.fence_of('ex-5'))) AS negative_ttl,
       pg_temp.error_of(format($$SELECT idempotency.complete('ex-5', %s, '{}', ttl => '200 years')$$, pg_temp.fence_of('ex-5'))) AS huge_ttl;
SELECT status FROM idempotency.idempotency_keys WHERE idempotency_key = 'ex-5';

-- execute() runs its statement to completion: every row is computed
CREATE SEQUENCE ex_rows;
SELECT outcome, response_body
  FROM idempotency.execute('ex-6', NULL, 'SELECT nextval(''ex_rows'') FROM generate_series(1, 3)');
SELECT last_value AS rows_computed FROM ex_rows;
DROP SEQUENCE ex_rows;

DELETE FROM idempotency.idempotency_keys;
