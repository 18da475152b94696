-- idempotency 1.0: install script, assembled from sql/1.0/*.sql by make.
\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

COMMENT ON SCHEMA idempotency IS 'exactly-once processing: request keys, tokens, state machines, outbox and inbox';
