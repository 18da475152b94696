-- the floor: the business INSERT and a key row holding its answer, written
-- by one statement (one round trip, one commit), no idempotency logic at all
\set r random(100000000000000, 999999999999999)
\set amount random(1, 100000)
WITH p AS (INSERT INTO bench.payments (order_no, amount) VALUES (:client_id::text || '-' || :r::text, :amount) RETURNING to_jsonb(payments.*) AS body) INSERT INTO bench.seed_keys (idempotency_key, request_hash, status, response_code, response_body, expires_at) SELECT :client_id::text || '-' || :r::text, '\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'::bytea, 'completed', 201, p.body, now() + interval '24 hours' FROM p RETURNING response_body;
