-- ours in one transaction: BEGIN; claim; complete; COMMIT
\set r random(100000000000000, 999999999999999)
BEGIN;
SELECT fence FROM idempotency.claim(:client_id::text || '-' || :r::text, '{"amount": 100, "currency": "EUR"}'::jsonb) \gset
SELECT idempotency.complete(:client_id::text || '-' || :r::text, :fence, '{"status": "paid"}'::jsonb);
COMMIT;
