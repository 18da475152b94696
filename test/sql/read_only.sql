-- Read-only transactions (doc/reference.md, "Read-only transactions and
-- hot standbys"): every function that writes raises 25006, inside BEGIN
-- READ ONLY and under default_transaction_read_only, and writes nothing;
-- a claim that only reads (replay, in_progress, mismatch) still answers.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
-- it lists every key, event, mark and token below: start from none,
-- whatever ran before it in this database
DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.outbox_events;
DELETE FROM idempotency.processed_events;
DELETE FROM idempotency.tokens;
CREATE TABLE ro_orders (id text PRIMARY KEY, state text NOT NULL);
INSERT INTO ro_orders VALUES ('o1', 'PENDING');
SELECT idempotency.define_state_machine('ro_flow', '{"PENDING": ["PAID"]}');

-- keys in every state the read-only claims below meet
SELECT outcome FROM idempotency.claim('ro-done', '{"n": 1}');
SELECT idempotency.complete('ro-done', fence, '{"paid": true}', 201)
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'ro-done';
SELECT outcome FROM idempotency.claim('ro-held', '{"n": 2}', lease => '1 hour');
SELECT fence AS held_fence FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'ro-held' \gset
SELECT idempotency.enqueue_event('order', 'o1', 'created', '{}') AS event_id \gset
SELECT token AS token FROM idempotency.issue_token() AS token \gset

CREATE TEMP TABLE ro_calls (name text, sql text);
INSERT INTO ro_calls VALUES
  ('claim of a new key', $$SELECT idempotency.claim('ro-new')$$),
  ('execute of a new key', $$SELECT idempotency.execute('ro-new', NULL, 'SELECT 1')$$),
  ('complete', format($$SELECT idempotency.complete('ro-held', %s, '{}')$$, :held_fence)),
  ('fail', format($$SELECT idempotency.fail('ro-held', %s)$$, :held_fence)),
  ('checkpoint', format($$SELECT idempotency.checkpoint('ro-held', %s, 'step')$$, :held_fence)),
  ('release', format($$SELECT idempotency.release('ro-held', %s)$$, :held_fence)),
  ('complete, stale fence', $$SELECT idempotency.complete('ro-held', 1, '{}')$$),
  ('issue_token', $$SELECT idempotency.issue_token()$$),
  ('consume_token', format($$SELECT idempotency.consume_token(%L)$$, :'token')),
  ('enqueue_event', $$SELECT idempotency.enqueue_event('order', 'o1', 'paid', '{}')$$),
  ('emit_event', $$SELECT idempotency.emit_event('order', 'o1', 'paid', '{}')$$),
  ('claim_events', $$SELECT idempotency.claim_events()$$),
  ('mark_published', format($$SELECT idempotency.mark_published('{%s}')$$, :event_id)),
  ('mark_failed', format($$SELECT idempotency.mark_failed('{%s}', 'down')$$, :event_id)),
  ('process_once, first time', $$SELECT idempotency.process_once('c', 'e-new')$$),
  ('purge_expired_batch', $$SELECT idempotency.purge_expired_batch()$$),
  ('schedule_cleanup', $$SELECT idempotency.schedule_cleanup()$$),
  ('unschedule_cleanup', $$SELECT idempotency.unschedule_cleanup()$$),
  ('define_state_machine', $$SELECT idempotency.define_state_machine('ro_flow', '{}')$$),
  ('enforce_state_machine', $$SELECT idempotency.enforce_state_machine('ro_orders', 'state', 'ro_flow')$$),
  ('transition', $$SELECT idempotency.transition('ro_orders', 'id', 'o1', 'state', 'PENDING', 'PAID')$$);

-- these should all fail with 25006, in an explicit read-only transaction
BEGIN READ ONLY;
SELECT name, pg_temp.error_of(sql) FROM ro_calls ORDER BY name COLLATE "C";
-- what only reads answers
SELECT outcome, response_code, response_body FROM idempotency.claim('ro-done', '{"n": 1}');
SELECT outcome, retry_after > interval '0' AS waits FROM idempotency.claim('ro-held', '{"n": 2}');
SELECT outcome FROM idempotency.claim('ro-done', '{"n": 99}');
SELECT outcome, response_body FROM idempotency.execute('ro-done', '{"n": 1}', 'SELECT 1');
SELECT status FROM idempotency.lookup('ro-done');
SELECT idempotency.fingerprint('{"a": 1}') IS NOT NULL AS fingerprints,
       idempotency.try_lock('ro-lock') AS locks;
ROLLBACK;

-- and with default_transaction_read_only, as a fenced old primary runs
SET default_transaction_read_only = on;
SELECT name, pg_temp.error_of(sql) FROM ro_calls ORDER BY name COLLATE "C";
SELECT outcome FROM idempotency.claim('ro-done', '{"n": 1}');
RESET default_transaction_read_only;

-- nothing was written
SELECT idempotency_key, status, recovery_point FROM idempotency.idempotency_keys
 ORDER BY idempotency_key COLLATE "C";
SELECT count(*) AS events, count(*) FILTER (WHERE locked_until IS NOT NULL) AS leased
  FROM idempotency.outbox_events;
SELECT count(*) AS marks FROM idempotency.processed_events;
SELECT consumed_at IS NULL AS token_unused FROM idempotency.tokens WHERE token = :'token';
SELECT state FROM ro_orders;

SELECT idempotency.unschedule_cleanup();
DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.outbox_events;
DELETE FROM idempotency.tokens;
DROP TABLE ro_orders;
DELETE FROM idempotency.state_machines WHERE name = 'ro_flow';
