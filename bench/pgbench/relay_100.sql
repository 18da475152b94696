-- a relay worker: claim_events(100) + mark_published of what it got
SELECT coalesce(array_agg(id), '{}') AS ids FROM idempotency.claim_events(100) \gset
SELECT idempotency.mark_published(:ids::bigint[]);
