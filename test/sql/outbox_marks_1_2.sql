-- A database still at 1.2 served by this library:
-- 1.2 has no takeovers column and this library keeps no per-session lease
-- map, so a mark without lease_token could clear the live lease of the
-- relay that took the event over.  Such a mark is refused with 55000 and
-- a hint; marks with the token are checked as at 1.2.
CREATE DATABASE regress_outbox_1_2;
\c regress_outbox_1_2
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE EXTENSION idempotency VERSION '1.2';
SELECT idempotency.enqueue_event('order', 'A', 'a1', '{}') AS a1 \gset
-- relay A leases the event, its lease runs out, relay B takes it over
SELECT lease_token AS token_a FROM idempotency.claim_events(10, '1 millisecond') \gset
SELECT pg_sleep(0.05);
SELECT lease_token AS token_b FROM idempotency.claim_events(10, '10 minutes') \gset
SELECT :token_b > :token_a AS taken_over;
-- A's tokenless marks are refused, with the fix; B's lease stays
SELECT idempotency.mark_failed(ARRAY[:a1], 'stale relay');
SELECT idempotency.mark_published(ARRAY[:a1]);
SELECT lease_token = :token_b AS b_holds, locked_until > now() AS live, attempts
  FROM idempotency.outbox_events WHERE id = :a1;
-- A's token changes nothing; B's marks
SELECT idempotency.mark_failed(ARRAY[:a1], 'stale relay', :token_a) AS stale_token;
SELECT idempotency.mark_published(ARRAY[:a1], :token_b) AS live_token;
SELECT published_at IS NOT NULL AS published, attempts
  FROM idempotency.outbox_events WHERE id = :a1;
\c contrib_regression
DROP DATABASE regress_outbox_1_2;
