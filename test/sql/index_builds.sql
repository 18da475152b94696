-- Indexes that users and operators add to the extension's tables are kept
-- by every write, as the executor keeps them (doc/reference.md, "Writes"):
-- an index left invalid by a failed CREATE INDEX CONCURRENTLY (not ready,
-- so no write may touch it), an expression index, a partial index.
-- amcheck verifies every index at the end.
\set VERBOSITY terse
CREATE EXTENSION IF NOT EXISTS amcheck;
SELECT outcome FROM idempotency.claim('ib-0');
SELECT outcome FROM idempotency.claim('ib-00');

-- this should fail: two keys share recovery_point 'started'; the build
-- leaves an invalid index that is not ready for inserts
CREATE UNIQUE INDEX CONCURRENTLY ib_unready ON idempotency.idempotency_keys (recovery_point);
SELECT indisvalid, indisready FROM pg_index WHERE indexrelid = 'idempotency.ib_unready'::regclass;
INSERT INTO idempotency.processed_events (consumer, event_id) VALUES ('c', 'x0'), ('c', 'x00');
CREATE UNIQUE INDEX CONCURRENTLY ib_unready_inbox ON idempotency.processed_events ((1));
SELECT indisvalid, indisready FROM pg_index WHERE indexrelid = 'idempotency.ib_unready_inbox'::regclass;

-- every writer goes on working
SELECT outcome, status FROM idempotency.claim('ib-1', '{"n": 1}');
SELECT idempotency.complete('ib-1', fence, '{"ok": 1}')
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ib-1';
SELECT outcome, response_body FROM idempotency.execute('ib-2', '{"n": 2}', 'SELECT 2');
SELECT idempotency.process_once('c', 'x1') AS first, idempotency.process_once('c', 'x1') AS again;
SELECT outcome FROM idempotency.claim('ib-1', '{"n": 1}');

-- an expression index and a partial index
CREATE INDEX ib_lower ON idempotency.idempotency_keys (lower(idempotency_key));
CREATE INDEX ib_failed ON idempotency.idempotency_keys (updated_at) WHERE status = 'failed';
SELECT outcome FROM idempotency.claim('IB-Upper');
SELECT idempotency.fail('IB-Upper', fence, '{"e": 1}', 503, true)
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'IB-Upper';
SELECT outcome FROM idempotency.claim('ib-3');
SELECT idempotency.complete('ib-3', fence, '{}')
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ib-3';
SET enable_seqscan = off;
SET enable_bitmapscan = off;
-- found through the expression index
SELECT idempotency_key FROM idempotency.idempotency_keys WHERE lower(idempotency_key) = 'ib-upper';
-- the partial index holds the failed key (and no completed one)
SELECT idempotency_key FROM idempotency.idempotency_keys
 WHERE status = 'failed' AND updated_at > '-infinity' AND idempotency_key ILIKE 'ib-%'
 ORDER BY idempotency_key COLLATE "C";
RESET enable_seqscan;
RESET enable_bitmapscan;

-- every valid index of the extension's tables is sound and complete
SELECT c.relname, pg_typeof(bt_index_check(c.oid, true)) = 'void'::regtype AS checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid IN ('idempotency.idempotency_keys'::regclass, 'idempotency.processed_events'::regclass)
   AND a.amname = 'btree' AND i.indisvalid
 ORDER BY c.relname COLLATE "C";

DROP INDEX idempotency.ib_unready, idempotency.ib_unready_inbox,
  idempotency.ib_lower, idempotency.ib_failed;
DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.processed_events;
DROP EXTENSION amcheck;
