-- Holder calls: complete, fail, checkpoint, release, and fencing.
\set VERBOSITY terse
CREATE FUNCTION pg_temp.fence_of(k text, sc text DEFAULT '') RETURNS bigint
LANGUAGE sql AS $$
  SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = k AND scope = sc
$$;
\i test/sql/include/error_of.sql

-- complete: stores code and body; the key is no longer held
SELECT outcome FROM idempotency.claim('h-1', '{"n": 1}');
SELECT idempotency.complete('h-1', pg_temp.fence_of('h-1'), '{"id": 1}');
SELECT status, response_code, response_body, locked_until IS NULL AS lease_ended
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'h-1';
-- a second complete with the same fence: the key is finished, 55000
SELECT pg_temp.error_of($$SELECT idempotency.complete('h-1', pg_temp.fence_of('h-1'), '{}')$$);
-- fail and checkpoint and release on a finished key: 55000
SELECT pg_temp.error_of($$SELECT idempotency.fail('h-1', pg_temp.fence_of('h-1'))$$);
SELECT pg_temp.error_of($$SELECT idempotency.checkpoint('h-1', pg_temp.fence_of('h-1'), 'x')$$);
SELECT pg_temp.error_of($$SELECT idempotency.release('h-1', pg_temp.fence_of('h-1'))$$);
-- an unknown key, or the right key in another scope: 55000
SELECT pg_temp.error_of($$SELECT idempotency.complete('never-claimed', 1, '{}')$$);
SELECT outcome FROM idempotency.claim('h-2', NULL, 'scope-a');
SELECT pg_temp.error_of($$SELECT idempotency.complete('h-2', pg_temp.fence_of('h-2', 'scope-a'), '{}')$$);
SELECT idempotency.complete('h-2', pg_temp.fence_of('h-2', 'scope-a'), '{}', 200, 'scope-a');

-- a stale fence: the key was resumed by a new holder
SELECT outcome FROM idempotency.claim('h-3', '{"n": 3}');
CREATE TEMP TABLE old_holder AS SELECT pg_temp.fence_of('h-3') AS fence;
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE idempotency_key = 'h-3';
SELECT outcome, attempts FROM idempotency.claim('h-3', '{"n": 3}');
SELECT pg_temp.fence_of('h-3') > fence AS new_fence_is_larger FROM old_holder;
SELECT pg_temp.error_of($$SELECT idempotency.complete('h-3', (SELECT fence FROM old_holder), '{"by": "old"}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.checkpoint('h-3', (SELECT fence FROM old_holder), 'late')$$);
SELECT idempotency.complete('h-3', pg_temp.fence_of('h-3'), '{"by": "new"}');
SELECT response_body FROM idempotency.lookup('h-3');
-- in a transaction, the stale holder's error rolls back its own writes
CREATE TEMP TABLE side_effects (k text);
BEGIN;
INSERT INTO side_effects VALUES ('h-3 by old holder');
SELECT idempotency.complete('h-3', (SELECT fence FROM old_holder), '{"by": "old"}');
COMMIT;
SELECT count(*) AS side_effects_kept FROM side_effects;

-- the full message of a lost lease
\set VERBOSITY default
SELECT idempotency.complete('h-3', 1, '{}');
\set VERBOSITY terse

-- fail: retryable (default) keeps the error until the next claim resumes
SELECT outcome FROM idempotency.claim('h-4', '{"n": 4}');
SELECT idempotency.fail('h-4', pg_temp.fence_of('h-4'), '{"error": "timeout"}');
SELECT status, retryable, response_code, response_body
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'h-4';
SELECT outcome, attempts, response_body IS NULL AS error_cleared
  FROM idempotency.claim('h-4', '{"n": 4}');
-- fail: final; the error is the stored answer
SELECT idempotency.fail('h-4', pg_temp.fence_of('h-4'), '{"error": "declined"}', 402, false);
SELECT outcome, status, response_code, response_body FROM idempotency.claim('h-4', '{"n": 4}');
-- fail without an error body
SELECT outcome FROM idempotency.claim('h-5');
SELECT idempotency.fail('h-5', pg_temp.fence_of('h-5'), NULL, 503);
SELECT status, response_code, response_body IS NULL AS no_body
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'h-5';

-- checkpoint: records the recovery point and extends the lease
SELECT outcome FROM idempotency.claim('h-6', NULL, '', '1 day', '1 second');
SELECT idempotency.checkpoint('h-6', pg_temp.fence_of('h-6'), 'charged', '10 minutes');
SELECT recovery_point, locked_until - now() > '9 minutes' AS lease_extended
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'h-6';
-- NULL recovery point keeps it; NULL lease means idempotency.lease_timeout
SELECT idempotency.checkpoint('h-6', pg_temp.fence_of('h-6'), NULL);
SELECT recovery_point, locked_until - now() <= '30 seconds' AS default_lease
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'h-6';
-- a resumed holder starts from the last recovery point
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE idempotency_key = 'h-6';
SELECT outcome, recovery_point, attempts FROM idempotency.claim('h-6');
SELECT idempotency.checkpoint('h-6', pg_temp.fence_of('h-6'), 'shipped');
SELECT idempotency.complete('h-6', pg_temp.fence_of('h-6'), '{"done": true}');
SELECT outcome, recovery_point, attempts FROM idempotency.claim('h-6');

-- release: forgets the claim; the next claim starts afresh
SELECT outcome FROM idempotency.claim('h-7', '{"bad": "input"}');
SELECT idempotency.release('h-7', pg_temp.fence_of('h-7'));
SELECT idempotency.lookup('h-7') IS NULL AS forgotten;
SELECT outcome, attempts FROM idempotency.claim('h-7', '{"good": "input"}');

-- response size: idempotency.max_response_bytes bounds the stored jsonb
SET idempotency.max_response_bytes = 100;
SELECT outcome FROM idempotency.claim('h-8');
SELECT pg_temp.error_of($$SELECT idempotency.complete('h-8', pg_temp.fence_of('h-8'), to_jsonb(repeat('x', 200)))$$);
SELECT pg_temp.error_of($$SELECT idempotency.fail('h-8', pg_temp.fence_of('h-8'), to_jsonb(repeat('x', 200)))$$);
SELECT idempotency.complete('h-8', pg_temp.fence_of('h-8'), to_jsonb(repeat('x', 50)));
RESET idempotency.max_response_bytes;
-- a large body within the limit is stored (and TOASTed) intact
SELECT outcome FROM idempotency.claim('h-9');
SELECT idempotency.complete('h-9', pg_temp.fence_of('h-9'),
                            jsonb_build_object('blob', repeat('abc', 100000)));
SELECT length(response_body->>'blob') FROM idempotency.claim('h-9');
