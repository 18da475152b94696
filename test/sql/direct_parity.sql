-- Cases where the executor's row primitives once gave another outcome than
-- the statement: the table's rules, not the path taken, decide.
-- make test runs this file a second time with idempotency.direct_writes
-- off (every write through its statement) against the same expected
-- output, and the portable edition (always the statement) passes it too.
\set VERBOSITY terse
\i test/sql/include/error_of.sql

-- 1. a BEFORE INSERT trigger that normalises event ids: the duplicate is
-- found on the id the trigger returns, as by ON CONFLICT DO NOTHING
CREATE FUNCTION pg_temp.dp_normalise() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.event_id := lower(btrim(NEW.event_id));
  RETURN NEW;
END $$;
CREATE TRIGGER dp_normalise BEFORE INSERT ON idempotency.processed_events
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dp_normalise();
SELECT idempotency.process_once('dp', 'evt-1') AS first,
       pg_temp.error_of($$SELECT idempotency.process_once('dp', 'EVT-1')$$) AS upper_case;
SELECT idempotency.process_once('dp', ' evt-1 ') AS padded;
-- (ids the trigger leaves as they are: what a batch returns for an id the
-- trigger changes differs between the editions)
SELECT * FROM idempotency.process_once('dp', ARRAY['EVT-1', 'evt-2', 'evt-3']);
SELECT event_id FROM idempotency.processed_events WHERE consumer = 'dp' ORDER BY 1;
DROP TRIGGER dp_normalise ON idempotency.processed_events;
DELETE FROM idempotency.processed_events WHERE consumer = 'dp';

-- 2. tableoid is the table's while CHECK constraints and stored generated
-- columns are evaluated
ALTER TABLE idempotency.outbox_events
  ADD CONSTRAINT dp_tableoid CHECK (tableoid = 'idempotency.outbox_events'::regclass);
ALTER TABLE idempotency.outbox_events
  ADD COLUMN dp_table regclass GENERATED ALWAYS AS (tableoid::regclass) STORED;
SELECT idempotency.enqueue_event('dp', 'a-1', 'created', '{}') > 0 AS enqueued;
SELECT count(*) > 0 AS enqueued FROM idempotency.enqueue_events(
  ARRAY['dp'], ARRAY['a-2'], ARRAY['created'], ARRAY['{}'::jsonb]);
SELECT aggregate_id, dp_table FROM idempotency.outbox_events
 WHERE aggregate_type = 'dp' ORDER BY 1;
DELETE FROM idempotency.outbox_events WHERE aggregate_type = 'dp';
ALTER TABLE idempotency.outbox_events DROP CONSTRAINT dp_tableoid;
ALTER TABLE idempotency.outbox_events DROP COLUMN dp_table;
ALTER TABLE idempotency.idempotency_keys
  ADD CONSTRAINT dp_tableoid CHECK (tableoid = 'idempotency.idempotency_keys'::regclass);
SELECT fence AS dp_fence FROM idempotency.claim('dp-key-1', '{}') \gset
SELECT idempotency.complete('dp-key-1', :dp_fence, '{"ok": true}');
SELECT status FROM idempotency.idempotency_keys WHERE idempotency_key = 'dp-key-1';
ALTER TABLE idempotency.idempotency_keys DROP CONSTRAINT dp_tableoid;

-- 3. a BEFORE UPDATE trigger that updates the same row: 27000, as for the
-- UPDATE statement
CREATE FUNCTION pg_temp.dp_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF pg_trigger_depth() = 1 THEN
    UPDATE idempotency.idempotency_keys SET updated_at = NEW.updated_at
     WHERE scope = OLD.scope AND idempotency_key = OLD.idempotency_key;
  END IF;
  RETURN NEW;
END $$;
SELECT fence AS dp_fence FROM idempotency.claim('dp-key-2', '{}') \gset
CREATE TRIGGER dp_touch BEFORE UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dp_touch();
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('dp-key-2', %s, '{}')$$, :dp_fence));
SELECT pg_temp.error_of(format($$SELECT idempotency.fail('dp-key-2', %s, '{}', 503, retryable => true)$$, :dp_fence));
DROP TRIGGER dp_touch ON idempotency.idempotency_keys;
SELECT status FROM idempotency.idempotency_keys WHERE idempotency_key = 'dp-key-2';
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dp-key-%';

-- 4. a deferrable primary key on processed_events: ON CONFLICT refuses it
-- as an arbiter (55000), whichever path the mark would have taken
BEGIN;
ALTER TABLE idempotency.processed_events DROP CONSTRAINT processed_events_pkey;
ALTER TABLE idempotency.processed_events
  ADD CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, event_id) DEFERRABLE;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('dp', 'evt-9')$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.process_once('dp', ARRAY['evt-9'])$$);
ROLLBACK;
SELECT idempotency.process_once('dp', 'evt-9') AS immediate_again;
DELETE FROM idempotency.processed_events WHERE consumer = 'dp';

-- 5. the write state a table's rows are written with, rebuilt after each
-- change to a function, is freed when rebuilt, not kept until the
-- transaction ends: a few of its memory contexts, not one per rebuild
BEGIN;
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXECUTE format('CREATE OR REPLACE FUNCTION pg_temp.dp_changed() RETURNS int LANGUAGE sql AS %L',
                   'SELECT ' || i);
    PERFORM idempotency.enqueue_event('dp', 'mem', 'created', '{}');
    PERFORM idempotency.claim('dp-mem-' || i, '{}');
    PERFORM idempotency.process_once('dp', 'mem-' || i);
  END LOOP;
END $$;
SELECT count(*) <= 8 AS few_write_states
  FROM pg_backend_memory_contexts WHERE name = 'idempotency table cache';
ROLLBACK;
