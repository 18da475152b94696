SELECT idempotency.enqueue_event('mem', :n::text, 'E', '{}'::jsonb);
