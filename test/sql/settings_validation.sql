-- Every idempotency.* setting takes the same values in both editions, as
-- PostgreSQL's GUC parsing reads them ('3e2', octal, hexadecimal, units of
-- time where the setting has them), and refuses the others with the same
-- 22023, message, detail and hint: the C at the SET, the portable edition
-- (which cannot define settings) at the first call that reads it, before
-- that call writes anything.  try() makes the two one output: it sets the
-- value for the transaction and makes the call, prints the error of
-- whichever failed, and rolls both back.
CREATE FUNCTION pg_temp.try(setting text, value text, call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  detail text;
  hint text;
BEGIN
  BEGIN
    PERFORM pg_catalog.set_config(setting, value, true);
    EXECUTE call;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || SQLERRM
           || CASE WHEN detail <> '' THEN ' DETAIL: ' || detail ELSE '' END
           || CASE WHEN hint <> '' THEN ' HINT: ' || hint ELSE '' END;
  END;
  RAISE EXCEPTION 'ok' USING ERRCODE = 'P0001';    -- undo the call and the SET
EXCEPTION WHEN raise_exception THEN
  RETURN 'ok';
END $$;
SELECT outcome FROM idempotency.claim('sv-held', NULL, '', NULL, '1 hour');
SELECT fence AS held_fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'sv-held' \gset
CREATE TEMP TABLE cases (n serial, setting text, value text, call text);
INSERT INTO cases (setting, value, call) VALUES
  -- integers: the value shows in the refusal of a 301-character key
  ('max_key_length', '300', $$SELECT idempotency.lookup(repeat('k', 301))$$),
  ('max_key_length', '3e2', $$SELECT idempotency.lookup(repeat('k', 301))$$),
  ('max_key_length', ' 299.5 ', $$SELECT idempotency.lookup(repeat('k', 301))$$),
  ('max_key_length', '0x12C', $$SELECT idempotency.lookup(repeat('k', 301))$$),
  ('max_key_length', '0454', $$SELECT idempotency.lookup(repeat('k', 301))$$),
  ('max_key_length', '400', $$SELECT idempotency.lookup(repeat('k', 301))$$),
  ('max_key_length', '1', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '0', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '401', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '-1', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '1kB', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '08', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', 'many', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '9999999999', $$SELECT idempotency.lookup('k')$$),
  ('max_key_length', '1e400', $$SELECT idempotency.lookup('k')$$),
  ('max_response_bytes', '100', format($$SELECT idempotency.complete('sv-held', %s, to_jsonb(repeat('x', 200)))$$, :held_fence)),
  ('max_response_bytes', '3e2', format($$SELECT idempotency.complete('sv-held', %s, to_jsonb(repeat('x', 400)))$$, :held_fence)),
  ('max_response_bytes', '268435456', format($$SELECT idempotency.complete('sv-held', %s, to_jsonb(repeat('x', 400)))$$, :held_fence)),
  ('max_response_bytes', '0', format($$SELECT idempotency.complete('sv-held', %s, '{}')$$, :held_fence)),
  ('max_response_bytes', '268435457', format($$SELECT idempotency.complete('sv-held', %s, '{}')$$, :held_fence)),
  ('max_response_bytes', '1kB', format($$SELECT idempotency.complete('sv-held', %s, '{}')$$, :held_fence)),
  ('max_response_bytes', '100', $$SELECT idempotency.execute('sv-e', NULL, $q$SELECT repeat('x', 200)$q$)$$),
  ('max_response_bytes', '1kB', $$SELECT idempotency.execute('sv-e', NULL, 'SELECT 1')$$),
  ('outbox_max_attempts', '1', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('outbox_max_attempts', '1000', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('outbox_max_attempts', '5.5', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('outbox_max_attempts', '0', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('outbox_max_attempts', '1001', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('outbox_max_attempts', 'ten', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  -- milliseconds: units of time (out of range, the message differs by major)
  ('outbox_notify_interval', '0', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify_interval', '1min', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify_interval', '2.5 s', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify_interval', '10 parsecs', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify_interval', '10 MS', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify_interval', 'soon', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify_interval', '1e10', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  -- booleans
  ('outbox_notify', 'of', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify', 'YES', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify', '1', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify', ' on', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify', 'o', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  ('outbox_notify', '2', $$SELECT idempotency.enqueue_event('sv', 'a', 'e', '{}')$$),
  -- intervals: the value shows where a ttl must cover the lease
  ('lease_timeout', '2 hours', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', 'PT30S', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '100 years', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '0', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '-1 second', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', 'soon', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '101 years', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '1199 mons 40 days', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '1200 mons 1 second', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  -- (the spellings that the portable edition casts without a subtransaction)
  ('lease_timeout', '00:00:30', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '0 seconds', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('lease_timeout', '90 MIN', $$SELECT idempotency.claim('sv-k', NULL, '', '1 hour')$$),
  ('default_ttl', '999999999 days', $$SELECT idempotency.claim('sv-k')$$),
  ('default_ttl', '1 minute', $$SELECT idempotency.claim('sv-k', NULL, '', NULL, '2 minutes')$$),
  ('default_ttl', '1 day -24 hours', $$SELECT idempotency.claim('sv-k')$$),
  ('default_ttl', 'tomorrow', $$SELECT idempotency.claim('sv-k')$$),
  ('token_ttl', '5 min', $$SELECT idempotency.issue_token('sv')$$),
  ('token_ttl', '-5 min', $$SELECT idempotency.issue_token('sv')$$),
  ('outbox_retry_backoff', '2 s', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('outbox_retry_backoff', '-1 hour', $$SELECT idempotency.mark_failed('{}', 'boom')$$),
  ('processed_retention', '1 day', $$SELECT idempotency.purge_expired_batch()$$),
  ('processed_retention', '0 days', $$SELECT idempotency.purge_expired_batch()$$),
  ('outbox_retention', '200 years', $$SELECT idempotency.purge_expired_batch()$$),
  ('default_response_ttl', '', format($$SELECT idempotency.complete('sv-held', %s, '{}')$$, :held_fence)),
  ('default_response_ttl', '1 hour', format($$SELECT idempotency.complete('sv-held', %s, '{}')$$, :held_fence)),
  ('default_response_ttl', 'forever', format($$SELECT idempotency.complete('sv-held', %s, '{}')$$, :held_fence));
SELECT n, setting, value, pg_temp.try('idempotency.' || setting, value, call) FROM cases ORDER BY n;
-- a refused claim draws no fence
SELECT last_value AS fence_before FROM idempotency.fence_seq \gset
SELECT pg_temp.try('idempotency.lease_timeout', 'soon', $$SELECT idempotency.claim('sv-k')$$) IS DISTINCT FROM 'ok' AS refused,
       pg_temp.try('idempotency.default_ttl', '-1 day', $$SELECT idempotency.claim('sv-k')$$) IS DISTINCT FROM 'ok' AS refused_too;
SELECT last_value = :fence_before AS no_fence_drawn FROM idempotency.fence_seq;
-- nothing was written
SELECT idempotency_key, status FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'sv-%' ORDER BY 1;
SELECT count(*) AS events FROM idempotency.outbox_events WHERE aggregate_type = 'sv';
SELECT count(*) AS tokens FROM idempotency.tokens WHERE scope = 'sv';
