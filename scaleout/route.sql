-- scaleout/route.sql: the routing hash, installed on the proxy and on every
-- partition (start.sh feeds it to psql before proxy.sql / partition.sql).
--
-- route(scope, key) is the first 8 bytes of
--   SHA-256(UTF-8(scope) || 0x00 || UTF-8(key))
-- read as a big-endian signed bigint, the construction of
-- idempotency.lock_key().  PL/Proxy sends a call to partition
-- route & (N - 1) of its N (a power of two) partitions.  SHA-256 is the same
-- on every server, platform, major version, encoding and collation, and any
-- client can compute it; hashtext() is not guaranteed to be any of that.
-- Text cannot contain a NUL byte, so the separator keeps ('a', 'bc') and
-- ('ab', 'c') apart.  A NULL scope or key routes to partition 0, whose
-- extension rejects it with 22023.
CREATE SCHEMA idempotency_shard;
COMMENT ON SCHEMA idempotency_shard IS 'PL/Proxy sharding of idempotency: routing and rebalancing helpers';

CREATE FUNCTION idempotency_shard.route(scope text, key text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN COALESCE(
    ('x' OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
        pg_catalog.convert_to(scope, 'UTF8') OPERATOR(pg_catalog.||) '\x00'::bytea
        OPERATOR(pg_catalog.||) pg_catalog.convert_to(key, 'UTF8')), 'hex'), 16))::bit(64)::bigint,
    0);
COMMENT ON FUNCTION idempotency_shard.route(text, text) IS 'routing hash of (scope, key): first 8 bytes of SHA-256(scope, NUL, key); partition = route & (N - 1)';

CREATE FUNCTION idempotency_shard.route(scope text, token uuid)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN idempotency_shard.route(scope, token::text);
COMMENT ON FUNCTION idempotency_shard.route(text, uuid) IS 'routing hash of a one-time token: route(scope, token::text)';

REVOKE ALL ON SCHEMA idempotency_shard FROM PUBLIC;
REVOKE ALL ON ALL ROUTINES IN SCHEMA idempotency_shard FROM PUBLIC;
