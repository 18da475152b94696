-- ours: claim of a completed key, answered from the stored row
\set i random(1, :rows)
SELECT outcome, response_code, response_body FROM idempotency.claim('replay-' || :i::text, '{"amount": 100, "currency": "EUR"}'::jsonb);
