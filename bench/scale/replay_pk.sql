-- the bare primary-key SELECT of the same retry in the hand-written table
\set i random(:lo, :rows)
SELECT status, response_code, response_body FROM bench.seed_keys WHERE idempotency_key = md5(:i::text)::uuid::text;
