-- The rows the replay workloads read: :rows completed keys of the request
-- :'req', in the extension's table and in both baseline tables.
-- psql -v rows=N -v req='{...}' -f bench/load.sql; with -v ours_only=1, the
-- extension's keys only (the portable edition's database).
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, request_hash,
    status, fence, recovery_point, response_code, response_body, expires_at)
SELECT idempotency.key_hash('', 'replay-' || i), '', 'replay-' || i, idempotency.fingerprint(:'req'), 'completed',
       nextval('idempotency.fence_seq'), 'started', 200, '{"status": "paid"}',
       now() + interval '7 days'
  FROM generate_series(1, :rows) i;
\if :{?ours_only}
\else
INSERT INTO bench.pl_keys (scope, idempotency_key, request_hash, status, fence,
    recovery_point, response_code, response_body, expires_at)
SELECT '', 'replay-' || i, sha256(convert_to(:'req'::jsonb::text, 'UTF8')),
       'completed', nextval('bench.pl_fence_seq'), 'started', 200,
       '{"status": "paid"}', now() + interval '7 days'
  FROM generate_series(1, :rows) i;
INSERT INTO bench.seed_keys (idempotency_key, request_hash, status,
    response_code, response_body, expires_at)
SELECT 'replay-' || i, sha256(convert_to(:'req'::jsonb::text, 'UTF8')),
       'COMPLETED', 200, '{"status": "paid"}', now() + interval '7 days'
  FROM generate_series(1, :rows) i;
\endif
