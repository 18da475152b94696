-- Keys outlive their answers (1.6): response_ttl of complete(), fail()
-- and execute(), idempotency.default_response_ttl, the outcome gone, and
-- purge_expired_batch() dropping answers.  Time passes by moving the
-- times stored in rows, as holder_expiry and cleanup do.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
\i test/sql/include/fence_of.sql
-- the key's answer expiry, as an offset from when the answer was stored
-- (NULL: none)
CREATE FUNCTION pg_temp.answer_for(k text) RETURNS interval LANGUAGE sql AS $$
  SELECT response_expires_at - updated_at FROM idempotency.idempotency_keys
   WHERE idempotency_key = k AND scope = ''
$$;
-- make the time of a key's stored answer come
CREATE FUNCTION pg_temp.answer_goes(k text) RETURNS void LANGUAGE sql AS $$
  UPDATE idempotency.idempotency_keys
     SET response_expires_at = now() - interval '1 second'
   WHERE idempotency_key = k AND scope = ''
$$;
\i test/sql/include/wal_records.sql

-- complete() with response_ttl: the answer is replayed for response_ttl
-- from now, the key lives on for its ttl
SELECT outcome FROM idempotency.claim('rt-1', '{"n": 1}', ttl => '1 day');
-- (idempotency.default_response_ttl is unset by default)
SHOW idempotency.default_response_ttl;
SELECT idempotency.complete('rt-1', pg_temp.fence_of('rt-1'), '{"paid": 1}', 201,
                            response_ttl => '1 hour');
SELECT pg_temp.answer_for('rt-1') AS answer_for,
       expires_at - created_at AS key_for
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'rt-1';
-- before the answer's time: replay
SELECT outcome, fence, status, response_code, response_body, attempts, recovery_point, retry_after
  FROM idempotency.claim('rt-1', '{"n": 1}');
-- after it: gone, with the status and code of the answer but not its body
SELECT pg_temp.answer_goes('rt-1');
SELECT outcome, fence, status, response_code, response_body, attempts, recovery_point, retry_after
  FROM idempotency.claim('rt-1', '{"n": 1}');
SELECT outcome, response_code FROM idempotency.claim('rt-1');
-- another request under the key: mismatch, not gone
SELECT outcome, fence, status, response_code, response_body
  FROM idempotency.claim('rt-1', '{"n": 2}');
-- execute() of the gone key runs nothing and returns the gone row
CREATE TEMP SEQUENCE rt_runs;
SELECT outcome, fence, status, response_code, response_body, attempts
  FROM idempotency.execute('rt-1', '{"n": 1}', 'SELECT nextval(''rt_runs'')');
SELECT is_called AS statement_ran FROM rt_runs;
-- lookup() shows the row without the body, as gone does (1.7): the code
-- stays; the table keeps the body until purge drops it
SELECT status, response_code, response_body,
       response_expires_at < now() AS answer_past
  FROM idempotency.lookup('rt-1');
SELECT response_body AS stored_body FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'rt-1';

-- gone writes nothing: it answers in a read-only transaction, and in a
-- read-write one it takes no transaction id and writes no WAL, as a replay
BEGIN;
SET TRANSACTION READ ONLY;
SELECT outcome, status, response_code, response_body FROM idempotency.claim('rt-1', '{"n": 1}');
SELECT outcome, response_body FROM idempotency.execute('rt-1', '{"n": 1}', 'SELECT 1');
COMMIT;
BEGIN;
SELECT pg_temp.wal_records($$SELECT idempotency.claim('rt-1', '{"n": 1}')$$) AS gone_wal,
       pg_temp.wal_records($$SELECT idempotency.execute('rt-1', '{"n": 1}', 'SELECT 1')$$) AS execute_gone_wal,
       pg_current_xact_id_if_assigned() IS NULL AS no_transaction_id;
-- (a claim that writes is counted: the measure works)
SELECT pg_temp.wal_records($$SELECT idempotency.claim('rt-wal')$$) > 0 AS claim_writes_wal;
ROLLBACK;

-- a final failure with response_ttl: gone after it, with its status and
-- code
SELECT outcome FROM idempotency.claim('rt-2');
SELECT idempotency.fail('rt-2', pg_temp.fence_of('rt-2'), '{"e": "declined"}', 402, false,
                        response_ttl => '10 minutes');
SELECT pg_temp.answer_for('rt-2') AS answer_for;
SELECT outcome, status, response_code, response_body FROM idempotency.claim('rt-2');
SELECT pg_temp.answer_goes('rt-2');
SELECT outcome, fence, status, response_code, response_body, attempts
  FROM idempotency.claim('rt-2');

-- execute() with response_ttl: a new key, and one it takes over
SELECT outcome, response_body
  FROM idempotency.execute('rt-3', '{"n": 3}', 'SELECT 3', response_ttl => '5 minutes');
SELECT pg_temp.answer_for('rt-3') AS answer_for;
SELECT outcome FROM idempotency.claim('rt-4');
SELECT idempotency.fail('rt-4', pg_temp.fence_of('rt-4'));
SELECT outcome, response_body
  FROM idempotency.execute('rt-4', NULL, 'SELECT 4', response_ttl => '6 minutes');
SELECT pg_temp.answer_for('rt-4') AS answer_for;
SELECT pg_temp.answer_goes('rt-4');
SELECT outcome, status, response_code, response_body
  FROM idempotency.execute('rt-4', NULL, 'SELECT 4', response_ttl => '6 minutes');

-- idempotency.default_response_ttl applies when response_ttl is NULL: to
-- complete(), final failures and execute(), not to retryable failures
SET idempotency.default_response_ttl = '2 hours';
SHOW idempotency.default_response_ttl;
SELECT outcome FROM idempotency.claim('rt-5');
SELECT idempotency.complete('rt-5', pg_temp.fence_of('rt-5'), '{}');
SELECT outcome FROM idempotency.claim('rt-6');
SELECT idempotency.complete('rt-6', pg_temp.fence_of('rt-6'), '{}', response_ttl => '30 minutes');
SELECT outcome FROM idempotency.claim('rt-7');
SELECT idempotency.fail('rt-7', pg_temp.fence_of('rt-7'), '{}', 409, false);
SELECT outcome FROM idempotency.claim('rt-8');
SELECT idempotency.fail('rt-8', pg_temp.fence_of('rt-8'), '{}', 503);
SELECT outcome FROM idempotency.execute('rt-9', NULL, 'SELECT 9');
SELECT idempotency_key, status, retryable, pg_temp.answer_for(idempotency_key) AS answer_for
  FROM idempotency.idempotency_keys WHERE idempotency_key IN ('rt-5', 'rt-6', 'rt-7', 'rt-8', 'rt-9')
 ORDER BY idempotency_key COLLATE "C";
-- (the retryable failure is resumed as before)
SELECT outcome, attempts FROM idempotency.claim('rt-8');
-- unset again: answers live as long as their keys
SET idempotency.default_response_ttl = '';
SHOW idempotency.default_response_ttl;
SELECT idempotency.complete('rt-8', pg_temp.fence_of('rt-8'), '{}');
SELECT outcome, response_body FROM idempotency.execute('rt-10', NULL, 'SELECT 10');
SELECT idempotency_key, pg_temp.answer_for(idempotency_key) AS answer_for
  FROM idempotency.idempotency_keys WHERE idempotency_key IN ('rt-8', 'rt-10')
 ORDER BY idempotency_key COLLATE "C";
RESET idempotency.default_response_ttl;

-- an answer never outlives its key: a response_ttl that reaches the key's
-- expiry (after ttl is applied) stores NULL, and the key replays until it
-- goes
SELECT outcome FROM idempotency.claim('rt-11', ttl => '1 hour');
SELECT idempotency.complete('rt-11', pg_temp.fence_of('rt-11'), '{}', response_ttl => '2 hours');
SELECT outcome FROM idempotency.claim('rt-12', ttl => '1 hour');
SELECT idempotency.complete('rt-12', pg_temp.fence_of('rt-12'), '{}', ttl => '3 hours',
                            response_ttl => '2 hours');
SELECT outcome FROM idempotency.claim('rt-13', ttl => '1 hour');
SELECT idempotency.complete('rt-13', pg_temp.fence_of('rt-13'), '{}', ttl => '30 minutes',
                            response_ttl => '30 minutes');
SELECT outcome FROM idempotency.execute('rt-14', NULL, 'SELECT 14', ttl => '1 hour',
                                        response_ttl => '1 hour');
SET idempotency.default_response_ttl = '1 day';
SELECT outcome FROM idempotency.claim('rt-15', ttl => '1 hour');
SELECT idempotency.fail('rt-15', pg_temp.fence_of('rt-15'), '{}', 400, false);
RESET idempotency.default_response_ttl;
SELECT idempotency_key, pg_temp.answer_for(idempotency_key) AS answer_for,
       response_expires_at < expires_at AS before_the_key
  FROM idempotency.idempotency_keys WHERE idempotency_key IN ('rt-11', 'rt-12', 'rt-13', 'rt-14', 'rt-15')
 ORDER BY idempotency_key COLLATE "C";

-- these should all fail with 22023 and change nothing: response_ttl on a
-- retryable failure, not positive, over 100 years
SELECT outcome FROM idempotency.claim('rt-16');
SELECT pg_temp.error_of(format($$SELECT idempotency.fail('rt-16', %s, response_ttl => '1 hour')$$, pg_temp.fence_of('rt-16'))) AS retryable_with_response_ttl;
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('rt-16', %s, '{}', response_ttl => '0')$$, pg_temp.fence_of('rt-16'))) AS zero,
       pg_temp.error_of(format($$SELECT idempotency.complete('rt-16', %s, '{}', response_ttl => '-1 hour')$$, pg_temp.fence_of('rt-16'))) AS negative;
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('rt-16', %s, '{}', response_ttl => '101 years')$$, pg_temp.fence_of('rt-16'))) AS over_100_years,
       pg_temp.error_of(format($$SELECT idempotency.fail('rt-16', %s, retryable => false, response_ttl => '0')$$, pg_temp.fence_of('rt-16'))) AS final_zero;
SELECT pg_temp.error_of($$SELECT idempotency.execute('rt-17', NULL, 'SELECT 17', response_ttl => '-1 second')$$) AS execute_negative;
SELECT status, response_expires_at FROM idempotency.idempotency_keys WHERE idempotency_key = 'rt-16';
SELECT count(*) AS rt_17_rows FROM idempotency.idempotency_keys WHERE idempotency_key = 'rt-17';
-- and so should these settings (invalid parameter value, 22023)
SELECT pg_temp.error_of($$SET idempotency.default_response_ttl = '0'$$) AS zero;
SELECT pg_temp.error_of($$SET idempotency.default_response_ttl = '-1 hour'$$) AS negative;
SELECT pg_temp.error_of($$SET idempotency.default_response_ttl = '101 years'$$) AS over_100_years;
SELECT pg_temp.error_of($$SET idempotency.default_response_ttl = 'soon'$$) AS not_an_interval;
SHOW idempotency.default_response_ttl;
SET idempotency.default_response_ttl = '100 years';
SHOW idempotency.default_response_ttl;
RESET idempotency.default_response_ttl;

-- a claim that takes over an expired key leaves no answer expiry behind,
-- and its completion without response_ttl keeps it so
SELECT outcome FROM idempotency.claim('rt-18', '{"n": 18}');
SELECT idempotency.complete('rt-18', pg_temp.fence_of('rt-18'), '{"old": true}', response_ttl => '1 hour');
UPDATE idempotency.idempotency_keys SET expires_at = now() - interval '1 second'
 WHERE idempotency_key = 'rt-18';
SELECT outcome, attempts, response_body FROM idempotency.claim('rt-18', '{"n": 18}');
SELECT status, response_expires_at FROM idempotency.idempotency_keys WHERE idempotency_key = 'rt-18';
SELECT idempotency.complete('rt-18', pg_temp.fence_of('rt-18'), '{"new": true}');
SELECT outcome, response_body FROM idempotency.claim('rt-18', '{"n": 18}');
SELECT response_expires_at FROM idempotency.idempotency_keys WHERE idempotency_key = 'rt-18';

-- complete() without response_ttl stays a HOT update; with one it is not
-- (its index gains the row)
BEGIN;
SELECT outcome FROM idempotency.claim('rt-19');
SELECT outcome FROM idempotency.claim('rt-20');
SELECT pg_stat_get_xact_tuples_hot_updated('idempotency.idempotency_keys'::regclass) AS hot \gset
SELECT idempotency.complete('rt-19', pg_temp.fence_of('rt-19'), '{}');
SELECT pg_stat_get_xact_tuples_hot_updated('idempotency.idempotency_keys'::regclass) - :hot AS hot_without;
SELECT pg_stat_get_xact_tuples_hot_updated('idempotency.idempotency_keys'::regclass) AS hot \gset
SELECT idempotency.complete('rt-20', pg_temp.fence_of('rt-20'), '{}', response_ttl => '1 hour');
SELECT pg_stat_get_xact_tuples_hot_updated('idempotency.idempotency_keys'::regclass) - :hot AS hot_with;
ROLLBACK;

-- purge_expired_batch() drops answers past their time, at most batch_size
-- per batch, oldest first, through an UPDATE that fires the table's
-- triggers; keys without response_ttl, answers still live and keys that
-- expired (which go whole) are left to the rest
CALL idempotency.purge_expired();
CREATE TABLE rt_dropped (idempotency_key text, had_body boolean, body jsonb, response_expires_at timestamptz);
-- the purge runs as the extension owner, and so does the trigger it fires
-- (in the portable edition the owner is no superuser: doc/reference.md)
SELECT tableowner AS owner FROM pg_tables
 WHERE schemaname = 'idempotency' AND tablename = 'idempotency_keys' \gset
GRANT INSERT ON rt_dropped TO :"owner";
CREATE FUNCTION rt_note_drop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.rt_dropped
  VALUES (NEW.idempotency_key, OLD.response_body IS NOT NULL, NEW.response_body, NEW.response_expires_at);
  RETURN NEW;
END $$;
CREATE TRIGGER rt_note_drop AFTER UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW WHEN (NEW.idempotency_key LIKE 'pg-%') EXECUTE FUNCTION rt_note_drop();
SELECT count(*) AS claimed FROM unnest(ARRAY['pg-a1', 'pg-a2', 'pg-a3', 'pg-live', 'pg-plain', 'pg-expired']) k,
       LATERAL idempotency.claim(k) c WHERE c.outcome = 'claimed';
SELECT idempotency.complete(k, pg_temp.fence_of(k), jsonb_build_object('k', k), 201,
                            response_ttl => CASE WHEN k <> 'pg-plain' THEN interval '1 hour' END)
  FROM unnest(ARRAY['pg-a1', 'pg-a2', 'pg-a3', 'pg-live', 'pg-plain', 'pg-expired']) k;
UPDATE idempotency.idempotency_keys
   SET response_expires_at = now() - interval '1 minute' * substr(idempotency_key, 5)::int
 WHERE idempotency_key IN ('pg-a1', 'pg-a2', 'pg-a3');
UPDATE idempotency.idempotency_keys
   SET response_expires_at = now() - interval '2 seconds', expires_at = now() - interval '1 second'
 WHERE idempotency_key = 'pg-expired';
DELETE FROM rt_dropped;
SELECT * FROM idempotency.purge_expired_batch(2);
SELECT * FROM rt_dropped ORDER BY idempotency_key COLLATE "C";
SELECT * FROM idempotency.purge_expired_batch(2);
SELECT * FROM idempotency.purge_expired_batch(2);
SELECT idempotency_key, status, response_code, response_body, response_expires_at
  FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'pg-%' AND idempotency_key <> 'pg-live'
 ORDER BY idempotency_key COLLATE "C";
SELECT response_body, response_expires_at > now() AS answer_live
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'pg-live';
SELECT idempotency_key, had_body, body, response_expires_at FROM rt_dropped
 ORDER BY idempotency_key COLLATE "C";
-- a dropped answer is gone for claims; '-infinity' is out of the partial
-- index, which holds the live answer only
SELECT outcome, status, response_code, response_body FROM idempotency.claim('pg-a1');
SELECT count(*) AS indexed FROM idempotency.idempotency_keys
 WHERE idempotency_key LIKE 'pg-%' AND response_expires_at > '-infinity';
-- the procedure drops them too
SELECT pg_temp.answer_goes('pg-live');
DELETE FROM rt_dropped;
CALL idempotency.purge_expired();
SELECT idempotency_key, had_body, body, response_expires_at FROM rt_dropped;
-- an answer whose drop fails (a trigger raises) stays, with a WARNING,
-- and the others of its batch go; a later purge tries it again
CREATE FUNCTION rt_refuse_drop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'keep the answer of %', OLD.idempotency_key;
END $$;
CREATE TRIGGER rt_refuse_drop BEFORE UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW WHEN (OLD.idempotency_key = 'pg-stuck' AND NEW.response_body IS NULL)
  EXECUTE FUNCTION rt_refuse_drop();
SELECT count(*) AS claimed FROM unnest(ARRAY['pg-stuck', 'pg-next']) k,
       LATERAL idempotency.claim(k) c WHERE c.outcome = 'claimed';
SELECT idempotency.complete(k, pg_temp.fence_of(k), '{}', response_ttl => '1 hour'),
       pg_temp.answer_goes(k)
  FROM unnest(ARRAY['pg-stuck', 'pg-next']) k;
SELECT * FROM idempotency.purge_expired_batch() WHERE deleted > 0;
SELECT idempotency_key, response_body, response_expires_at = '-infinity' AS dropped
  FROM idempotency.idempotency_keys WHERE idempotency_key IN ('pg-stuck', 'pg-next')
 ORDER BY idempotency_key COLLATE "C";
DROP TRIGGER rt_refuse_drop ON idempotency.idempotency_keys;
DROP FUNCTION rt_refuse_drop();
SELECT * FROM idempotency.purge_expired_batch();
SELECT * FROM idempotency.purge_expired_batch();

DROP TRIGGER rt_note_drop ON idempotency.idempotency_keys;
DROP FUNCTION rt_note_drop();
DROP TABLE rt_dropped;
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key ~ '^(rt|pg)-';
