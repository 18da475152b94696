-- claim(): every outcome, scopes, NULL request, expiry, lookup.
-- Fences come from a sequence shared by all tests, so only their order is shown.
CREATE TEMP TABLE seen (step text, outcome text, fence bigint, status text,
                        response_code int, response_body jsonb,
                        recovery_point text, attempts int, retry_after interval);
CREATE FUNCTION pg_temp.claim_step(step text, k text, req jsonb,
                                   sc text DEFAULT '', ttl interval DEFAULT NULL,
                                   lease interval DEFAULT NULL)
RETURNS TABLE (outcome text, has_fence boolean, status text, response_code int,
               response_body jsonb, recovery_point text, attempts int,
               retry_after_set boolean)
LANGUAGE sql AS $$
  INSERT INTO seen SELECT step, c.* FROM idempotency.claim(k, req, sc, ttl, lease) c
  RETURNING outcome, fence IS NOT NULL, status::text, response_code, response_body,
            recovery_point, attempts, retry_after IS NOT NULL;
$$;

-- claimed: a fresh key
SELECT * FROM pg_temp.claim_step('first', 'pay-1', '{"amount": 100, "currency": "EUR"}');
-- in_progress: same request while the lease is live; retry_after is the time left
SELECT * FROM pg_temp.claim_step('dup', 'pay-1', '{"currency": "EUR", "amount": 100}');
SELECT retry_after > '0' AND retry_after <= '30 seconds' AS retry_after_within_lease
  FROM seen WHERE step = 'dup';
-- mismatch: another body under the same key; nothing changes
SELECT * FROM pg_temp.claim_step('other body', 'pay-1', '{"amount": 999, "currency": "EUR"}');
SELECT status, attempts, fence = (SELECT fence FROM seen WHERE step = 'first') AS same_fence
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'pay-1';

-- replay: completed; the stored answer comes back, nothing re-executed
SELECT idempotency.complete('pay-1', (SELECT fence FROM seen WHERE step = 'first'),
                            '{"payment_id": 7}', 201);
SELECT * FROM pg_temp.claim_step('retry', 'pay-1', '{"amount": 100, "currency": "EUR"}');
-- mismatch also on a completed key
SELECT * FROM pg_temp.claim_step('other body after', 'pay-1', '{"amount": 1}');

-- resumed: the holder crashed (its lease ran out) ...
SELECT * FROM pg_temp.claim_step('crash-1', 'pay-2', '{"amount": 5}');
SELECT idempotency.checkpoint('pay-2', (SELECT fence FROM seen WHERE step = 'crash-1'), 'charged');
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE idempotency_key = 'pay-2';
SELECT * FROM pg_temp.claim_step('crash-2', 'pay-2', '{"amount": 5}');
SELECT (SELECT fence FROM seen WHERE step = 'crash-2') >
       (SELECT fence FROM seen WHERE step = 'crash-1') AS fence_increased;
-- ... and a lease that really runs out
SELECT * FROM pg_temp.claim_step('short-1', 'pay-3', NULL, '', '1 hour', '200 ms');
SELECT pg_sleep(0.3);
SELECT * FROM pg_temp.claim_step('short-2', 'pay-3', NULL);

-- resumed: a retryable failure; replay: a final one
SELECT * FROM pg_temp.claim_step('f1', 'pay-4', '{"x": 1}');
SELECT idempotency.fail('pay-4', (SELECT fence FROM seen WHERE step = 'f1'),
                        '{"error": "gateway timeout"}', 504);
SELECT * FROM pg_temp.claim_step('f2', 'pay-4', '{"x": 1}');
SELECT idempotency.fail('pay-4', (SELECT fence FROM seen WHERE step = 'f2'),
                        '{"error": "card declined"}', 402, retryable => false);
SELECT * FROM pg_temp.claim_step('f3', 'pay-4', '{"x": 1}');

-- expiry: an expired completed key is claimed afresh, with a new fence
SELECT * FROM pg_temp.claim_step('e1', 'pay-5', '{"v": 1}', '', '1 second', '1 second');
SELECT idempotency.complete('pay-5', (SELECT fence FROM seen WHERE step = 'e1'), '"done"');
SELECT pg_sleep(1.1);
SELECT idempotency.lookup('pay-5') IS NULL AS expired_reads_as_null;
-- ... even with another body: an expired key is gone
SELECT * FROM pg_temp.claim_step('e2', 'pay-5', '{"v": 2}');
SELECT (SELECT fence FROM seen WHERE step = 'e2') >
       (SELECT fence FROM seen WHERE step = 'e1') AS fence_increased;
-- ttl equal to the lease is fine; the key's expiry covers every extended lease
SELECT outcome FROM idempotency.claim('pay-6', NULL, '', '30 seconds', '30 seconds');
SELECT idempotency.checkpoint('pay-6', (SELECT fence FROM idempotency.idempotency_keys
                                        WHERE idempotency_key = 'pay-6'), 'step', '1 hour');
SELECT expires_at >= locked_until AS expiry_covers_lease
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'pay-6';

-- scopes: the same key in two scopes is two keys; '' is the default scope
SELECT * FROM pg_temp.claim_step('tenant a', 'shared', '{"a": 1}', 'tenant-a');
SELECT * FROM pg_temp.claim_step('tenant b', 'shared', '{"b": 1}', 'tenant-b');
SELECT * FROM pg_temp.claim_step('default', 'shared', '{"c": 1}');
SELECT scope, idempotency_key FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'shared' ORDER BY scope COLLATE "C";

-- NULL request: the payload is not compared, on either side
SELECT * FROM pg_temp.claim_step('n1', 'pay-7', NULL);
SELECT idempotency.complete('pay-7', (SELECT fence FROM seen WHERE step = 'n1'), '{}');
SELECT * FROM pg_temp.claim_step('n2', 'pay-7', '{"anything": true}');
SELECT * FROM pg_temp.claim_step('n3', 'pay-7', NULL);

-- keys are counted in characters: 255 multibyte characters are fine
SELECT outcome FROM idempotency.claim(repeat('é', 255));
SELECT outcome FROM idempotency.claim('ключ-💳', '{"сумма": 1}', 'область');
SET idempotency.max_key_length = 10;
SELECT outcome FROM idempotency.claim('0123456789');
RESET idempotency.max_key_length;

-- settings apply to the next claim
SET idempotency.lease_timeout = '5 minutes';
SET idempotency.default_ttl = '2 hours';
SELECT outcome FROM idempotency.claim('pay-8');
SELECT locked_until - created_at AS lease, expires_at - created_at AS ttl
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'pay-8';
RESET idempotency.lease_timeout;
RESET idempotency.default_ttl;

-- lookup: the row, or NULL
SELECT idempotency_key, status, response_code, response_body, attempts
  FROM idempotency.lookup('pay-1');
SELECT idempotency.lookup('no-such-key') IS NULL AS absent;
SELECT (idempotency.lookup('shared', 'tenant-a')).request_hash =
       idempotency.fingerprint('{"a": 1}') AS stores_fingerprint;
