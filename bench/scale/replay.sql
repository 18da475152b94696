-- ours: a retry of a completed request, among the live keys (those with
-- numbers from :lo on have not expired yet)
\set i random(:lo, :rows)
SELECT outcome, response_code, response_body FROM idempotency.claim(md5(:i::text)::uuid::text, '{"amount": 100, "currency": "EUR"}'::jsonb);
