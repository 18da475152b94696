--
-- Section 7: observability.  The views run with their owner's rights (the
-- extension owner), so grant_usage() can give SELECT on them without any
-- access to the tables.
--

-- One row per (scope, status) of the keys; the outbox and inbox figures are
-- the same on every row.  Without any key there is still one row, with
-- scope and status NULL, so the backlog is always visible.
CREATE VIEW idempotency.stats AS
SELECT k.scope,
       k.status,
       COALESCE(k.keys, 0) AS keys,
       k.oldest_created_at,
       COALESCE(k.expired, 0) AS expired,
       o.outbox_unpublished,
       pg_catalog.now() OPERATOR(pg_catalog.-) o.oldest_unpublished AS outbox_oldest_unpublished_age,
       o.outbox_dead,
       i.inbox_size
  FROM (SELECT pg_catalog.count(*) FILTER (WHERE e.dead_at IS NULL) AS outbox_unpublished,
               pg_catalog.min(e.created_at) FILTER (WHERE e.dead_at IS NULL) AS oldest_unpublished,
               pg_catalog.count(*) FILTER (WHERE e.dead_at IS NOT NULL) AS outbox_dead
          FROM idempotency.outbox_events e
         WHERE e.published_at IS NULL) o
 CROSS JOIN
       (SELECT pg_catalog.count(*) AS inbox_size
          FROM idempotency.processed_events) i
  LEFT JOIN
       (SELECT s.scope, s.status,
               pg_catalog.count(*) AS keys,
               pg_catalog.min(s.created_at) AS oldest_created_at,
               pg_catalog.count(*) FILTER (WHERE s.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS expired
          FROM idempotency.idempotency_keys s
         GROUP BY s.scope, s.status) k ON true;
COMMENT ON VIEW idempotency.stats IS 'per scope and status: keys, oldest created_at, expired but not yet purged; outbox backlog and inbox size';

-- Keys whose holder stopped renewing its lease: claim() resumes them.
CREATE VIEW idempotency.stalled_keys AS
SELECT k.scope,
       k.idempotency_key,
       k.fence,
       k.attempts,
       k.recovery_point,
       k.locked_until,
       pg_catalog.now() OPERATOR(pg_catalog.-) k.locked_until AS stalled_for,
       k.created_at,
       k.updated_at,
       k.expires_at
  FROM idempotency.idempotency_keys k
 WHERE k.status OPERATOR(pg_catalog.=) 'processing'::idempotency.key_status
   AND k.locked_until OPERATOR(pg_catalog.<=) pg_catalog.now()
 ORDER BY k.locked_until, k.scope, k.idempotency_key;
COMMENT ON VIEW idempotency.stalled_keys IS 'keys still processing whose lease has run out, oldest first';
