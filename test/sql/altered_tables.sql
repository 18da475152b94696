-- The extension finds its tables and the columns it reads by name: a
-- renamed one is an error with its own SQLSTATE (42P01, 42703) and a hint,
-- never an internal error, and all is well again once the name is back.
\i test/sql/include/error_of.sql

-- these should all fail
BEGIN;
ALTER TABLE idempotency.idempotency_keys RENAME TO renamed_keys;
SELECT pg_temp.error_of($$SELECT idempotency.issue_token()$$);
ROLLBACK;
BEGIN;
ALTER TABLE idempotency.processed_events RENAME TO renamed_events;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('altered', 'e1')$$);
ROLLBACK;
BEGIN;
ALTER TABLE idempotency.idempotency_keys RENAME COLUMN status TO renamed_status;
SELECT pg_temp.error_of($$SELECT idempotency.claim('altered-key')$$);
ROLLBACK;

-- the same calls work once the names are back
SELECT idempotency.issue_token() IS NOT NULL AS issued;
SELECT idempotency.process_once('altered', 'e1') AS first_time;
SELECT (idempotency.claim('altered-key')).outcome;
DELETE FROM idempotency.processed_events WHERE consumer = 'altered';
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key = 'altered-key';
