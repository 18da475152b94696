-- ours, phased: claim (commits); the business INSERT; complete
\set r random(100000000000000, 999999999999999)
\set amount random(1, 100000)
SELECT fence FROM idempotency.claim(md5(:client_id::text || '-' || :r::text)::uuid::text, '{"amount": 100, "currency": "EUR"}'::jsonb, ttl => make_interval(secs => :ttl)) \gset
INSERT INTO bench.payments (order_no, amount) VALUES (md5(:client_id::text || '-' || :r::text)::uuid::text, :amount);
SELECT idempotency.complete(md5(:client_id::text || '-' || :r::text)::uuid::text, :fence, '{"status": "paid"}'::jsonb, 201);
