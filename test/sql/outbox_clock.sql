-- Outbox times are read from the clock when each call starts its work
-- (doc/reference.md, "General rules"), not at the start of the statement
-- or transaction around it: a lease granted late in a long statement, or
-- in a procedure after a COMMIT, lasts its full length from the call, and
-- so do retry waits; a publication time is when the mark ran.
SET idempotency.outbox_retry_backoff = '1 second';
DELETE FROM idempotency.outbox_events;
SELECT idempotency.enqueue_event('order', 'T', 't1', '{}') > 0 AS enqueued;

-- late in a long statement (a DO block sleeping first)
DO $$
DECLARE
  before timestamptz;
  lease_end timestamptz;
BEGIN
  PERFORM pg_sleep(0.3);
  before := clock_timestamp();
  SELECT locked_until INTO lease_end FROM idempotency.claim_events(1, '1 second');
  RAISE NOTICE 'lease from the call: %, not later than the call: %',
    lease_end >= before + interval '1 second',
    lease_end <= clock_timestamp() + interval '1 second';
  PERFORM pg_sleep(0.3);
  before := clock_timestamp();
  PERFORM idempotency.mark_failed(ARRAY(SELECT id FROM idempotency.outbox_events), 'down');
  RAISE NOTICE 'retry from the call: %',
    (SELECT next_attempt_at >= before + interval '1 second' FROM idempotency.outbox_events);
END $$;

-- in a procedure, after a COMMIT (whose transaction starts within the
-- CALL statement), once the retry wait is over
CREATE PROCEDURE regress_relay_step() LANGUAGE plpgsql AS $$
DECLARE
  before timestamptz;
  lease_end timestamptz;
BEGIN
  PERFORM pg_sleep(1.1);
  COMMIT;
  before := clock_timestamp();
  SELECT locked_until INTO lease_end FROM idempotency.claim_events(1, '1 second');
  RAISE NOTICE 'claimed after the COMMIT: %, lease from the call: %',
    lease_end IS NOT NULL, lease_end >= before + interval '1 second';
  COMMIT;
  PERFORM pg_sleep(0.3);
  before := clock_timestamp();
  PERFORM idempotency.mark_published(ARRAY(SELECT id FROM idempotency.outbox_events));
  RAISE NOTICE 'published at the call: %',
    (SELECT published_at >= before FROM idempotency.outbox_events);
END $$;
CALL regress_relay_step();

DROP PROCEDURE regress_relay_step();
DELETE FROM idempotency.outbox_events;
RESET idempotency.outbox_retry_backoff;
