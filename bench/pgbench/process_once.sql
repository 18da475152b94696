-- ours: process_once
\set r random(100000000000000, 999999999999999)
SELECT idempotency.process_once('billing', :client_id::text || '-' || :r::text);
