-- A claim or execute that creates a key writes its row with the executor's
-- row primitives when the table takes them, and with its INSERT statement
-- otherwise (doc/reference.md, "Writes"): either way, what users add to the
-- table of keys holds as for an INSERT of their own.  The first part adds
-- what the primitives honour (row triggers, constraints, foreign keys,
-- generated columns, unique indexes); the second what only the statement
-- honours (statement triggers, transition tables, defaults, identity,
-- domains).  The portable edition always runs the statement, and passes
-- the same test.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
\i test/sql/include/trigger_log.sql
CREATE FUNCTION pg_temp.dw_log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pg_temp.trigger_log VALUES (TG_WHEN || ' ' || TG_LEVEL, NEW.idempotency_key);
  RETURN NEW;
END $$;

-- row triggers, BEFORE and AFTER, see the row and may change it
ALTER TABLE idempotency.idempotency_keys ADD COLUMN dw_tag text;
CREATE FUNCTION pg_temp.dw_tag() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.dw_tag := 'tagged ' || NEW.idempotency_key;
  RETURN NEW;
END $$;
CREATE TRIGGER dw_a_tag BEFORE INSERT ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dw_tag();
CREATE TRIGGER dw_after AFTER INSERT ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dw_log_row();
SELECT outcome FROM idempotency.claim('dw-row-1', '{"n": 1}');
SELECT x.outcome, x.response_body
  FROM idempotency.execute('dw-row-2', '{}', $$SELECT '{"done": true}'::jsonb$$) x;
SELECT idempotency_key, dw_tag, status FROM idempotency.idempotency_keys
 WHERE idempotency_key LIKE 'dw-row-%' ORDER BY 1;
SELECT * FROM pg_temp.trigger_log ORDER BY key;
DROP TRIGGER dw_a_tag ON idempotency.idempotency_keys;
DROP TRIGGER dw_after ON idempotency.idempotency_keys;

-- a BEFORE trigger that skips the row: no key, and the claim gives up
-- with 40001 as for any trigger that keeps it from the key
CREATE TRIGGER dw_skip BEFORE INSERT ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.skip_row();
SELECT pg_temp.error_of($$SELECT idempotency.claim('dw-skip', '{}')$$);
SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key = 'dw-skip';
DROP TRIGGER dw_skip ON idempotency.idempotency_keys;

-- NOT NULL, CHECK and foreign keys of added columns (these should fail)
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN dw_tag SET NOT NULL;
SELECT pg_temp.error_of($$SELECT idempotency.claim('dw-nn', '{}')$$);
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN dw_tag DROP NOT NULL;
ALTER TABLE idempotency.idempotency_keys
  ADD CONSTRAINT dw_check CHECK (idempotency_key NOT LIKE 'dw-bad%') NOT VALID;
SELECT pg_temp.error_of($$SELECT idempotency.claim('dw-bad-1', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('dw-bad-2', '{}', 'SELECT 1')$$);
ALTER TABLE idempotency.idempotency_keys DROP CONSTRAINT dw_check;
CREATE TABLE public.dw_accounts (id int PRIMARY KEY);
INSERT INTO public.dw_accounts VALUES (1);
ALTER TABLE idempotency.idempotency_keys
  ADD COLUMN dw_account int REFERENCES public.dw_accounts;
CREATE FUNCTION pg_temp.dw_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.dw_account := CASE WHEN NEW.idempotency_key LIKE 'dw-fk-bad%' THEN 2 ELSE 1 END;
  RETURN NEW;
END $$;
CREATE TRIGGER dw_account BEFORE INSERT ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION pg_temp.dw_account();
SELECT outcome FROM idempotency.claim('dw-fk-ok', '{}');
SELECT pg_temp.error_of($$SELECT idempotency.claim('dw-fk-bad', '{}')$$);
-- a deferred foreign key is checked at commit
ALTER TABLE idempotency.idempotency_keys
  ALTER CONSTRAINT idempotency_keys_dw_account_fkey DEFERRABLE INITIALLY DEFERRED;
BEGIN;
SELECT outcome FROM idempotency.claim('dw-fk-bad-deferred', '{}');
COMMIT;
SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dw-fk-bad%';
DROP TRIGGER dw_account ON idempotency.idempotency_keys;
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dw_account;
DROP TABLE public.dw_accounts;

-- a stored generated column is computed; a unique index of the user's is
-- checked (this should fail)
ALTER TABLE idempotency.idempotency_keys
  ADD COLUMN dw_len int GENERATED ALWAYS AS (length(idempotency_key)) STORED;
SELECT outcome FROM idempotency.claim('dw-generated', '{}');
SELECT dw_len FROM idempotency.idempotency_keys WHERE idempotency_key = 'dw-generated';
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dw_len;
CREATE UNIQUE INDEX dw_unique ON idempotency.idempotency_keys (lower(idempotency_key));
SELECT outcome FROM idempotency.claim('dw-Unique', '{}');
SELECT pg_temp.error_of($$SELECT idempotency.claim('dw-unique', '{}')$$);
DROP INDEX idempotency.dw_unique;

-- What only the statement honours, so the claim runs it: a statement
-- trigger fires once per claim that creates a key
CREATE TRIGGER dw_statement AFTER INSERT ON idempotency.idempotency_keys
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.log_statement();
TRUNCATE pg_temp.trigger_log;
SELECT outcome FROM idempotency.claim('dw-statement', '{}');
SELECT outcome FROM idempotency.claim('dw-statement', '{}');
SELECT x.outcome FROM idempotency.execute('dw-statement-2', '{}', 'SELECT 1') x;
SELECT * FROM pg_temp.trigger_log;
-- and once per claim that takes a failed key over (its upsert)
SELECT fence AS dw_fence FROM idempotency.claim('dw-statement-3', '{}') \gset
SELECT idempotency.fail('dw-statement-3', :dw_fence);
TRUNCATE pg_temp.trigger_log;
SELECT outcome FROM idempotency.claim('dw-statement-3', '{}');
SELECT * FROM pg_temp.trigger_log;
DROP TRIGGER dw_statement ON idempotency.idempotency_keys;
-- a transition table sees the new row
CREATE FUNCTION pg_temp.dw_log_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pg_temp.trigger_log SELECT 'new table', idempotency_key FROM new_keys;
  RETURN NULL;
END $$;
CREATE TRIGGER dw_new AFTER INSERT ON idempotency.idempotency_keys
  REFERENCING NEW TABLE AS new_keys
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.dw_log_new();
TRUNCATE pg_temp.trigger_log;
SELECT outcome FROM idempotency.claim('dw-transition', '{}');
SELECT * FROM pg_temp.trigger_log;
DROP TRIGGER dw_new ON idempotency.idempotency_keys;
-- defaults and identity of added columns are filled in
ALTER TABLE idempotency.idempotency_keys ADD COLUMN dw_note text DEFAULT 'noted';
ALTER TABLE idempotency.idempotency_keys ADD COLUMN dw_seq bigint GENERATED BY DEFAULT AS IDENTITY;
SELECT outcome FROM idempotency.claim('dw-default', '{}');
SELECT x.outcome FROM idempotency.execute('dw-default-2', '{}', 'SELECT 1') x;
SELECT idempotency_key, dw_note, dw_seq > 0 AS has_seq FROM idempotency.idempotency_keys
 WHERE idempotency_key LIKE 'dw-default%' ORDER BY 1;
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dw_note, DROP COLUMN dw_seq;
-- a domain's NOT NULL holds for a column left out (this should fail)
CREATE DOMAIN public.dw_required AS text;
ALTER TABLE idempotency.idempotency_keys ADD COLUMN dw_required public.dw_required;
ALTER DOMAIN public.dw_required ADD CONSTRAINT dw_set CHECK (VALUE IS NOT NULL) NOT VALID;
-- (the message names the domain as the search_path of the call shows it)
SELECT split_part(pg_temp.error_of($$SELECT idempotency.claim('dw-domain', '{}')$$), ':', 1);
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dw_required;
DROP DOMAIN public.dw_required;
-- with all of it gone, the rows are written directly again
ALTER TABLE idempotency.idempotency_keys DROP COLUMN dw_tag;
SELECT outcome FROM idempotency.claim('dw-plain', '{}');
SELECT x.outcome FROM idempotency.execute('dw-plain-2', '{}', 'SELECT 1', response_ttl => '1 minute') x;
SELECT idempotency_key, status, response_expires_at IS NOT NULL AS answer_expires
  FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dw-plain%' ORDER BY 1;
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'dw-%';
