-- purge_expired_batch() leaves out, up front, the rows that an application
-- table's foreign key without ON DELETE CASCADE, SET NULL or SET DEFAULT
-- references (doc/reference.md, "Cleanup"): they stay, no WARNING, and a
-- purge costs no subtransaction, and no transaction id, per kept row.
\set VERBOSITY terse
SET client_min_messages = notice;
SET idempotency.outbox_retention = '7 days';
SET idempotency.processed_retention = '7 days';
TRUNCATE idempotency.outbox_events, idempotency.processed_events, idempotency.tokens;

-- 60 old published events; an application table references 50 of them
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
SELECT 'order', 'r' || i, 'paid', '{}', now() - interval '30 days'
  FROM generate_series(1, 60) AS i;
CREATE TABLE deliveries (event_id bigint REFERENCES idempotency.outbox_events (id));
-- the purge reads the referencing tables as the extension's owner
-- (doc/reference.md, "Cleanup": a superuser in the C edition, the
-- installing role in the portable one); a table it may not read is left
-- to the key's check
SELECT tableowner AS owner FROM pg_tables
 WHERE schemaname = 'idempotency' AND tablename = 'idempotency_keys' \gset
GRANT SELECT ON deliveries TO :"owner";
INSERT INTO deliveries SELECT id FROM idempotency.outbox_events ORDER BY id LIMIT 50;

-- two purges: the 10 others go, the 50 stay, without a WARNING; the
-- second purge finds nothing to do and takes no transaction id (the old
-- row-by-row retry took one per kept row and purge: over 100 here)
SELECT pg_current_xact_id()::text::bigint AS xid_before \gset
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT pg_current_xact_id()::text::bigint - :xid_before < 10 AS few_xids;
SELECT count(*) AS events_left,
       count(*) FILTER (WHERE id IN (SELECT event_id FROM deliveries)) AS referenced
  FROM idempotency.outbox_events;

-- the batch size counts rows deleted: kept rows take no room
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
SELECT 'order', 's' || i, 'paid', '{}', now() - interval '20 days'
  FROM generate_series(1, 3) AS i;
SELECT * FROM idempotency.purge_expired_batch(2) WHERE relation = 'outbox_events';
SELECT * FROM idempotency.purge_expired_batch(2) WHERE relation = 'outbox_events';

-- once the references go, so do the events
DELETE FROM deliveries WHERE event_id % 2 = 0;
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT count(*) AS events_left,
       count(*) FILTER (WHERE id IN (SELECT event_id FROM deliveries)) AS referenced
  FROM idempotency.outbox_events;

-- RESTRICT, a key added after the statements were built, quoted names of
-- a schema, table and column, and a partitioned table: all left out
CREATE SCHEMA "App Schema";
CREATE TABLE "App Schema"."Delivery Log" ("Event Id" bigint
    REFERENCES idempotency.outbox_events (id) ON DELETE RESTRICT);
CREATE TABLE receipts (event_id bigint REFERENCES idempotency.outbox_events (id),
                       region int) PARTITION BY LIST (region);
CREATE TABLE receipts_1 PARTITION OF receipts FOR VALUES IN (1);
GRANT USAGE ON SCHEMA "App Schema" TO :"owner";
GRANT SELECT ON "App Schema"."Delivery Log", receipts TO :"owner";
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
SELECT 'order', 't' || i, 'paid', '{}', now() - interval '20 days'
  FROM generate_series(1, 4) AS i;
INSERT INTO "App Schema"."Delivery Log"
SELECT id FROM idempotency.outbox_events WHERE aggregate_id = 't1';
INSERT INTO receipts SELECT id, 1 FROM idempotency.outbox_events WHERE aggregate_id = 't2';
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT aggregate_id FROM idempotency.outbox_events
 WHERE aggregate_id LIKE 't%' ORDER BY aggregate_id COLLATE "C";

-- a renamed table or column: the statements are built again
ALTER TABLE "App Schema"."Delivery Log" RENAME COLUMN "Event Id" TO "Event";
ALTER TABLE "App Schema"."Delivery Log" RENAME TO "Deliveries";
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT count(*) AS t1_kept FROM idempotency.outbox_events WHERE aggregate_id = 't1';

-- a key dropped: its rows go
DROP TABLE "App Schema"."Deliveries";
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';

-- a composite key on text columns of another collation than the
-- extension's "C": compared with the referenced column's collation
INSERT INTO idempotency.processed_events (consumer, event_id, processed_at)
SELECT 'billing', 'e' || i, now() - interval '8 days' FROM generate_series(1, 4) AS i;
CREATE TABLE handled (consumer text COLLATE "POSIX", event_id text,
    FOREIGN KEY (consumer, event_id) REFERENCES idempotency.processed_events);
GRANT SELECT ON handled TO :"owner";
INSERT INTO handled VALUES ('billing', 'e1'), ('billing', 'e3');
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'processed_events';
SELECT event_id FROM idempotency.processed_events ORDER BY event_id COLLATE "C";

-- a key checked at commit (DEFERRABLE INITIALLY DEFERRED): its rows are
-- left out too, so the batch's commit does not fail
CREATE TABLE later (event_id bigint REFERENCES idempotency.outbox_events (id)
                    DEFERRABLE INITIALLY DEFERRED);
GRANT SELECT ON later TO :"owner";
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
VALUES ('order', 'd1', 'paid', '{}', now() - interval '20 days');
INSERT INTO later SELECT id FROM idempotency.outbox_events WHERE aggregate_id = 'd1';
BEGIN;
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
COMMIT;
SELECT count(*) AS d1_kept FROM idempotency.outbox_events WHERE aggregate_id = 'd1';

-- a key whose trigger does not fire (session_replication_role = replica)
-- keeps nothing, as the executor would not check it
BEGIN;
SET LOCAL session_replication_role = replica;
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
ROLLBACK;

-- ON DELETE SET NULL on a NOT NULL column fails as the row goes: the
-- batch is done again row by row, and the WARNING counts the row kept
CREATE TABLE strict_refs (event_id bigint NOT NULL
    REFERENCES idempotency.outbox_events (id) ON DELETE SET NULL);
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
VALUES ('order', 'n1', 'paid', '{}', now() - interval '20 days'),
       ('order', 'n2', 'paid', '{}', now() - interval '20 days');
INSERT INTO strict_refs SELECT id FROM idempotency.outbox_events WHERE aggregate_id = 'n1';
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT aggregate_id FROM idempotency.outbox_events
 WHERE aggregate_id LIKE 'n%' ORDER BY aggregate_id COLLATE "C";

DROP TABLE deliveries, receipts, handled, later, strict_refs;
DROP SCHEMA "App Schema";
SELECT * FROM idempotency.purge_expired_batch(1000)
 WHERE relation IN ('processed_events', 'outbox_events');
SELECT count(*) AS events_left FROM idempotency.outbox_events;
SELECT count(*) AS marks_left FROM idempotency.processed_events;
