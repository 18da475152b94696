-- process_once writes its mark with the executor's row functions when the
-- inbox table takes them, and with INSERT ... ON CONFLICT DO NOTHING
-- otherwise (doc/reference.md, "Writes"): either way, what users add to
-- processed_events holds as for an INSERT of their own.  The portable
-- edition always runs the statement, and passes the same test.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
\i test/sql/include/trigger_log.sql
CREATE FUNCTION pg_temp.dm_log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pg_temp.trigger_log VALUES (TG_WHEN || ' ' || TG_LEVEL, NEW.event_id);
  RETURN NEW;
END $$;

-- row triggers, BEFORE and AFTER, see each mark; a batch's AFTER triggers
-- fire at its end, as for one INSERT statement
CREATE TRIGGER dm_before BEFORE INSERT ON idempotency.processed_events
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dm_log_row();
CREATE TRIGGER dm_after AFTER INSERT ON idempotency.processed_events
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dm_log_row();
SELECT idempotency.process_once('dm', 'one') AS first,
       idempotency.process_once('dm', 'one') AS duplicate;
SELECT * FROM idempotency.process_once('dm', ARRAY['b2', 'b1', 'b2']);
SELECT what, key FROM pg_temp.trigger_log;
DELETE FROM pg_temp.trigger_log;
DROP TRIGGER dm_before ON idempotency.processed_events;
DROP TRIGGER dm_after ON idempotency.processed_events;

-- a BEFORE trigger that skips the row: nothing marked, not the first time
CREATE TRIGGER dm_skip BEFORE INSERT ON idempotency.processed_events
  FOR EACH ROW EXECUTE FUNCTION pg_temp.skip_row();
SELECT idempotency.process_once('dm', 'skipped') AS first;
SELECT * FROM idempotency.process_once('dm', ARRAY['skipped-1', 'skipped-2']);
SELECT count(*) FROM idempotency.processed_events WHERE event_id LIKE 'skipped%';
DROP TRIGGER dm_skip ON idempotency.processed_events;

-- constraints of the table hold (this should fail with 23514)
ALTER TABLE idempotency.processed_events
  ADD CONSTRAINT dm_check CHECK (event_id NOT LIKE 'bad%') NOT VALID;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('dm', 'bad-1')$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.process_once('dm', ARRAY['ok-1', 'bad-2'])$$);
SELECT count(*) FROM idempotency.processed_events WHERE event_id = 'ok-1';
ALTER TABLE idempotency.processed_events DROP CONSTRAINT dm_check;

-- processed_at is the default's: another default than now() is honoured
ALTER TABLE idempotency.processed_events
  ALTER COLUMN processed_at SET DEFAULT '2001-02-03 00:00:00+00';
SELECT idempotency.process_once('dm', 'dated') AS first;
SELECT * FROM idempotency.process_once('dm', ARRAY['dated-1']);
ALTER TABLE idempotency.processed_events
  ALTER COLUMN processed_at SET DEFAULT now();
BEGIN;
SELECT idempotency.process_once('dm', 'now') AS first;
SELECT event_id, processed_at = '2001-02-03 00:00:00+00' AS default_2001,
       processed_at = now() AS transaction_start
  FROM idempotency.processed_events
 WHERE event_id IN ('dated', 'dated-1', 'now') ORDER BY 1;
COMMIT;

-- a unique index besides the primary key: the statement, whose ON
-- CONFLICT takes it as an arbiter too (a duplicate there is not an error)
CREATE UNIQUE INDEX dm_unique_event ON idempotency.processed_events (event_id)
  WHERE consumer LIKE 'dm%';
SELECT idempotency.process_once('dm', 'unique') AS first,
       idempotency.process_once('dm-other', 'unique') AS other_consumer;
SELECT * FROM idempotency.process_once('dm-other', ARRAY['unique', 'unique-1']);
DROP INDEX idempotency.dm_unique_event;

-- a column added with a default, and a statement trigger: the statement
ALTER TABLE idempotency.processed_events ADD COLUMN dm_source text DEFAULT 'added';
CREATE TRIGGER dm_statement AFTER INSERT ON idempotency.processed_events
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.log_statement();
SELECT idempotency.process_once('dm', 'with-source') AS first,
       idempotency.process_once('dm', 'with-source') AS duplicate;
SELECT * FROM idempotency.process_once('dm', ARRAY['with-source', 'with-source-1']);
SELECT event_id, dm_source FROM idempotency.processed_events
 WHERE event_id LIKE 'with-source%' ORDER BY 1;
SELECT count(*) > 0 AS statement_trigger_fired FROM pg_temp.trigger_log;
DROP TRIGGER dm_statement ON idempotency.processed_events;
ALTER TABLE idempotency.processed_events DROP COLUMN dm_source;

-- a mark holds no lock once written: the row makes duplicates wait
BEGIN;
SELECT * FROM idempotency.process_once('dm', ARRAY['locks-1', 'locks-2']);
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;

-- a duplicate is a write: refused in a read-only transaction (25006)
BEGIN READ ONLY;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('dm', 'one')$$);
ROLLBACK;
DELETE FROM idempotency.processed_events WHERE consumer LIKE 'dm%';
