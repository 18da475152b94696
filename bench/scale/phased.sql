-- ours, phased: claim (commits); the business INSERT; complete
\set r random(100000000000000, 999999999999999)
\set amount random(1, 100000)
SELECT fence FROM idempotency.claim(:client_id::text || '-' || :r::text, '{"amount": 100, "currency": "EUR"}'::jsonb, ttl => make_interval(secs => :ttl)) \gset
INSERT INTO bench.payments (order_no, amount) VALUES (:client_id::text || '-' || :r::text, :amount);
SELECT idempotency.complete(:client_id::text || '-' || :r::text, :fence, '{"status": "paid"}'::jsonb, 201);
