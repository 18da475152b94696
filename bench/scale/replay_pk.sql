-- the bare primary-key SELECT of the same retry in the hand-written table
\set i random(:lo, :rows)
\set k (:i * 999999937) % 1000000000000000
SELECT status, response_code, response_body FROM bench.raw_keys WHERE idempotency_key = 'L' || :k::text;
