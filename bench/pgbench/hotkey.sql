-- ours: every client claims the same completed key
SELECT outcome, response_code, response_body FROM idempotency.claim('replay-1', '{"amount": 100, "currency": "EUR"}'::jsonb);
