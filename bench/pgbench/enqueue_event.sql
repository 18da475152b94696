-- ours: enqueue_event
\set r random(100000000000000, 999999999999999)
SELECT idempotency.enqueue_event('order', :client_id::text || '-' || :r::text, 'OrderPaid', '{"amount": 100}'::jsonb);
