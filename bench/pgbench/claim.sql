-- a claim alone (the concurrent load during purge)
\set r random(100000000000000, 999999999999999)
SELECT outcome FROM idempotency.claim(:client_id::text || '-' || :r::text, '{"amount": 100, "currency": "EUR"}'::jsonb);
