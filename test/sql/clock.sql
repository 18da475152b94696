-- The clock rule (doc/reference.md, "Time"): a call reads the clock when
-- it starts its work, not when its statement or transaction started, so a
-- lease is never granted already run out.
\set VERBOSITY terse
-- late in a long statement: the third claim starts about 2 seconds after
-- the statement; with a lease of 2 seconds it must still be live after
-- the statement ends
SELECT g, (c).outcome
  FROM (SELECT g, idempotency.claim('clock-' || g, lease => '2 seconds', ttl => '1 hour') AS c,
               pg_sleep(1)
          FROM generate_series(1, 3) AS g) s;
SELECT outcome FROM idempotency.claim('clock-3', lease => '2 seconds', ttl => '1 hour');
SELECT locked_until > clock_timestamp() AS lease_still_live,
       created_at > statement_timestamp() - interval '1 hour' AND
       created_at >= (SELECT created_at FROM idempotency.idempotency_keys WHERE idempotency_key = 'clock-1')
         + interval '1.9 seconds' AS created_when_claimed
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'clock-3';

-- in a procedure after a COMMIT: the statement (CALL) started 3 seconds
-- before the claim
CREATE PROCEDURE clock_worker(k text)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_sleep(3);
  COMMIT;
  PERFORM idempotency.claim(k, lease => '2 seconds', ttl => '1 hour');
  COMMIT;
END
$$;
CALL clock_worker('clock-proc');
-- the holder has only just started: a duplicate finds it in progress
SELECT outcome, retry_after > interval '1 second' AS most_of_the_lease_left
  FROM idempotency.claim('clock-proc', lease => '2 seconds', ttl => '1 hour');

-- an answer stored late in a statement is kept for ttl from then: here
-- 2 seconds after the statement started, with a ttl of 1.5 seconds
SELECT count(*) FROM (
  SELECT pg_sleep(2), idempotency.complete('clock-1', k.fence, '{"ok": true}', ttl => '1.5 seconds')
    FROM idempotency.idempotency_keys k WHERE k.idempotency_key = 'clock-1') s;
SELECT outcome, response_body FROM idempotency.claim('clock-1');
DROP PROCEDURE clock_worker(text);
DELETE FROM idempotency.idempotency_keys;
