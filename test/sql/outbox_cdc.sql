-- emit_event: transactional logical decoding messages read back through a
-- logical slot with test_decoding (the test cluster has wal_level=logical).
\i test/sql/include/error_of.sql
-- these should all fail with 22023
SELECT pg_temp.error_of($$SELECT idempotency.emit_event(NULL, '1', 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.emit_event('order', '', 'created', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.emit_event('order', '1', repeat('x', 256), '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.emit_event('order', '1', 'created', NULL)$$);

SELECT 'init' FROM pg_create_logical_replication_slot('regress_outbox_cdc', 'test_decoding');

-- committed: delivered
BEGIN;
SELECT idempotency.emit_event('order', 'o-1', 'created', '{"total": 10, "items": ["a", "b"]}',
                              '{"trace-id": "t-1"}') > '0/0'::pg_lsn AS lsn_returned;
COMMIT;
-- rolled back: never delivered
BEGIN;
SELECT idempotency.emit_event('order', 'o-2', 'created', '{"total": 20}') IS NOT NULL AS emitted;
ROLLBACK;
-- a savepoint rolled back: that message is gone, the rest of the
-- transaction commits
BEGIN;
SAVEPOINT s;
SELECT idempotency.emit_event('order', 'o-3', 'created', '{"total": 30}') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
SELECT idempotency.emit_event('order', 'o-3', 'paid', '{"total": 30}', NULL) IS NOT NULL AS emitted;
COMMIT;
-- autocommit; strings are JSON-escaped
SELECT idempotency.emit_event('order', 'o-"4"', E'note\nline', '"just a string"') IS NOT NULL AS emitted;

-- the messages, in commit order; content is a JSON object
SELECT data
  FROM pg_logical_slot_get_changes('regress_outbox_cdc', NULL, NULL,
                                   'include-xids', '0', 'skip-empty-xacts', '1')
 WHERE data LIKE 'message:%';

-- and the content parses back to the event
SELECT idempotency.emit_event('invoice', 'i-1', 'issued', '{"n": 1}', '{"h": true}') IS NOT NULL AS emitted;
SELECT substring(data FROM 'content:(.*)$')::jsonb AS content
  FROM pg_logical_slot_get_changes('regress_outbox_cdc', NULL, NULL,
                                   'include-xids', '0', 'skip-empty-xacts', '1')
 WHERE data LIKE 'message: transactional: 1 prefix: idempotency_outbox,%';

SELECT pg_drop_replication_slot('regress_outbox_cdc');
