-- What users add to the extension's tables is honoured by claim, complete,
-- fail and process_once, whose writes go through the executor
-- (doc/reference.md, "Writes"): a trigger, a CHECK constraint, an
-- expression index, an added column with its default; a dropped column is
-- skipped.
\set VERBOSITY terse
CREATE FUNCTION pg_temp.fence_of(k text) RETURNS bigint LANGUAGE sql AS $$
  SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = k AND scope = ''
$$;
\i test/sql/include/error_of.sql

-- every column as the SQL defaults would have it
SELECT outcome, fence > 0 AS has_fence, status, attempts, recovery_point
  FROM idempotency.claim('dw-1', '{"n": 1}', ttl => '1 hour', lease => '5 minutes');
SELECT request_hash = idempotency.fingerprint('{"n": 1}') AS hash_stored,
       locked_until = created_at + interval '5 minutes' AS lease_set,
       expires_at = created_at + interval '1 hour' AS ttl_set,
       created_at = updated_at AS same_times,
       response_code IS NULL AND response_body IS NULL AND retryable IS NULL AS no_answer
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'dw-1';
SELECT idempotency.complete('dw-1', pg_temp.fence_of('dw-1'), '{"ok": true}', 201);
SELECT status, response_code, response_body, retryable IS NULL AS no_retryable,
       locked_until IS NULL AS lease_ended
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'dw-1';
SELECT outcome, response_code, response_body FROM idempotency.claim('dw-1', '{"n": 1}');
-- the rows are found through every index
SET enable_seqscan = off;
SELECT count(*) FROM idempotency.idempotency_keys WHERE expires_at > now() AND idempotency_key = 'dw-1';
RESET enable_seqscan;

-- a trigger on the table of keys: claims and holder calls fire it
CREATE TABLE dw_fired (op text);
CREATE FUNCTION dw_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO dw_fired VALUES (TG_OP);
  RETURN NEW;
END $$;
CREATE TRIGGER dw_count BEFORE INSERT OR UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION dw_count();
SELECT outcome FROM idempotency.claim('dw-2', '{"n": 2}');
SELECT idempotency.fail('dw-2', pg_temp.fence_of('dw-2'), '{"e": 1}', 503, true);
SELECT outcome, attempts FROM idempotency.claim('dw-2', '{"n": 2}');
SELECT idempotency.complete('dw-2', pg_temp.fence_of('dw-2'), '{"ok": 2}');
SELECT op, count(*) FROM dw_fired GROUP BY op ORDER BY op;
DROP TRIGGER dw_count ON idempotency.idempotency_keys;
-- without it, nothing more fires
SELECT outcome FROM idempotency.claim('dw-3');
SELECT idempotency.complete('dw-3', pg_temp.fence_of('dw-3'), '{}');
SELECT count(*) AS fired FROM dw_fired;

-- a CHECK constraint is honoured
ALTER TABLE idempotency.idempotency_keys
  ADD CONSTRAINT dw_short CHECK (length(idempotency_key) < 10) NOT VALID;
SELECT pg_temp.error_of($$SELECT idempotency.claim('dw-too-long-a-key')$$);
SELECT outcome FROM idempotency.claim('dw-4');
SELECT pg_temp.error_of($$SELECT idempotency.complete('dw-4', pg_temp.fence_of('dw-4'), '{}')$$) AS completed_under_check;
ALTER TABLE idempotency.idempotency_keys DROP CONSTRAINT dw_short;

-- a column with a default: the SQL path fills it in
ALTER TABLE idempotency.idempotency_keys ADD COLUMN dw_note text DEFAULT 'noted';
SELECT outcome FROM idempotency.claim('dw-5');
SELECT idempotency.complete('dw-5', pg_temp.fence_of('dw-5'), '{"n": 5}');
SELECT dw_note, status FROM idempotency.idempotency_keys WHERE idempotency_key = 'dw-5';
-- dropped again, it leaves a dropped column behind, which writes skip
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dw_note;
SELECT outcome FROM idempotency.claim('dw-6', '{"n": 6}');
SELECT idempotency.complete('dw-6', pg_temp.fence_of('dw-6'), '{"n": 6}');
SELECT outcome, response_body FROM idempotency.claim('dw-6', '{"n": 6}');

-- an expression index is maintained
CREATE INDEX dw_lower ON idempotency.idempotency_keys (lower(idempotency_key));
SELECT outcome FROM idempotency.claim('DW-7');
SET enable_seqscan = off;
SELECT count(*) FROM idempotency.idempotency_keys WHERE lower(idempotency_key) = 'dw-7';
RESET enable_seqscan;
DROP INDEX idempotency.dw_lower;

-- process_once: first time, duplicate, and a trigger on the inbox
SELECT idempotency.process_once('dw-consumer', 'e-1') AS first,
       idempotency.process_once('dw-consumer', 'e-1') AS again;
BEGIN;
SELECT idempotency.process_once('dw-consumer', 'e-0') AS first;
SELECT processed_at = now() AS stamped_with_transaction_start
  FROM idempotency.processed_events WHERE consumer = 'dw-consumer' AND event_id = 'e-0';
COMMIT;
CREATE TRIGGER dw_count BEFORE INSERT ON idempotency.processed_events
  FOR EACH ROW EXECUTE FUNCTION dw_count();
SELECT idempotency.process_once('dw-consumer', 'e-2') AS first;
SELECT count(*) AS fired FROM dw_fired WHERE op = 'INSERT';
DROP TRIGGER dw_count ON idempotency.processed_events;
-- a rollback forgets a mark
BEGIN;
SELECT idempotency.process_once('dw-consumer', 'e-3') AS first;
ROLLBACK;
SELECT idempotency.process_once('dw-consumer', 'e-3') AS first_after_rollback;

-- a column whose type changed is refused with 42804 instead of misread
-- (this should fail)
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN retryable TYPE text;
SELECT outcome FROM idempotency.claim('DW-7');
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN retryable TYPE boolean USING retryable::boolean;
SELECT outcome, response_code FROM idempotency.claim('DW-7');

-- a take-over that a trigger keeps from happening: the claim gives up
-- after its rounds with 40001 and a hint (this should fail)
UPDATE idempotency.idempotency_keys SET expires_at = now() - interval '1 second'
 WHERE idempotency_key = 'DW-7';
CREATE FUNCTION dw_skip() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RETURN NULL;
END $$;
CREATE TRIGGER dw_skip BEFORE UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION dw_skip();
\set VERBOSITY default
SELECT outcome FROM idempotency.claim('DW-7');
\set VERBOSITY terse
DROP TRIGGER dw_skip ON idempotency.idempotency_keys;
DROP FUNCTION dw_skip();
SELECT outcome FROM idempotency.claim('DW-7');

DROP TABLE dw_fired;
DROP FUNCTION dw_count();
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dw-%' OR idempotency_key = 'DW-7';
DELETE FROM idempotency.processed_events WHERE consumer = 'dw-consumer';
