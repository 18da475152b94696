-- ours: a new request through execute(): claim, the business INSERT, complete
\set r random(100000000000000, 999999999999999)
\set amount random(1, 100000)
SELECT outcome FROM idempotency.execute(md5(:client_id::text || '-' || :r::text)::uuid::text, '{"amount": 100, "currency": "EUR"}'::jsonb, 'INSERT INTO bench.payments (order_no, amount) VALUES ($1, $2::integer) RETURNING to_jsonb(payments.*)', ARRAY[md5(:client_id::text || '-' || :r::text)::uuid::text, :amount::text], ttl => make_interval(secs => :ttl));
