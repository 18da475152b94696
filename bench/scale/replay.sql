-- ours: a retry of a completed request, among the live keys (those with
-- numbers from :lo on have not expired yet)
\set i random(:lo, :rows)
\set k (:i * 999999937) % 1000000000000000
SELECT outcome, response_code, response_body FROM idempotency.claim('L' || :k::text, '{"amount": 100, "currency": "EUR"}'::jsonb);
