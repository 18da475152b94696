-- execute() reads a statement as the server will, whatever the session's
-- string settings, and runs exactly one; every function means the same
-- under those settings.  standard_conforming_strings goes off before any
-- call of the extension in this session (the portable edition compiles
-- its PL/pgSQL bodies here, at their first call).  The statements are
-- dollar-quoted, so this file reads the same under either setting.
SET standard_conforming_strings = off;
SET backslash_quote = on;
SET escape_string_warning = off;
CREATE TABLE strings_t (id int PRIMARY KEY, note text);
INSERT INTO strings_t VALUES (1, 'one'), (2, 'two');
\set VERBOSITY sqlstate

-- three statements to the server, one to a lexer that ignores the setting:
-- refused (42601) before the claim, nothing run
SELECT idempotency.execute('str-1', NULL,
       $q$SELECT 'a\' , ' ; DELETE FROM strings_t ; SELECT 1 AS q --'$q$);
SELECT count(*) AS rows_kept FROM strings_t;
SELECT idempotency.lookup('str-1') IS NULL AS nothing_claimed;

-- one statement whose plain strings take backslash escapes
SELECT outcome, response_body FROM idempotency.execute('str-2', NULL, $q$SELECT 'it\'s ; one' AS q$q$);
SELECT outcome, response_body
  FROM idempotency.execute('str-3', NULL, $q$SELECT '\\' || E'\\' || E'\'' || 'x\n' AS q$q$);
-- parameters, beside strings that hold $1 and $2
SELECT outcome, response_body
  FROM idempotency.execute('str-4', NULL,
       $q$INSERT INTO strings_t VALUES ($1::int, $2 || ' \'$1\' ' || E'\\$2') RETURNING note$q$,
       ARRAY['3', 'three']);
SELECT note FROM strings_t WHERE id = 3;

-- a replayed key with a broken statement: the statement's error, as the
-- C checks every statement before the claim; with wait too
SELECT outcome, response_body FROM idempotency.execute('str-2', NULL, $q$SELECT 'it\'s ; one' AS q$q$);
SELECT idempotency.execute('str-2', NULL, $q$SELECT 'it\'s' FROM$q$);
SELECT idempotency.execute('str-2', NULL, $q$SELECT no_such_column$q$);
SELECT idempotency.execute('str-2', NULL, $q$SELECT 'it\'s' FROM$q$, wait => '1 second');
SELECT outcome FROM idempotency.execute('str-2', NULL, 'SELECT 1', wait => '1 second');

-- the other functions compile and run under the setting too
SELECT outcome FROM idempotency.claim('str-c', '{"a": 1}');
WITH k AS (SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'str-c')
SELECT idempotency.complete('str-c', k.fence, '"done"') FROM k;
SELECT outcome, response_body FROM idempotency.claim('str-c', '{"a": 1}');
SELECT idempotency.process_once('strings', 'e1') AS first_time,
       idempotency.process_once('strings', 'e1') AS second_time;
SET idempotency.outbox_notify_interval = '5 ms';
SELECT idempotency.enqueue_event('strings', 'o-1', 'Made', '{"note": "a\\b"}') > 0 AS enqueued;
RESET idempotency.outbox_notify_interval;
SELECT idempotency.define_state_machine('strings_machine', '{"NEW": ["DONE"]}');
CREATE TABLE strings_orders (id text PRIMARY KEY, status text NOT NULL);
INSERT INTO strings_orders VALUES ('o-1', 'NEW');
SELECT idempotency.enforce_state_machine('strings_orders', 'status', 'strings_machine');
SELECT * FROM idempotency.transition('strings_orders', 'id', 'o-1', 'status', 'NEW', 'DONE');

-- under standard_conforming_strings = on, a string continued on the next
-- line is read as it began: here E'', so \' escapes the quote
SET standard_conforming_strings = on;
SELECT idempotency.execute('str-5', NULL, $q$SELECT E'a'
'\' , ' ; DELETE FROM strings_t ; SELECT 1 AS q --'$q$);
SELECT outcome, response_body FROM idempotency.execute('str-6', NULL, $q$SELECT E'a'
'\'' , 'b\' AS q$q$);
-- a comment ends at a carriage return too
SELECT idempotency.execute('str-7', NULL,
       'SELECT 1 AS q --' || chr(13) || ' ; DELETE FROM strings_t');
-- B'' and X'' strings take no escapes and end at any quote
SELECT outcome, response_body FROM idempotency.execute('str-8', NULL,
       $q$SELECT (B'10' || X'F')::text || ' ; ' || 'x\' AS q$q$);
-- the same text read under each setting in one session: one statement
-- under on, three under off (a plan kept from the first reading must not
-- serve the second)
SELECT outcome, response_body FROM idempotency.execute('str-9', NULL,
       $q$SELECT 'a\' , ' ; DELETE FROM strings_t ; SELECT 1 AS q --'$q$);
SET standard_conforming_strings = off;
SELECT idempotency.execute('str-10', NULL,
       $q$SELECT 'a\' , ' ; DELETE FROM strings_t ; SELECT 1 AS q --'$q$);
SET standard_conforming_strings = on;
SELECT count(*) AS rows_kept FROM strings_t;
SELECT count(*) AS keys FROM idempotency.idempotency_keys WHERE idempotency_key IN ('str-1', 'str-5', 'str-7', 'str-10');
\set VERBOSITY default

DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'str-%';
DELETE FROM idempotency.outbox_events WHERE aggregate_type = 'strings';
DELETE FROM idempotency.processed_events WHERE consumer = 'strings';
DROP TABLE strings_orders, strings_t;
DELETE FROM idempotency.state_machines WHERE name = 'strings_machine';
