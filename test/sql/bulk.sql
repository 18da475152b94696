-- Bulk use in one transaction (doc/operations.md, "Bulk work"): the lock
-- for creating a key is held only until its row is written, so claims and
-- execute() calls of many new keys in one transaction do not fill the
-- shared lock table (max_locks_per_transaction at its default).
SHOW max_locks_per_transaction;
CREATE TABLE bulk_payments (n int PRIMARY KEY);
BEGIN;
SELECT count(*) FILTER (WHERE (c).outcome = 'claimed') AS claimed
  FROM (SELECT idempotency.claim('bulk-' || g, '{"a": 1}') AS c
          FROM generate_series(1, 100000) AS g) s;
SELECT count(*) AS creation_locks_held FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND objsubid = 3;
SELECT count(*) FILTER (WHERE (e).outcome = 'claimed') AS executed
  FROM (SELECT idempotency.execute('bulk-x-' || g, NULL,
                 'INSERT INTO bulk_payments VALUES ($1::int) RETURNING n', ARRAY[g::text]) AS e
          FROM generate_series(1, 20000) AS g) s;
SELECT count(*) < 50 AS few_locks_held FROM pg_locks WHERE pid = pg_backend_pid();
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
DROP TABLE bulk_payments;
DELETE FROM idempotency.idempotency_keys;
