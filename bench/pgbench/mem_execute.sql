SELECT outcome FROM idempotency.execute('memx-' || :n::text, '{"a": 1}'::jsonb, 'SELECT $1::integer', ARRAY[:n::text]);
