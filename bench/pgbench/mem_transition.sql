SELECT outcome FROM idempotency.transition('bench.orders_ext', 'id', '99999', 'state', 's' || ((:n + 1) % 2)::text, 's' || (:n % 2)::text);
