-- the bare multi-row outbox INSERT of 100 events
\set r random(100000000000000, 999999999999999)
INSERT INTO bench.outbox (aggregate_type, aggregate_id, event_type, payload) SELECT 'order', :client_id::text || '-' || :r::text || '-' || g, 'OrderPaid', '{"amount": 100}'::jsonb FROM generate_series(1, 100) g RETURNING id;
