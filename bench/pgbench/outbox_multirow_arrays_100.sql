-- the bare multi-row outbox INSERT of 100 events, taken from the same
-- arrays as enqueue_events' batch (as a client sends them)
\set r random(100000000000000, 999999999999999)
INSERT INTO bench.outbox (aggregate_type, aggregate_id, event_type, payload) SELECT * FROM unnest(array_fill('order'::text, ARRAY[100]), ARRAY(SELECT :client_id::text || '-' || :r::text || '-' || g FROM generate_series(1, 100) g), array_fill('OrderPaid'::text, ARRAY[100]), array_fill('{"amount": 100}'::jsonb, ARRAY[100])) RETURNING id;
