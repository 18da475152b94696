-- execute() refuses, with a proper SQLSTATE and before it claims the key,
-- the statements that SPI cannot run inside a function.
\set VERBOSITY sqlstate
SELECT idempotency.execute('refuse-1', NULL, 'COMMIT');
SELECT idempotency.execute('refuse-2', NULL, 'ROLLBACK');
SELECT idempotency.execute('refuse-3', NULL, 'BEGIN');
SELECT idempotency.execute('refuse-4', NULL, 'SAVEPOINT s');
SELECT idempotency.execute('refuse-5', NULL, 'COPY (SELECT 1) TO STDOUT');
\set VERBOSITY default
SELECT idempotency.execute('refuse-1', NULL, 'COMMIT');
-- nothing was claimed
SELECT count(*) AS keys FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'refuse-%';
-- the same key then runs a statement it can run
SELECT outcome, response_body FROM idempotency.execute('refuse-1', NULL, 'SELECT 42');
DELETE FROM idempotency.idempotency_keys;
