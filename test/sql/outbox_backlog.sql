-- claim_events with a backlog of a million events: the three statements it
-- runs (src/outbox.c: find_candidates, read_aggregates, lease_events) are
-- served by indexes, never by a sequential scan.  The statements below are
-- theirs (without the schema-qualified operators), with the same parameters.
\set VERBOSITY terse
TRUNCATE idempotency.outbox_events;
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', (i % 10000)::text, 'created', jsonb_build_object('n', i)
  FROM generate_series(1, 1000000) i;
ANALYZE idempotency.outbox_events;
SELECT min(id) - 1 AS before FROM idempotency.outbox_events \gset

PREPARE find_candidates(timestamptz, int) AS
SELECT e.id, e.aggregate_type, e.aggregate_id
  FROM idempotency.outbox_events e
 WHERE e.published_at IS NULL AND e.dead_at IS NULL
   AND (e.locked_until IS NULL OR e.locked_until <= $1)
   AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= $1)
   AND NOT (ROW(e.aggregate_type, e.aggregate_id) = ANY (
        SELECT h.aggregate_type, h.aggregate_id FROM idempotency.outbox_events h
         WHERE h.published_at IS NULL AND h.dead_at IS NULL
           AND (h.locked_until IS NOT NULL OR h.next_attempt_at IS NOT NULL)
           AND NOT ((h.locked_until IS NULL OR h.locked_until <= $1)
                    AND (h.next_attempt_at IS NULL OR h.next_attempt_at <= $1))))
 ORDER BY e.id LIMIT $2;
PREPARE read_aggregates(timestamptz, bigint[]) AS
SELECT e.id, e.free, a.last
  FROM (SELECT c.aggregate_type, c.aggregate_id, max(c.id) AS last, count(*) AS n
          FROM idempotency.outbox_events c WHERE c.id = ANY ($2)
         GROUP BY c.aggregate_type, c.aggregate_id) a,
       LATERAL (SELECT e.id, (e.locked_until IS NULL OR e.locked_until <= $1)
                             AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= $1) AS free
                  FROM idempotency.outbox_events e
                 WHERE e.aggregate_type = a.aggregate_type AND e.aggregate_id = a.aggregate_id
                   AND e.id <= a.last AND e.published_at IS NULL AND e.dead_at IS NULL
                 ORDER BY e.id LIMIT a.n + 1) e
 ORDER BY a.last, e.id;
PREPARE lease_events(timestamptz, bigint[], interval) AS
WITH claimed AS (
  UPDATE idempotency.outbox_events e SET locked_until = $1 + $3
   WHERE e.id = ANY ($2) AND e.published_at IS NULL AND e.dead_at IS NULL
     AND (e.locked_until IS NULL OR e.locked_until <= $1)
     AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= $1)
  RETURNING e.*)
SELECT * FROM claimed ORDER BY id;

-- custom plans (the first executions) and the generic plan
EXPLAIN (COSTS OFF) EXECUTE find_candidates('2030-01-01 00:00:00+00', 1000);
EXPLAIN (COSTS OFF) EXECUTE read_aggregates('2030-01-01 00:00:00+00', '{1,2,3}');
EXPLAIN (COSTS OFF) EXECUTE lease_events('2030-01-01 00:00:00+00', '{1,2,3}', '30 seconds');
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE find_candidates('2030-01-01 00:00:00+00', 1000);
EXPLAIN (COSTS OFF) EXECUTE read_aggregates('2030-01-01 00:00:00+00', '{1,2,3}');
EXPLAIN (COSTS OFF) EXECUTE lease_events('2030-01-01 00:00:00+00', '{1,2,3}', '30 seconds');
RESET plan_cache_mode;

-- the real thing: two batches of 1000, oldest first, disjoint
CREATE TEMP TABLE claimed AS SELECT id, 1 AS round FROM idempotency.claim_events(1000);
INSERT INTO claimed SELECT id, 2 FROM idempotency.claim_events(1000);
SELECT round, count(*), min(id) - :before AS first, max(id) - :before AS last FROM claimed GROUP BY round ORDER BY round;
SELECT idempotency.mark_published(array_agg(id)) FROM claimed;
SELECT min(id) - :before AS next FROM idempotency.claim_events(100);
-- a backlog that is all held back (every aggregate's first event leased)
-- is skipped without a per-event probe, and other aggregates still flow
SELECT count(*) FROM idempotency.claim_events(10000);
SELECT count(*) FROM idempotency.claim_events(1000);
SELECT idempotency.enqueue_event('order', 'fresh', 'created', '{}') IS NOT NULL AS enqueued;
SELECT aggregate_id FROM idempotency.claim_events(1000);

TRUNCATE idempotency.outbox_events;
