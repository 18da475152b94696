-- ours: enqueue_events for a batch of 100 events in one call
\set r random(100000000000000, 999999999999999)
SELECT count(*) FROM idempotency.enqueue_events(array_fill('order'::text, ARRAY[100]), ARRAY(SELECT :client_id::text || '-' || :r::text || '-' || g FROM generate_series(1, 100) g), array_fill('OrderPaid'::text, ARRAY[100]), array_fill('{"amount": 100}'::jsonb, ARRAY[100]));
