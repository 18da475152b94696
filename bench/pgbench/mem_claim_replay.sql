SELECT outcome FROM idempotency.claim('replay-' || (:n % 1000 + 1)::text, '{"amount": 100, "currency": "EUR"}'::jsonb);
