-- the bare inbox INSERT ... ON CONFLICT DO NOTHING
\set r random(100000000000000, 999999999999999)
INSERT INTO bench.inbox (consumer, event_id) VALUES ('billing', :client_id::text || '-' || :r::text) ON CONFLICT DO NOTHING;
