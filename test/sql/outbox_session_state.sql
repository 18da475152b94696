-- Whatever a caller presets in the settings idempotency_portable.*, where
-- the portable edition keeps what a transaction did so far
-- (doc/portable.md), nothing changes: for the session (SET), for the
-- transaction (SET LOCAL), before the transaction or between its calls,
-- to 'all', '', garbage, huge numbers or the values of a real
-- transaction, an enqueue or a retry wait holds the buckets of its
-- aggregates in share mode (all buckets beyond 64), and claims, marks, the
-- inbox and keys work as without.  The C edition reads none of these
-- settings; the output is the same.  The relays' wake-up and the quiet
-- commits' count: test/specs/outbox_presets.spec.
\i test/sql/include/fence_of.sql
TRUNCATE idempotency.outbox_events RESTART IDENTITY;

-- every name that any version of the portable edition reads
CREATE FUNCTION regress_preset(v text, is_local boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  n text;
BEGIN
  FOREACH n IN ARRAY ARRAY['outbox_buckets', 'outbox_enqueued', 'outbox_last_notify',
                           'outbox_notify_interval'] LOOP
    PERFORM set_config('idempotency_portable.' || n, v, is_local);
  END LOOP;
END $$;
-- the values this transaction has there now, kept for the session
CREATE FUNCTION regress_copy() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  n text;
BEGIN
  FOREACH n IN ARRAY ARRAY['outbox_buckets', 'outbox_enqueued', 'outbox_last_notify',
                           'outbox_notify_interval'] LOOP
    PERFORM set_config('idempotency_portable.' || n,
                       coalesce(current_setting('idempotency_portable.' || n, true), 'none'), false);
  END LOOP;
END $$;
-- this backend's outbox locks in share mode: buckets, and whether all of them
CREATE FUNCTION regress_held(OUT buckets bigint, OUT all_buckets boolean)
LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE objid < 1024),
         count(*) FILTER (WHERE objid BETWEEN 1024 AND 1039) > 0
    FROM pg_locks
   WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND mode = 'ShareLock'
     AND classid = 1330992194
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
$$;

-- preset for the session: the event's bucket is held all the same
SELECT regress_preset('all');
BEGIN;
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;
SELECT regress_preset('');
BEGIN;
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;
SELECT regress_preset('garbage,1,2,,:all');
BEGIN;
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;
SELECT regress_preset('99999999999999999999');
BEGIN;
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;
-- for the transaction, before its first call and between its calls
BEGIN;
SELECT regress_preset('all', true);
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT regress_preset('all', true);
SELECT idempotency.enqueue_event('order', 'B', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;

-- the values of a real transaction that held all buckets, and of one that
-- held one, kept for the session: the next transaction holds its bucket
BEGIN;
SELECT count(*) AS enqueued FROM idempotency.enqueue_events(
  array_fill('order'::text, ARRAY[100]),
  ARRAY(SELECT 'bulk-' || g FROM generate_series(1, 100) g),
  array_fill('created'::text, ARRAY[100]),
  array_fill('{}'::jsonb, ARRAY[100]));
SELECT buckets <= 64 AS at_most_64_buckets, all_buckets FROM regress_held();
SELECT regress_copy();
COMMIT;
BEGIN;
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;
BEGIN;
SELECT idempotency.enqueue_event('order', 'C', 'created', '{}') > 0 AS enqueued;
SELECT regress_copy();
COMMIT;
BEGIN;
SELECT idempotency.enqueue_event('order', 'A', 'created', '{}') > 0 AS enqueued;
SELECT * FROM regress_held();
ROLLBACK;

-- beyond 64 buckets, all of them, whatever was preset
SELECT regress_preset('');
BEGIN;
SELECT count(idempotency.enqueue_event('order', 'M' || i, 'created', '{}')) AS enqueued
  FROM generate_series(1, 200) i;
SELECT buckets <= 64 AS at_most_64_buckets, all_buckets FROM regress_held();
ROLLBACK;

-- claims, marks and the retry wait's lock
SELECT regress_preset('all');
SELECT count(*) AS claimed FROM idempotency.claim_events(1000);
SELECT regress_preset('garbage');
SELECT idempotency.mark_published(ARRAY(SELECT id FROM idempotency.outbox_events
                                         WHERE aggregate_id LIKE 'bulk-%')) AS published;
BEGIN;
SELECT regress_preset('all', true);
SELECT idempotency.mark_failed(ARRAY(SELECT id FROM idempotency.outbox_events
                                      WHERE aggregate_id = 'C'), 'broker down') AS failed;
SELECT * FROM regress_held();
COMMIT;
SELECT aggregate_id, attempts, last_error, published_at IS NOT NULL AS published
  FROM idempotency.outbox_events WHERE aggregate_id NOT LIKE 'bulk-%' ORDER BY id;

-- the inbox and keys
SELECT regress_preset('99999999999999999999');
SELECT idempotency.process_once('regress_state', 'e1') AS first,
       idempotency.process_once('regress_state', 'e1') AS second;
SELECT outcome, fence IS NOT NULL AS has_fence
  FROM idempotency.claim('regress-state-key', '{"n": 1}');
SELECT regress_preset('all');
SELECT idempotency.complete('regress-state-key', pg_temp.fence_of('regress-state-key'), '{"ok": true}', 200);
SELECT outcome, response_code FROM idempotency.claim('regress-state-key', '{"n": 1}');

SELECT regress_preset('');
RESET idempotency_portable.outbox_buckets;
RESET idempotency_portable.outbox_enqueued;
RESET idempotency_portable.outbox_last_notify;
RESET idempotency_portable.outbox_notify_interval;
DROP FUNCTION regress_preset(text, boolean);
DROP FUNCTION regress_copy();
DROP FUNCTION regress_held();
DELETE FROM idempotency.processed_events WHERE consumer = 'regress_state';
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key = 'regress-state-key';
TRUNCATE idempotency.outbox_events;
