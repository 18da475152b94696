-- the bare outbox INSERT
\set r random(100000000000000, 999999999999999)
INSERT INTO bench.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', :client_id::text || '-' || :r::text, 'OrderPaid', '{"amount": 100}'::jsonb) RETURNING id;
