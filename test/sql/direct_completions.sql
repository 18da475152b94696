-- complete() and fail() write the key's row with the executor's row
-- primitives when the table takes them, and with their UPDATE statement
-- otherwise (doc/reference.md, "Writes"): either way, what users add to
-- the table of keys holds as for an UPDATE of their own.  The first part
-- adds what the primitives honour (row triggers, UPDATE OF triggers,
-- constraints, indexes on the columns set); the second what only the
-- statement honours (statement triggers, transition tables, generated
-- columns).  The portable edition always runs the statement, and passes
-- the same test.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
\i test/sql/include/trigger_log.sql
\i test/sql/include/wal_records.sql
CREATE FUNCTION pg_temp.dc_log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pg_temp.trigger_log
    VALUES (TG_NAME || ': ' || OLD.status || ' -> ' || NEW.status, NEW.idempotency_key);
  RETURN NEW;
END $$;

-- row triggers: a BEFORE trigger changes the row, AFTER triggers see the
-- old and the new version, and UPDATE OF triggers fire for the columns the
-- call sets (status) and not for the others (request_hash)
ALTER TABLE idempotency.idempotency_keys ADD COLUMN dc_tag text;
CREATE FUNCTION pg_temp.dc_tag() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.dc_tag := OLD.status || ' -> ' || NEW.status;
  RETURN NEW;
END $$;
CREATE TRIGGER dc_a_tag BEFORE UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dc_tag();
CREATE TRIGGER dc_after AFTER UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dc_log_row();
CREATE TRIGGER dc_of_status AFTER UPDATE OF status ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dc_log_row();
CREATE TRIGGER dc_of_request AFTER UPDATE OF request_hash ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dc_log_row();
SELECT fence AS fence1 FROM idempotency.claim('dc-row-1', '{}') \gset
SELECT idempotency.complete('dc-row-1', :fence1, '{"ok": true}');
SELECT fence AS fence2 FROM idempotency.claim('dc-row-2', '{}') \gset
SELECT idempotency.fail('dc-row-2', :fence2, '{"e": 1}', 503, retryable => true);
SELECT idempotency_key, status, dc_tag, response_body, retryable, locked_until
  FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dc-row-%' ORDER BY 1;
SELECT * FROM pg_temp.trigger_log ORDER BY key, what;
DROP TRIGGER dc_a_tag ON idempotency.idempotency_keys;
DROP TRIGGER dc_after ON idempotency.idempotency_keys;
DROP TRIGGER dc_of_status ON idempotency.idempotency_keys;
DROP TRIGGER dc_of_request ON idempotency.idempotency_keys;

-- a BEFORE trigger that skips the update: the call finds nothing to
-- finish, 55000 as for a lost lease, and the key stays held
CREATE TRIGGER dc_skip BEFORE UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.skip_row();
SELECT fence AS fence3 FROM idempotency.claim('dc-skip', '{}') \gset
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('dc-skip', %s, '{}')$$, :fence3));
SELECT status FROM idempotency.idempotency_keys WHERE idempotency_key = 'dc-skip';
DROP TRIGGER dc_skip ON idempotency.idempotency_keys;

-- a CHECK constraint holds for the new version (this should fail)
ALTER TABLE idempotency.idempotency_keys
  ADD CONSTRAINT dc_check CHECK (response_code IS DISTINCT FROM 418) NOT VALID;
SELECT fence AS fence4 FROM idempotency.claim('dc-check', '{}') \gset
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('dc-check', %s, '{}', 418)$$, :fence4));
ALTER TABLE idempotency.idempotency_keys DROP CONSTRAINT dc_check;

-- an index of the user's on a column the call sets gets the new version's
-- entry (the update is not HOT), and the old entry leads nowhere
CREATE INDEX dc_status ON idempotency.idempotency_keys (status, idempotency_key);
SELECT fence AS fence5 FROM idempotency.claim('dc-index', '{}') \gset
SELECT idempotency.complete('dc-index', :fence5, '{"n": 5}', response_ttl => '1 minute');
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT idempotency_key, response_body FROM idempotency.idempotency_keys
 WHERE status = 'completed' AND idempotency_key = 'dc-index';
SELECT count(*) FROM idempotency.idempotency_keys
 WHERE status = 'processing' AND idempotency_key = 'dc-index';
-- and the answer's expiry is in its own partial index
SELECT idempotency_key FROM idempotency.idempotency_keys
 WHERE response_expires_at > now() AND idempotency_key = 'dc-index';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX idempotency.dc_status;

-- the row functions lock the row before they write it, as logical
-- replication's apply worker does: a completion that stays on its page (a
-- HOT update, with room left by the fill factor) writes the lock's WAL
-- record and the update's; the statement (the portable edition's) only
-- the update's (so does the C edition's with idempotency.direct_writes off)
ALTER TABLE idempotency.idempotency_keys SET (fillfactor = 50);
-- (no dead rows of earlier tests, whose pruning would add a record)
VACUUM idempotency.idempotency_keys;
SELECT fence AS fence_wal FROM idempotency.claim('dc-wal', '{}') \gset
SELECT pg_temp.wal_records(format($$SELECT idempotency.complete('dc-wal', %s, '{}')$$, :fence_wal))
       AS records_direct,
       l.lanname AS language
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid = 'idempotency.complete(text, bigint, jsonb, integer, text, interval, interval)'::regprocedure \gset
SELECT :records_direct = CASE WHEN :'language' = 'c' AND
         current_setting('idempotency.direct_writes', true) = 'on' THEN 2 ELSE 1 END
       AS lock_and_update;

-- What only the statement honours, so the call runs it: a statement
-- trigger fires once per completion
CREATE TRIGGER dc_statement AFTER UPDATE ON idempotency.idempotency_keys
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.log_statement();
TRUNCATE pg_temp.trigger_log;
SELECT fence AS fence6 FROM idempotency.claim('dc-statement', '{}') \gset
SELECT idempotency.complete('dc-statement', :fence6, '{}');
SELECT * FROM pg_temp.trigger_log;
-- and the update writes its one WAL record
SELECT fence AS fence_wal2 FROM idempotency.claim('dc-wal-2', '{}') \gset
SELECT pg_temp.wal_records(format($$SELECT idempotency.complete('dc-wal-2', %s, '{}')$$, :fence_wal2))
       AS update_only;
ALTER TABLE idempotency.idempotency_keys RESET (fillfactor);
DROP TRIGGER dc_statement ON idempotency.idempotency_keys;
-- transition tables see the old and the new version
CREATE FUNCTION pg_temp.dc_log_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pg_temp.trigger_log
    SELECT o.status || ' -> ' || n.status, n.idempotency_key
      FROM old_keys o JOIN new_keys n USING (key_hash);
  RETURN NULL;
END $$;
CREATE TRIGGER dc_transition AFTER UPDATE ON idempotency.idempotency_keys
  REFERENCING OLD TABLE AS old_keys NEW TABLE AS new_keys
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.dc_log_transition();
TRUNCATE pg_temp.trigger_log;
SELECT fence AS fence7 FROM idempotency.claim('dc-transition', '{}') \gset
SELECT idempotency.fail('dc-transition', :fence7, '{"e": 2}', 422, retryable => false);
SELECT * FROM pg_temp.trigger_log;
DROP TRIGGER dc_transition ON idempotency.idempotency_keys;
-- a stored generated column is computed again from the new version
ALTER TABLE idempotency.idempotency_keys
  ADD COLUMN dc_done boolean GENERATED ALWAYS AS (status <> 'processing') STORED;
SELECT fence AS fence8 FROM idempotency.claim('dc-generated', '{}') \gset
SELECT dc_done FROM idempotency.idempotency_keys WHERE idempotency_key = 'dc-generated';
SELECT idempotency.complete('dc-generated', :fence8, '{}');
SELECT dc_done FROM idempotency.idempotency_keys WHERE idempotency_key = 'dc-generated';
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dc_done;

-- with all of it gone, the rows are written directly again; a second
-- completion with the same fence finds the key finished (55000)
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dc_tag;
SELECT fence AS fence9 FROM idempotency.claim('dc-plain', '{}') \gset
SELECT idempotency.complete('dc-plain', :fence9, '{"plain": true}', ttl => '2 hours');
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('dc-plain', %s, '{}')$$, :fence9));
SELECT status, response_body, expires_at > now() + interval '1 hour' AS ttl_set
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'dc-plain';
SELECT outcome, response_body FROM idempotency.claim('dc-plain', '{}');
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dc-%';
