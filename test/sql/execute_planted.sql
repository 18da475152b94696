-- execute() runs the caller's statement and leaves nothing in the server
-- session: behind a transaction pooler, an earlier client of the same
-- server session may have prepared anything under any name.  Statements
-- are planted here under every name that the portable edition used to
-- prepare these statements under before 1.8
-- (idempotency_execute_<md5 of "nparams:statement">, with 0 and 1 text
-- parameters); the business rows must still be written and the answers
-- be the statements' own.
CREATE TABLE planted_t (id int PRIMARY KEY, note text);
DEALLOCATE ALL;
\set VERBOSITY sqlstate
SELECT format('PREPARE %I%s AS SELECT %s', 'idempotency_execute_' || md5(n || ':' || s),
              CASE n WHEN 0 THEN '' ELSE '(text)' END,
              CASE n WHEN 0 THEN '''hijacked''' ELSE '''hijacked '' || $1' END)
  FROM unnest(ARRAY['INSERT INTO planted_t VALUES (1, ''zero'') RETURNING note',
                    'INSERT INTO planted_t VALUES (2, $1) RETURNING note']) s,
       generate_series(0, 1) n
\gexec
SELECT count(*) AS planted FROM pg_prepared_statements;

SELECT outcome, response_body
  FROM idempotency.execute('planted-0', NULL, 'INSERT INTO planted_t VALUES (1, ''zero'') RETURNING note');
SELECT outcome, response_body
  FROM idempotency.execute('planted-1', NULL, 'INSERT INTO planted_t VALUES (2, $1) RETURNING note',
                           ARRAY['one']);
SELECT id, note FROM planted_t ORDER BY id;
-- a replay answers what the statement stored
SELECT outcome, response_body
  FROM idempotency.execute('planted-1', NULL, 'INSERT INTO planted_t VALUES (2, $1) RETURNING note',
                           ARRAY['one']);
-- execute() left no statement of its own in the session
SELECT count(*) AS still_planted_only FROM pg_prepared_statements;
DEALLOCATE ALL;

-- nor does any outcome: claimed, replay, a broken statement on a new and
-- on a replayed key, a claim that may wait, a utility statement
SELECT outcome FROM idempotency.execute('planted-2', NULL, 'SELECT $1', ARRAY['x']);
SELECT outcome FROM idempotency.execute('planted-2', NULL, 'SELECT $1', ARRAY['x']);
SELECT idempotency.execute('planted-3', NULL, 'SELECT FROM WHERE');
SELECT idempotency.execute('planted-2', NULL, 'SELECT FROM WHERE');
SELECT outcome FROM idempotency.execute('planted-2', NULL, 'SELECT $1', ARRAY['x'], wait => '1 second');
SELECT outcome FROM idempotency.execute('planted-4', NULL, 'SELECT $1', ARRAY['x'], wait => '1 second');
SELECT outcome FROM idempotency.execute('planted-5', NULL, 'CREATE TEMP TABLE planted_temp (a int)');
SELECT count(*) AS prepared FROM pg_prepared_statements;
-- $n is the n-th element whatever the array's bounds, as the C binds it
SELECT response_body FROM idempotency.execute('planted-6', NULL, 'SELECT $1 || $2', '[0:1]={a,b}'::text[]);
\set VERBOSITY default

DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'planted-%';
DROP TABLE planted_t, planted_temp;
