-- the bare primary-key SELECT of one row
SELECT status, response_code, response_body FROM bench.seed_keys WHERE idempotency_key = 'replay-1';
