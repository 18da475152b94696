-- test/pooler/api_outbox.sql: a producer and a relay of the outbox, each
-- call in a transaction of its own, as they run behind a transaction
-- pooler: every mark passes the lease_token of its claim_events (no mark
-- depends on the server session that leased the events).  Event ids are
-- printed relative to the first one.  test/pooler/sql_api.sh runs it on a
-- direct connection and through PgBouncer (the only client of the outbox
-- there, beside many clients of api_keys.sql) and compares.
\set ON_ERROR_STOP 0
\set VERBOSITY verbose
\pset null '(null)'

\echo -- a producer: events, one at a time and in a batch
SELECT idempotency.enqueue_event('order', 'o1', 'created', '{"n": 1}') AS first \gset
SELECT idempotency.enqueue_event('order', 'o1', 'paid', '{"n": 2}') - :first AS id;
SELECT idempotency.enqueue_event('order', 'o2', 'created', '{"n": 3}', '{"trace": "t"}') - :first AS id;
SELECT id - :first AS id
  FROM idempotency.enqueue_events(ARRAY['order', 'order'], ARRAY['o3', 'o3'],
                                  ARRAY['created', 'paid'], ARRAY['{"n": 4}', '{"n": 5}']::jsonb[]) id;

\echo -- a relay: claim, publish with the token
WITH c AS (SELECT * FROM idempotency.claim_events(2, '30 seconds'))
SELECT string_agg((id - :first) || ':' || aggregate_id || '/' || event_type, ' ' ORDER BY id) AS got,
       array_agg(id ORDER BY id)::text AS ids, max(lease_token) AS tok FROM c \gset
\echo :got
SELECT idempotency.mark_published(:'ids', :tok) AS published;
SELECT idempotency.mark_published(:'ids', :tok) AS again;

\echo -- the next batch: one fails and waits for its retry, the other is published
WITH c AS (SELECT * FROM idempotency.claim_events(2, '30 seconds'))
SELECT string_agg((id - :first) || ':' || aggregate_id || '/' || event_type || '/' || attempts, ' ' ORDER BY id) AS got,
       min(id) AS failing, max(id) AS other, max(lease_token) AS tok FROM c \gset
\echo :got
SELECT idempotency.mark_failed(ARRAY[:failing]::bigint[], 'broker down', :tok) AS failed;
SELECT idempotency.mark_published(ARRAY[:other]::bigint[], :tok) AS published;
SELECT string_agg((id - :first) || ':' || aggregate_id || '/' || event_type, ' ' ORDER BY id) AS got
  FROM idempotency.claim_events(10, '1 millisecond');

\echo -- that lease runs out: another relay takes the event over, the stale token marks nothing
SELECT pg_sleep(0.01);
WITH c AS (SELECT * FROM idempotency.claim_events(10, '30 seconds'))
SELECT string_agg((id - :first) || ':' || aggregate_id || '/' || event_type || '/' || takeovers, ' ' ORDER BY id) AS got2,
       array_agg(id ORDER BY id)::text AS ids2, max(lease_token) AS tok2 FROM c \gset
\echo :got2
SELECT idempotency.mark_published(:'ids2', :tok) AS stale;
SELECT idempotency.mark_published(:'ids2', :tok2) AS published;

\echo -- what the table says
SELECT id - :first AS id, aggregate_id, event_type, published_at IS NOT NULL AS published,
       attempts, takeovers, last_error
  FROM idempotency.outbox_events ORDER BY id;
