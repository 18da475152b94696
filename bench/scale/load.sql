-- bench/scale/load.sql: keys :lo .. :hi of the :rows live completed keys,
-- in the extension's table and in the baseline's (with -v ours_only=1,
-- the extension's only).  Keys look like the random UUIDs clients send
-- (key i is md5(i) as a UUID), so they reach the indexes in random order
-- as real ones do, and expires at :t0 + i/:rows of :ttl (:ttl_raw in the
-- baseline's table), so that the keys expire at an even rate.  Ours store
-- the answers the workloads store, so that replacing the loaded keys does
-- not change the bytes per key: three in four the payment row that
-- execute() returns (the share of execute among the new keys), the rest
-- phased's small answer; the baseline stores its small answer throughout.
-- With :answers_t0 (empty: none, ours live as long as their keys) each of
-- our answers has a response_expires_at, at :answers_t0 + i/:rows of an
-- hour, as complete(..., response_ttl) writes it: the keys that outlive
-- their answers of SCALE_OUTLIVE.
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, request_hash,
    status, fence, recovery_point, response_code, response_body, created_at, expires_at,
    response_expires_at)
SELECT idempotency.key_hash('', md5(i::text)::uuid::text), '', md5(i::text)::uuid::text,
       idempotency.fingerprint('{"amount": 100, "currency": "EUR"}'), 'completed',
       nextval('idempotency.fence_seq'), 'started', 201,
       CASE WHEN i % 4 = 0 THEN '{"status": "paid"}'::jsonb
            ELSE jsonb_build_object('id', i, 'amount', 100 + i % 99900,
                                    'order_no', md5(i::text)::uuid::text, 'created_at', now()) END,
       now(),
       :'t0'::timestamptz + make_interval(secs => :ttl * i::float8 / :rows),
       NULLIF(:'answers_t0', '')::timestamptz + make_interval(secs => 3600 * i::float8 / :rows)
  FROM generate_series(:lo::bigint, :hi) i;
\if :{?ours_only}
\else
INSERT INTO bench.seed_keys (idempotency_key, request_hash, status,
    response_code, response_body, expires_at)
SELECT md5(i::text)::uuid::text,
       '\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'::bytea,
       'completed', 201, '{"status": "paid"}',
       :'t0'::timestamptz + make_interval(secs => :ttl_raw * i::float8 / :rows)
  FROM generate_series(:lo::bigint, :hi) i;
\endif
