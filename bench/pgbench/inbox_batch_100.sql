-- ours: process_once for a batch of 100 event ids in one call
\set r random(100000000000000, 999999999999999)
SELECT count(*) FROM idempotency.process_once('billing', ARRAY(SELECT :client_id::text || '-' || :r::text || '-' || g FROM generate_series(1, 100) g));
