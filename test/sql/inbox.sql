-- Inbox: process_once(consumer, event_id) on processed_events (doc/reference.md, "Outbox and inbox").
\i test/sql/include/error_of.sql
-- these should all fail with 22023
SELECT pg_temp.error_of($$SELECT idempotency.process_once(NULL, 'e1')$$);
SELECT pg_temp.error_of($$SELECT idempotency.process_once('', 'e1')$$);
SELECT pg_temp.error_of($$SELECT idempotency.process_once(repeat('c', 256), 'e1')$$);
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', '')$$);
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', repeat('e', 256))$$);

-- true the first time, false after
SELECT idempotency.process_once('billing', 'e1') AS first,
       idempotency.process_once('billing', 'e1') AS second;
SELECT idempotency.process_once('billing', 'e1') AS later;
-- per consumer: another consumer processes the same event once too
SELECT idempotency.process_once('shipping', 'e1') AS other_consumer;
-- ids are compared exactly; lengths count characters, not bytes
SELECT idempotency.process_once('billing', 'E1') AS other_case,
       idempotency.process_once('billing', 'e1 ') AS trailing_space,
       idempotency.process_once(repeat('ü', 255), repeat('é', 255)) AS longest;
SELECT consumer, event_id, processed_at > now() - interval '1 minute' AS recent
  FROM idempotency.processed_events
 WHERE length(consumer) < 10
 ORDER BY consumer, event_id;

-- a rollback forgets the mark: the side effects rolled back with it
CREATE TABLE regress_ledger (event_id text PRIMARY KEY, amount int);
BEGIN;
SELECT idempotency.process_once('ledger', 'pay-1') AS first;
INSERT INTO regress_ledger VALUES ('pay-1', 100);
ROLLBACK;
-- the redelivered event is processed, exactly once
BEGIN;
SELECT idempotency.process_once('ledger', 'pay-1') AS first_again;
INSERT INTO regress_ledger VALUES ('pay-1', 100);
COMMIT;
BEGIN;
SELECT idempotency.process_once('ledger', 'pay-1') AS duplicate;
ROLLBACK;
SELECT * FROM regress_ledger;
-- within one transaction, the second call already sees the mark
BEGIN;
SELECT idempotency.process_once('ledger', 'pay-2') AS first,
       idempotency.process_once('ledger', 'pay-2') AS second;
COMMIT;
DROP TABLE regress_ledger;

-- a consumer role needs EXECUTE, not access to the table
CREATE ROLE regress_inbox_consumer;
GRANT USAGE ON SCHEMA idempotency TO regress_inbox_consumer;
GRANT EXECUTE ON FUNCTION idempotency.process_once(text, text) TO regress_inbox_consumer;
SET ROLE regress_inbox_consumer;
SELECT idempotency.process_once('role-consumer', 'e9') AS first;
-- this should fail with 42501
SELECT pg_temp.error_of($$SELECT count(*) FROM idempotency.processed_events$$);
RESET ROLE;
REVOKE ALL ON SCHEMA idempotency FROM regress_inbox_consumer;
REVOKE ALL ON FUNCTION idempotency.process_once(text, text) FROM regress_inbox_consumer;
DROP ROLE regress_inbox_consumer;
