-- A relay that never passes lease_token: its marks of
-- an event whose lease was taken over change nothing, and warn with the
-- fix; takeovers count towards idempotency.outbox_max_attempts, so such
-- an event goes dead; stats counts the events taken over.
\set VERBOSITY default
\set SHOW_CONTEXT never
TRUNCATE idempotency.outbox_events RESTART IDENTITY;
SET idempotency.outbox_max_attempts = 3;
SELECT idempotency.enqueue_event('order', 'A', 'a1', '{}') AS a1 \gset
SELECT idempotency.enqueue_event('order', 'A', 'a2', '{}') AS a2 \gset
-- leased, the lease runs out unmarked, leased again: a takeover
SELECT count(*) AS leased FROM idempotency.claim_events(10, '1 millisecond');
SELECT pg_sleep(0.02);
SELECT count(*) AS taken_over FROM idempotency.claim_events(10, '1 millisecond');
-- the tokenless marks change nothing, and say why
SELECT idempotency.mark_failed(ARRAY[:a1], 'broker down');
SELECT idempotency.mark_published(ARRAY[:a1, :a2]);
-- no warning for an event the mark changed, or one not taken over
SELECT idempotency.enqueue_event('order', 'B', 'b1', '{}') AS b1 \gset
SELECT idempotency.mark_published(ARRAY[:b1, NULL]) AS unleased;
SELECT outbox_unpublished, outbox_dead, outbox_taken_over FROM idempotency.stats;
-- a second takeover; the third would bring attempts + takeovers to 3:
-- the claim makes both events dead instead, in the aggregate's order
SELECT pg_sleep(0.02);
SELECT count(*) AS taken_over_again FROM idempotency.claim_events(10, '1 millisecond');
SELECT pg_sleep(0.02);
SELECT count(*) AS claimed FROM idempotency.claim_events(10, '1 minute');
SELECT event_type, attempts, takeovers, dead_at IS NOT NULL AS dead, locked_until, last_error
  FROM idempotency.outbox_events ORDER BY id;
SELECT outbox_unpublished, outbox_dead, outbox_taken_over FROM idempotency.stats;
-- an event failed once with its token counts that failure too
SELECT idempotency.enqueue_event('order', 'C', 'c1', '{}') AS c1 \gset
SELECT lease_token AS t FROM idempotency.claim_events(10, '1 millisecond') \gset
SELECT idempotency.mark_failed(ARRAY[:c1], 'broker down', :t) AS failed_with_token;
UPDATE idempotency.outbox_events SET next_attempt_at = now() WHERE id = :c1;
SELECT count(*) AS retried FROM idempotency.claim_events(10, '1 millisecond');
SELECT pg_sleep(0.02);
SELECT count(*) AS taken_over FROM idempotency.claim_events(10, '1 millisecond');
SELECT pg_sleep(0.02);
SELECT count(*) AS claimed FROM idempotency.claim_events(10, '1 minute');
SELECT attempts, takeovers, dead_at IS NOT NULL AS dead FROM idempotency.outbox_events WHERE id = :c1;
RESET idempotency.outbox_max_attempts;
TRUNCATE idempotency.outbox_events;
