-- Batches (doc/reference.md, "Outbox and inbox"): enqueue_events() writes
-- many events in one call, process_once(consumer, text[]) marks many
-- event ids in one call and returns the new ones.
\set VERBOSITY terse
\i test/sql/include/error_of.sql

-- events in array order: ids grow in that order, per aggregate too
SELECT count(*) AS events, bool_and(id > 0) AS ids
  FROM idempotency.enqueue_events(
         ARRAY['order', 'order', 'invoice', 'order'],
         ARRAY['o1', 'o1', 'i1', 'o2'],
         ARRAY['created', 'paid', 'issued', 'created'],
         ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[],
         ARRAY[NULL, '{"trace": "t2"}', NULL, NULL]::jsonb[]) AS e(id);
SELECT aggregate_type, aggregate_id, event_type, payload, headers
  FROM idempotency.outbox_events ORDER BY id;
-- a relay sees them as it sees single events: oldest first, per aggregate
SELECT aggregate_id, event_type FROM idempotency.claim_events(10) ORDER BY id;
-- headers may be left out; an empty batch writes nothing
SELECT count(*) AS written FROM idempotency.enqueue_events('{a}', '{1}', '{e}', ARRAY['{}'::jsonb]);
SELECT count(*) AS written FROM idempotency.enqueue_events('{}', '{}', '{}', '{}');
-- a rollback forgets the whole batch
BEGIN;
SELECT count(*) FROM idempotency.enqueue_events('{r}', '{1}', '{e}', ARRAY['{}'::jsonb]);
ROLLBACK;
SELECT count(*) AS rolled_back FROM idempotency.outbox_events WHERE aggregate_type = 'r';

-- these should all fail with 22023 and write nothing
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_events('{a,b}', '{1}', '{e,e}', ARRAY['{}', '{}']::jsonb[])$$) AS lengths_differ;
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_events('{a}', '{1}', '{e}', ARRAY[NULL]::jsonb[])$$) AS null_payload;
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_events('{a}', ARRAY[''], '{e}', ARRAY['{}']::jsonb[])$$) AS empty_id;
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_events('{a}', '{1}', '{e}', ARRAY['{}']::jsonb[], ARRAY[NULL, NULL]::jsonb[])$$) AS headers_longer;
SELECT pg_temp.error_of($$SELECT idempotency.enqueue_events('{{a}}', '{{1}}', '{{e}}', ARRAY[ARRAY['{}'::jsonb]])$$) AS two_dimensions;
SELECT count(*) AS events FROM idempotency.outbox_events;

-- the inbox: the new ids, in the order given; a duplicate inside the
-- batch counts once, one seen before not at all
SELECT * FROM idempotency.process_once('billing', ARRAY['e1', 'e2', 'e1', 'e3']);
SELECT * FROM idempotency.process_once('billing', ARRAY['e3', 'e4', 'e2']);
SELECT * FROM idempotency.process_once('shipping', ARRAY['e1']);
SELECT count(*) AS new FROM idempotency.process_once('billing', '{}'::text[]);
-- single and batch calls share the marks
SELECT idempotency.process_once('billing', 'e4') AS single_again,
       idempotency.process_once('billing', 'e5') AS single_new;
SELECT * FROM idempotency.process_once('billing', ARRAY['e5', 'e6']);
-- a rollback forgets the batch's marks
BEGIN;
SELECT count(*) FROM idempotency.process_once('billing', ARRAY['e7', 'e8']);
ROLLBACK;
SELECT * FROM idempotency.process_once('billing', ARRAY['e7']);
-- these should all fail with 22023
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', ARRAY['ok', NULL])$$) AS null_id;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', ARRAY[''])$$) AS empty_id;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', ARRAY[repeat('x', 256)])$$) AS long_id;
SELECT pg_temp.error_of($$SELECT idempotency.process_once('billing', NULL::text[])$$) AS null_array;
SELECT consumer, event_id FROM idempotency.processed_events ORDER BY consumer, event_id;

DELETE FROM idempotency.outbox_events;
DELETE FROM idempotency.processed_events;
