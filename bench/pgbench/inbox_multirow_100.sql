-- the bare multi-row inbox INSERT ... ON CONFLICT DO NOTHING of 100 ids
\set r random(100000000000000, 999999999999999)
INSERT INTO bench.inbox (consumer, event_id) SELECT 'billing', :client_id::text || '-' || :r::text || '-' || g FROM generate_series(1, 100) g ON CONFLICT DO NOTHING RETURNING event_id;
