SELECT fence FROM idempotency.claim('mem-' || :n::text, '{"a": 1}'::jsonb) \gset
SELECT idempotency.complete('mem-' || :n::text, :fence, '{"ok": true}'::jsonb);
