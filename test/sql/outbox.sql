-- Transactional outbox: enqueue_event, claim_events, mark_published,
-- mark_failed (doc/reference.md, "Outbox and inbox").
\i test/sql/include/error_of.sql
-- these should all fail with 22023
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event(NULL, '1', 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('', '1', 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('order', NULL, 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('order', '', 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('order', repeat('x', 256), 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('order', '1', NULL, '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('order', '1', '', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_event('order', '1', 'created', NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events(NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events(0)$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events(-1)$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events(10, NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events(10, '0 seconds')$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events(10, '-1 minute')$$);
SELECT pg_temp.error_of($$SELECT idempotency.mark_published(NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.mark_failed(NULL, 'boom')$$);
SELECT pg_temp.error_of($$SELECT idempotency.mark_failed('{1}', NULL)$$);
-- claim_events needs a snapshot per statement
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.error_of($$SELECT * FROM idempotency.claim_events()$$);
ROLLBACK;

-- nothing to claim yet; empty id lists change nothing
SELECT count(*) FROM idempotency.claim_events();
SELECT idempotency.mark_published('{}'), idempotency.mark_failed('{}', 'x');

-- the longest names are fine; headers are optional
SELECT idempotency.enqueue_event('order', 'A', 'created', '{"n": 1}', '{"trace": "t1"}') AS a1 \gset
SELECT idempotency.enqueue_event('order', 'A', 'paid', '{"n": 2}') AS a2 \gset
SELECT idempotency.enqueue_event('order', 'B', 'created', '{"n": 1}') AS b1 \gset
SELECT idempotency.enqueue_event('order', 'A', 'shipped', '{"n": 3}') AS a3 \gset
SELECT idempotency.enqueue_event('invoice', 'A', 'created', '{"n": 1}') AS i1 \gset
SELECT idempotency.enqueue_event(repeat('t', 255), repeat('é', 255), repeat('e', 255), 'null') AS long1 \gset
SELECT :a1 < :a2 AND :a2 < :b1 AND :b1 < :a3 AND :a3 < :i1 AS ids_increase;
SELECT aggregate_type, aggregate_id, event_type, payload, headers,
       published_at IS NULL AS unpublished, attempts, locked_until IS NULL AS free,
       next_attempt_at, last_error, dead_at, created_at > now() - interval '1 minute' AS created_now
  FROM idempotency.outbox_events WHERE id <= :i1 ORDER BY id;

-- oldest first; a batch of one leases order/A's first event
SELECT id = :a1 AS is_a1, event_type, locked_until > now() + '50 seconds' AS leased
  FROM idempotency.claim_events(1, '1 minute');
-- order/A is held: its later events wait, other aggregates flow
SELECT length(aggregate_type), length(aggregate_id), length(event_type)
  FROM idempotency.claim_events(100) ORDER BY id;
SELECT count(*) FROM idempotency.claim_events(100);
-- once published, the next event of order/A comes, and only that one
-- until it is published too
SELECT idempotency.mark_published(ARRAY[:a1]);
SELECT idempotency.mark_published(ARRAY[:a1]) AS again;
SELECT event_type FROM idempotency.claim_events(100);
SELECT idempotency.mark_published(ARRAY[:a2, :b1, :i1, :long1, NULL]);
SELECT event_type FROM idempotency.claim_events(100);
SELECT idempotency.mark_published(ARRAY[:a3]);
SELECT count(*) AS unpublished FROM idempotency.outbox_events WHERE published_at IS NULL;

-- several consecutive events of one aggregate may go out in one batch,
-- in id order
SELECT count(idempotency.enqueue_event('order', 'C', 'e' || i, jsonb_build_object('i', i)))
  FROM generate_series(1, 5) i;
SELECT string_agg(event_type, ',' ORDER BY id) FROM idempotency.claim_events(3);
SELECT string_agg(event_type, ',' ORDER BY id) FROM idempotency.claim_events(3);
-- a lease that ran out is handed out again (the relay crashed), with the
-- later events of the aggregate; the events taken over count a takeover
UPDATE idempotency.outbox_events SET locked_until = now() - interval '1 second'
 WHERE aggregate_id = 'C' AND event_type IN ('e1', 'e2', 'e3');
SELECT string_agg(event_type || ':' || takeovers, ',' ORDER BY id) FROM idempotency.claim_events(10);
-- without a lease token only the events never taken over are marked; the
-- token of the lease marks the others
-- (and warns that it left the others alone)
\set VERBOSITY terse
SELECT idempotency.mark_published(array_agg(id)) FROM idempotency.outbox_events WHERE aggregate_id = 'C';
\set VERBOSITY default
SELECT idempotency.mark_published(array_agg(id), min(lease_token)) FROM idempotency.outbox_events WHERE aggregate_id = 'C';

-- mark_failed: back into the queue after the backoff; while the event
-- waits, its aggregate waits, other aggregates do not
SET idempotency.outbox_retry_backoff = '10 seconds';
SELECT idempotency.enqueue_event('order', 'D', 'd1', '{}') AS d1 \gset
SELECT idempotency.enqueue_event('order', 'D', 'd2', '{}') AS d2 \gset
SELECT idempotency.enqueue_event('order', 'E', 'e1', '{}') AS e1 \gset
SELECT event_type FROM idempotency.claim_events(1);
SELECT idempotency.mark_failed(ARRAY[:d1], 'broker down');
SELECT attempts, last_error, locked_until IS NULL AS lease_ended,
       next_attempt_at BETWEEN now() + interval '5 seconds' AND now() + interval '11 seconds' AS backoff_10s,
       dead_at IS NULL AS alive
  FROM idempotency.outbox_events WHERE id = :d1;
SELECT event_type FROM idempotency.claim_events(100);
-- its retry time has come: d1 first, then d2 behind it
UPDATE idempotency.outbox_events SET next_attempt_at = now() - interval '1 second' WHERE id = :d1;
SELECT event_type FROM idempotency.claim_events(100) ORDER BY id;
-- the second failure waits twice as long, the third four times
SELECT idempotency.mark_failed(ARRAY[:d1, :d2], 'broker down again');
SELECT id = :d1 AS is_d1, attempts,
       next_attempt_at BETWEEN now() + interval '15 seconds' AND now() + interval '21 seconds' AS backoff_20s,
       next_attempt_at BETWEEN now() + interval '5 seconds' AND now() + interval '11 seconds' AS backoff_10s
  FROM idempotency.outbox_events WHERE id IN (:d1, :d2) ORDER BY id;
UPDATE idempotency.outbox_events SET next_attempt_at = NULL WHERE id IN (:d1, :d2);
SELECT count(*) FROM idempotency.claim_events(1);
SELECT idempotency.mark_failed(ARRAY[:d1], 'third');
SELECT attempts, next_attempt_at BETWEEN now() + interval '35 seconds' AND now() + interval '41 seconds' AS backoff_40s
  FROM idempotency.outbox_events WHERE id = :d1;
-- capped at one hour: 1 minute * 2^8 would be more
SET idempotency.outbox_retry_backoff = '1 minute';
UPDATE idempotency.outbox_events SET attempts = 8, next_attempt_at = NULL WHERE id = :d1;
SELECT count(*) FROM idempotency.claim_events(1);
SELECT idempotency.mark_failed(ARRAY[:d1], 'ninth');
SELECT attempts, next_attempt_at BETWEEN now() + interval '55 minutes' AND now() + interval '61 minutes' AS capped_1h
  FROM idempotency.outbox_events WHERE id = :d1;
-- the tenth failure (idempotency.outbox_max_attempts) makes it dead:
-- never handed out again, and d2 flows
UPDATE idempotency.outbox_events SET next_attempt_at = NULL WHERE id = :d1;
SELECT count(*) FROM idempotency.claim_events(1);
SELECT idempotency.mark_failed(ARRAY[:d1], 'tenth');
SELECT attempts, last_error, dead_at IS NOT NULL AS dead, next_attempt_at, published_at
  FROM idempotency.outbox_events WHERE id = :d1;
SELECT event_type FROM idempotency.claim_events(100) ORDER BY id;
-- dead and published events are no longer pending: nothing changes
SELECT idempotency.mark_failed(ARRAY[:d1], 'late'), idempotency.mark_published(ARRAY[:d1]);
SELECT idempotency.mark_published(ARRAY[:d2, :e1]);
-- a lower limit: the first failure kills
SET idempotency.outbox_max_attempts = 1;
SELECT idempotency.enqueue_event('order', 'F', 'f1', '{}') AS f1 \gset
SELECT count(*) FROM idempotency.claim_events();
SELECT idempotency.mark_failed(ARRAY[:f1], 'poison');
SELECT attempts, dead_at IS NOT NULL AS dead FROM idempotency.outbox_events WHERE id = :f1;
RESET idempotency.outbox_max_attempts;
RESET idempotency.outbox_retry_backoff;

-- a rolled-back enqueue leaves nothing behind
BEGIN;
SELECT idempotency.enqueue_event('order', 'G', 'g1', '{}') > 0 AS enqueued;
ROLLBACK;
SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_id = 'G';

-- an application role needs EXECUTE, not access to the table
CREATE ROLE regress_outbox_app;
GRANT USAGE ON SCHEMA idempotency TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION idempotency.enqueue_event(text, text, text, jsonb, jsonb),
    idempotency.claim_events(integer, interval), idempotency.mark_published(bigint[], bigint)
  TO regress_outbox_app;
SET ROLE regress_outbox_app;
SELECT idempotency.enqueue_event('order', 'H', 'h1', '{}') AS h1 \gset
SELECT event_type FROM idempotency.claim_events();
SELECT idempotency.mark_published(ARRAY[:h1]);
-- these should fail with 42501
SELECT pg_temp.error_of($$SELECT count(*) FROM idempotency.outbox_events$$);
SELECT pg_temp.error_of(format($$SELECT idempotency.mark_failed(ARRAY[%s], 'x')$$, :h1));
RESET ROLE;
REVOKE ALL ON SCHEMA idempotency FROM regress_outbox_app;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA idempotency FROM regress_outbox_app;
DROP ROLE regress_outbox_app;

-- pg_dump keeps the events, the inbox and the id sequence
SELECT c.relname, (e.extcondition)[x.n] AS condition
  FROM pg_extension e
 CROSS JOIN LATERAL unnest(e.extconfig) WITH ORDINALITY AS x(oid, n)
  JOIN pg_class c ON c.oid = x.oid
 WHERE e.extname = 'idempotency'
   AND c.relname IN ('outbox_events', 'outbox_events_id_seq', 'processed_events')
 ORDER BY c.relname COLLATE "C";
