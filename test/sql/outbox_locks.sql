-- The outbox's locks (doc/reference.md, "Outbox and inbox"): advisory
-- locks in a space of their own (objsubid 4), so that no
-- pg_advisory_lock() of an application meets them, and few of them per
-- transaction however many aggregates it writes: a bulk load holds one lock
-- of the shared lock table, not one per bucket.
CREATE FUNCTION regress_outbox_locks(OUT buckets bigint, OUT all_buckets bigint, OUT other bigint)
LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE objid < 1024),
         count(*) FILTER (WHERE objid = 1024),
         count(*) FILTER (WHERE objid > 1024)
    FROM pg_locks
   WHERE locktype = 'advisory' AND pid = pg_backend_pid()
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
$$;

-- one event: its bucket, in share mode, in the outbox's space
BEGIN;
SELECT idempotency.enqueue_event('order', 'L1', 'created', '{}') > 0 AS enqueued;
SELECT classid, objid < 1024 AS bucket, objsubid, mode, granted
  FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;

-- up to 64 buckets in a transaction, then the lock on all of them instead
BEGIN;
SELECT count(idempotency.enqueue_event('order', 'L' || i, 'created', '{}'))
  FROM generate_series(1, 40) i;
SELECT buckets BETWEEN 30 AND 40 AS some_buckets, all_buckets, other FROM regress_outbox_locks();
SELECT count(idempotency.enqueue_event('order', 'M' || i, 'created', '{}'))
  FROM generate_series(1, 200) i;
SELECT buckets BETWEEN 30 AND 64 AS at_most_64_buckets, all_buckets, other FROM regress_outbox_locks();
ROLLBACK;

-- 100,000 events of 100,000 aggregates, twice in one transaction: one lock
BEGIN;
SELECT count(*) FROM idempotency.enqueue_events(
  array_fill('order'::text, ARRAY[100000]),
  ARRAY(SELECT 'bulk-' || g FROM generate_series(1, 100000) g),
  array_fill('created'::text, ARRAY[100000]),
  array_fill('{}'::jsonb, ARRAY[100000]));
SELECT count(*) FROM idempotency.enqueue_events(
  array_fill('order'::text, ARRAY[100000]),
  ARRAY(SELECT 'bulk-' || g FROM generate_series(100001, 200000) g),
  array_fill('updated'::text, ARRAY[100000]),
  array_fill('{}'::jsonb, ARRAY[100000]));
SELECT * FROM regress_outbox_locks();
SELECT classid, objid, objsubid, mode FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY objid;
COMMIT;
SELECT count(*) AS queued FROM idempotency.outbox_events;
SELECT count(*) AS claimed FROM idempotency.claim_events(1000);

-- a rolled-back savepoint releases its locks: the next enqueue locks again
BEGIN;
SAVEPOINT s;
SELECT idempotency.enqueue_event('order', 'S1', 'created', '{}') > 0 AS enqueued;
ROLLBACK TO SAVEPOINT s;
SELECT * FROM regress_outbox_locks();
SELECT idempotency.enqueue_event('order', 'S1', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_outbox_locks();
ROLLBACK;

DROP FUNCTION regress_outbox_locks();
TRUNCATE idempotency.outbox_events;
