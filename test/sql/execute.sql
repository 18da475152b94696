-- execute(): exactly-once SQL in one round trip.
CREATE TABLE payments (id serial PRIMARY KEY, order_no text NOT NULL, amount int NOT NULL);
\i test/sql/include/error_of.sql

-- claimed: the statement runs, its result is stored and returned, completed
SELECT outcome, fence IS NOT NULL AS has_fence, status, response_code, response_body, attempts
  FROM idempotency.execute('x-1', '{"amount": 100}',
       'INSERT INTO payments(order_no, amount) VALUES ($1, $2::int) RETURNING to_jsonb(payments.*)',
       ARRAY['ORD1', '100']);
-- replay: the same request never re-runs the statement
SELECT outcome, fence IS NULL AS no_fence, status, response_code, response_body
  FROM idempotency.execute('x-1', '{"amount": 100}',
       'INSERT INTO payments(order_no, amount) VALUES ($1, $2::int) RETURNING to_jsonb(payments.*)',
       ARRAY['ORD1', '100']);
SELECT count(*) AS payments FROM payments;
-- mismatch: another request under the key runs nothing
SELECT outcome, response_body IS NULL AS no_body
  FROM idempotency.execute('x-1', '{"amount": 200}',
       'INSERT INTO payments(order_no, amount) VALUES ($1, $2::int) RETURNING id',
       ARRAY['ORD1', '200']);
-- in_progress: a claimed key runs nothing
SELECT outcome FROM idempotency.claim('x-2', '{"a": 1}');
SELECT outcome, retry_after > '0' AS has_retry_after
  FROM idempotency.execute('x-2', '{"a": 1}', 'INSERT INTO payments(order_no, amount) VALUES (''X'', 1)');
-- resumed: a crashed holder's key is run by execute
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE idempotency_key = 'x-2';
SELECT outcome, status, response_code, response_body, attempts
  FROM idempotency.execute('x-2', '{"a": 1}',
       'INSERT INTO payments(order_no, amount) VALUES (''ORD2'', 1) RETURNING order_no');
SELECT count(*) AS payments FROM payments;

-- results: first column of the first row as jsonb; no row and NULL are JSON null
SELECT response_body FROM idempotency.execute('x-3', NULL, 'SELECT 1, 2');
SELECT response_body FROM idempotency.execute('x-4', NULL, 'SELECT NULL::int');
SELECT response_body FROM idempotency.execute('x-5', NULL, 'SELECT 1 WHERE false');
SELECT response_body, jsonb_typeof(response_body)
  FROM idempotency.execute('x-6', NULL, 'UPDATE payments SET amount = amount WHERE false');
SELECT response_body FROM idempotency.execute('x-7', NULL, 'SELECT g FROM generate_series(5, 9) g');
SELECT response_body FROM idempotency.execute('x-8', NULL, 'SELECT ''{"a": [1, 2]}''::jsonb');
SELECT response_body FROM idempotency.execute('x-9', NULL, 'SELECT ''{"b": 1}''::json');
SELECT response_body FROM idempotency.execute('x-10', NULL, 'SELECT ROW(1, ''two'')');
SELECT response_body FROM idempotency.execute('x-11', NULL, 'SELECT ARRAY[$1::int, $2::int]',
                                              ARRAY['3', '4']);
SELECT response_body FROM idempotency.execute('x-12', NULL, 'SELECT $1 IS NULL', ARRAY[NULL]);
SELECT response_body FROM idempotency.execute('x-13', NULL, 'SELECT 42', NULL);
SELECT lookup.response_body FROM idempotency.lookup('x-10') lookup;

-- a failing statement propagates its error and stores nothing
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-20', NULL,
       'INSERT INTO payments(order_no, amount) VALUES ($1, $2::int)', ARRAY['ORD3', 'lots'])$$);
SELECT idempotency.lookup('x-20') IS NULL AS nothing_stored;
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-20', NULL, 'SELECT 1/0')$$);
SELECT idempotency.lookup('x-20') IS NULL AS nothing_stored;
-- ... and the key stays usable
SELECT outcome, response_body FROM idempotency.execute('x-20', NULL, 'SELECT 1');

-- statement checks apply whatever the outcome
-- these should all fail
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-1', NULL, NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-1', NULL, '')$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-1', NULL, '  -- only a comment')$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-21', NULL, 'SELECT 1; SELECT 2')$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-21', NULL, 'SELECT $2', ARRAY['a'])$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-21', NULL, 'SELEC 1')$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-21', NULL, 'SELECT 1', ARRAY[ARRAY['a']])$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-21', NULL, 'SELECT 1', '{}', '', '1 second')$$);
SET idempotency.max_response_bytes = 64;
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-21', NULL, 'SELECT repeat(''x'', 100)')$$);
RESET idempotency.max_response_bytes;
SELECT idempotency.lookup('x-21') IS NULL AS nothing_stored;

-- one transaction: execute's claim and statement commit or roll back together
BEGIN;
SELECT outcome FROM idempotency.execute('x-22', NULL,
       'INSERT INTO payments(order_no, amount) VALUES (''ORD22'', 5)');
ROLLBACK;
SELECT idempotency.lookup('x-22') IS NULL AS rolled_back,
       NOT EXISTS (SELECT FROM payments WHERE order_no = 'ORD22') AS no_payment;

-- the statement runs with the caller's rights, the bookkeeping with the owner's
CREATE ROLE regress_exec_app;
GRANT USAGE ON SCHEMA idempotency TO regress_exec_app;
GRANT EXECUTE ON FUNCTION idempotency.execute(text, jsonb, text, text[], text, interval, interval, interval)
   TO regress_exec_app;
GRANT SELECT ON payments TO regress_exec_app;
SET ROLE regress_exec_app;
SELECT outcome, response_body FROM idempotency.execute('x-30', NULL, 'SELECT count(*) FROM payments');
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-31', NULL,
       'INSERT INTO payments(order_no, amount) VALUES (''EVIL'', 1)')$$);
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-31', NULL,
       'UPDATE idempotency.idempotency_keys SET response_body = ''{}''')$$);
SELECT pg_temp.error_of($$SELECT count(*) FROM idempotency.idempotency_keys$$);
RESET ROLE;
SELECT idempotency.lookup('x-31') IS NULL AS nothing_stored,
       NOT EXISTS (SELECT FROM payments WHERE order_no = 'EVIL') AS no_payment;
-- the plan cached by one role is checked again for the next one
GRANT INSERT ON payments TO regress_exec_app;
GRANT USAGE ON SEQUENCE payments_id_seq TO regress_exec_app;
SET ROLE regress_exec_app;
SELECT outcome FROM idempotency.execute('x-32', NULL,
       'INSERT INTO payments(order_no, amount) VALUES (''APP'', 1)');
RESET ROLE;
REVOKE INSERT ON payments FROM regress_exec_app;
SET ROLE regress_exec_app;
SELECT pg_temp.error_of($$SELECT idempotency.execute('x-33', NULL,
       'INSERT INTO payments(order_no, amount) VALUES (''APP'', 1)')$$);
RESET ROLE;

DROP OWNED BY regress_exec_app;
DROP ROLE regress_exec_app;
DROP TABLE payments;
