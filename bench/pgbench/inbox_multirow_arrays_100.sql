-- the bare multi-row inbox INSERT ... ON CONFLICT DO NOTHING of 100 ids,
-- taken from the same array as process_once's batch (as a client sends it)
\set r random(100000000000000, 999999999999999)
INSERT INTO bench.inbox (consumer, event_id) SELECT 'billing', e FROM unnest(ARRAY(SELECT :client_id::text || '-' || :r::text || '-' || g FROM generate_series(1, 100) g)) e ON CONFLICT DO NOTHING RETURNING event_id;
