-- the same transaction in raw SQL: BEGIN; INSERT ... ON CONFLICT DO NOTHING RETURNING; UPDATE; COMMIT
\set r random(100000000000000, 999999999999999)
BEGIN;
INSERT INTO bench.seed_keys (idempotency_key, request_hash, status, expires_at) VALUES (:client_id::text || '-' || :r::text, '\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'::bytea, 'processing', now() + interval '24 hours') ON CONFLICT DO NOTHING RETURNING status;
UPDATE bench.seed_keys SET status = 'completed', response_code = 200, response_body = '{"status": "paid"}' WHERE idempotency_key = :client_id::text || '-' || :r::text;
COMMIT;
