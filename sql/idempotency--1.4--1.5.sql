-- idempotency 1.4 -> 1.5 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.5 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.5'" to load this file. \quit

-- [section: storage] ---------------------------------------------------------

--
-- Autovacuum for the tables that cleanup empties.  A service keeps about
-- (new requests per second x ttl) live keys and cleanup deletes as many as
-- it adds; with PostgreSQL's default scale factor (0.2) autovacuum waits
-- for a fifth of the table in dead rows, so a table of ten million keys
-- carries two million dead ones and grows by a fifth before their space
-- is reused (doc/performance-at-scale.md).  At 0.02 it comes back after
-- each fiftieth, at the price of a pass over the indexes each time; the
-- inbox has the same insert-and-purge shape.  Only the scale factors are
-- set: the thresholds, cost limits and everything else stay the server's.
-- A table's own settings outrank these (ALTER TABLE ... SET); pg_dump does
-- not keep a change to them, since the extension's tables are created by
-- CREATE EXTENSION on restore (doc/operations.md, "Storage settings").
--
ALTER TABLE idempotency.idempotency_keys
    SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE idempotency.processed_events
    SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.05);
