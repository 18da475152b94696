-- the bare primary-key SELECT
\set i random(1, :rows)
SELECT status, response_code, response_body FROM bench.seed_keys WHERE idempotency_key = 'replay-' || :i::text;
