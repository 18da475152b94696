-- the limit: the business INSERT alone, no idempotency at all
\set r random(100000000000000, 999999999999999)
\set amount random(1, 100000)
INSERT INTO bench.payments (order_no, amount) VALUES (md5(:client_id::text || '-' || :r::text)::uuid::text, :amount) RETURNING to_jsonb(payments.*);
