-- the hand-written baseline: a new request in one transaction, INSERT ... ON
-- CONFLICT DO NOTHING on the key, the business INSERT, the key completed
\set r random(100000000000000, 999999999999999)
\set amount random(1, 100000)
BEGIN;
INSERT INTO bench.seed_keys (idempotency_key, request_hash, status, expires_at) VALUES (md5(:client_id::text || '-' || :r::text)::uuid::text, '\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'::bytea, 'processing', now() + make_interval(secs => :ttl)) ON CONFLICT DO NOTHING RETURNING status;
INSERT INTO bench.payments (order_no, amount) VALUES (md5(:client_id::text || '-' || :r::text)::uuid::text, :amount);
UPDATE bench.seed_keys SET status = 'completed', response_code = 201, response_body = '{"status": "paid"}' WHERE idempotency_key = md5(:client_id::text || '-' || :r::text)::uuid::text;
COMMIT;
