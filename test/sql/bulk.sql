-- Bulk use in one transaction (doc/operations.md, "Bulk work"): claims,
-- execute() calls, process_once marks and enqueued events of many new rows
-- in one transaction hold a bounded number of locks, so they do not fill
-- the shared lock table (max_locks_per_transaction at its default, 64),
-- and another session connects and claims meanwhile.  No lock per new key
-- or mark is held: the C edition releases its lock for creating one as
-- soon as the row is written, the portable edition takes none (the unique
-- index makes other creators wait); the outbox holds at most 64 buckets,
-- then "all buckets" (one lock in the C, 16 stripes in the portable
-- edition: doc/portable.md).  The same output on both editions.
SHOW max_locks_per_transaction;
-- the other session comes through dblink (the portable suite has it in
-- every test database; created here, and dropped at the end, if missing)
SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'dblink') AS bulk_adds_dblink \gset
\if :bulk_adds_dblink
CREATE EXTENSION dblink;
\endif
-- this server, over its own socket, as the superuser running the test
SELECT format('host=%s port=%s dbname=%s user=%s',
              quote_literal(COALESCE(NULLIF(btrim(split_part(current_setting('unix_socket_directories'), ',', 1)), ''),
                                     'localhost')),
              current_setting('port'), quote_literal(current_database()), quote_literal(current_user))
       AS bulk_other_session \gset
CREATE TABLE bulk_payments (n int PRIMARY KEY);
BEGIN;
-- (leases of an hour: the keys are still held at the end, however long
-- the transaction takes)
SELECT count(*) FILTER (WHERE (c).outcome = 'claimed') AS claimed
  FROM (SELECT idempotency.claim('bulk-' || g, '{"a": 1}', lease => '1 hour') AS c
          FROM generate_series(1, 100000) AS g) s;
SELECT count(*) FILTER (WHERE locktype = 'advisory') AS advisory_locks_held,
       count(*) < 30 AS few_locks_held
  FROM pg_locks WHERE pid = pg_backend_pid();
SELECT count(*) FILTER (WHERE (e).outcome = 'claimed') AS executed
  FROM (SELECT idempotency.execute('bulk-x-' || g, NULL,
                 'INSERT INTO bulk_payments VALUES ($1::int) RETURNING n', ARRAY[g::text]) AS e
          FROM generate_series(1, 20000) AS g) s;
SELECT count(*) FILTER (WHERE locktype = 'advisory') AS advisory_locks_held,
       count(*) < 30 AS few_locks_held
  FROM pg_locks WHERE pid = pg_backend_pid();
SELECT count(*) FILTER (WHERE m) AS marked
  FROM (SELECT idempotency.process_once('bulk', 'bulk-event-' || g) AS m
          FROM generate_series(1, 150000) AS g) s;
SELECT count(*) FILTER (WHERE locktype = 'advisory') AS advisory_locks_held,
       count(*) < 30 AS few_locks_held
  FROM pg_locks WHERE pid = pg_backend_pid();
-- events of 1000 aggregates, in far more than 64 buckets
SELECT count(idempotency.enqueue_event('bulk', 'order-' || g % 1000, 'Made', '{}')) AS enqueued
  FROM generate_series(1, 100000) AS g;
SELECT count(*) FILTER (WHERE locktype = 'advisory') <= 64 + 16 + 1 AS bucket_locks_bounded,
       count(*) FILTER (WHERE locktype <> 'advisory') < 40 AS few_other_locks
  FROM pg_locks WHERE pid = pg_backend_pid();
-- meanwhile a new session connects and claims a key
SELECT * FROM dblink(:'bulk_other_session',
                     $$SELECT outcome FROM idempotency.claim('bulk-other-session')$$) AS t(outcome text);
COMMIT;
-- every key replays afterwards
SELECT count(*) FILTER (WHERE (c).outcome = 'in_progress') AS in_progress
  FROM (SELECT idempotency.claim('bulk-' || g, '{"a": 1}') AS c
          FROM generate_series(1, 100000, 97) AS g) s;
SELECT count(*) FILTER (WHERE (e).outcome = 'replay') AS replayed, count(*)
  FROM (SELECT idempotency.execute('bulk-x-' || g, NULL,
                 'INSERT INTO bulk_payments VALUES ($1::int) RETURNING n', ARRAY[g::text]) AS e
          FROM generate_series(1, 20000, 7) AS g) s;
SELECT count(*) AS payments FROM bulk_payments;
SELECT count(*) FILTER (WHERE m) AS marked_again, count(*)
  FROM (SELECT idempotency.process_once('bulk', 'bulk-event-' || g) AS m
          FROM generate_series(1, 150000, 101) AS g) s;
SELECT count(*) AS events, count(DISTINCT aggregate_id) AS aggregates
  FROM idempotency.outbox_events WHERE aggregate_type = 'bulk';
SELECT status FROM idempotency.idempotency_keys WHERE idempotency_key = 'bulk-other-session';
DROP TABLE bulk_payments;
DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.processed_events WHERE consumer = 'bulk';
DELETE FROM idempotency.outbox_events WHERE aggregate_type = 'bulk';
\if :bulk_adds_dblink
DROP EXTENSION dblink;
\endif
