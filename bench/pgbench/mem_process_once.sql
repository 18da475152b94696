SELECT idempotency.process_once('mem', :n::text);
