-- scaleout/proxy.sql: the proxy database.  Schema idempotency exposes the
-- partitions' functions with the same names, arguments and defaults; each
-- call runs on one partition of PL/Proxy cluster 'idempotency' (a foreign
-- server, see start.sh), chosen by idempotency_shard.route(scope, key).
-- Needs CREATE EXTENSION plproxy and route.sql first.  Run as a superuser.
CREATE SCHEMA idempotency;
COMMENT ON SCHEMA idempotency IS 'idempotency through PL/Proxy: every call runs on the partition of its (scope, key)';

-- The partitions' types, for the results.  PL/Proxy reads result columns
-- by name, so the partitions may have more columns than these.
CREATE TYPE idempotency.key_status AS ENUM ('processing', 'completed', 'failed');

CREATE TYPE idempotency.claim_result AS (
    outcome        text,
    fence          bigint,
    status         idempotency.key_status,
    response_code  integer,
    response_body  jsonb,
    recovery_point text,
    attempts       integer,
    retry_after    interval
);

CREATE TYPE idempotency.idempotency_keys AS (
    scope           text,
    idempotency_key text,
    request_hash    bytea,
    status          idempotency.key_status,
    fence           bigint,
    attempts        integer,
    recovery_point  text,
    response_code   integer,
    response_body   jsonb,
    retryable       boolean,
    locked_until    timestamptz,
    created_at      timestamptz,
    updated_at      timestamptz,
    expires_at      timestamptz,
    key_hash        uuid,
    response_expires_at timestamptz
);

CREATE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, key);
$$;
COMMENT ON FUNCTION idempotency.claim(text, jsonb, text, interval, interval, interval) IS 'claim() on the partition of (scope, key)';

CREATE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer  DEFAULT 200,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, key);
$$;
COMMENT ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval, interval) IS 'complete() on the partition of (scope, key)';

CREATE FUNCTION idempotency.fail(
    key           text,
    fence         bigint,
    error         jsonb   DEFAULT NULL,
    response_code integer DEFAULT 500,
    retryable     boolean  DEFAULT true,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, key);
$$;
COMMENT ON FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval, interval) IS 'fail() on the partition of (scope, key)';

CREATE FUNCTION idempotency.checkpoint(
    key            text,
    fence          bigint,
    recovery_point text,
    lease          interval DEFAULT NULL,
    scope          text     DEFAULT '')
RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, key);
$$;
COMMENT ON FUNCTION idempotency.checkpoint(text, bigint, text, interval, text) IS 'checkpoint() on the partition of (scope, key)';

CREATE FUNCTION idempotency.release(key text, fence bigint, scope text DEFAULT '')
RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, key);
$$;
COMMENT ON FUNCTION idempotency.release(text, bigint, text) IS 'release() on the partition of (scope, key)';

CREATE FUNCTION idempotency.lookup(key text, scope text DEFAULT '')
RETURNS idempotency.idempotency_keys
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, key);
$$;
COMMENT ON FUNCTION idempotency.lookup(text, text) IS 'lookup() on the partition of (scope, key)';

-- A token lives on the partition of (scope, token): the proxy picks the
-- token's value first, then has that partition issue it.
CREATE FUNCTION idempotency_shard.issue_token(new_token uuid, scope text, ttl interval)
RETURNS uuid
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, new_token);
$$;
COMMENT ON FUNCTION idempotency_shard.issue_token(uuid, text, interval) IS 'issue a token of the proxy''s choosing on its partition';

CREATE FUNCTION idempotency.issue_token(scope text DEFAULT '', ttl interval DEFAULT NULL)
RETURNS uuid
LANGUAGE sql VOLATILE
RETURN idempotency_shard.issue_token(pg_catalog.gen_random_uuid(), scope, ttl);
COMMENT ON FUNCTION idempotency.issue_token(text, interval) IS 'issue_token() on the partition of (scope, the new token)';

CREATE FUNCTION idempotency.consume_token(token uuid, scope text DEFAULT '')
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(scope, token);
$$;
COMMENT ON FUNCTION idempotency.consume_token(uuid, text) IS 'consume_token() on the partition of (scope, token)';

CREATE FUNCTION idempotency.process_once(consumer text, event_id text)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'idempotency';
    RUN ON idempotency_shard.route(consumer, event_id);
$$;
COMMENT ON FUNCTION idempotency.process_once(text, text) IS 'process_once() on the partition of (consumer, event_id); the mark commits at once';

-- As in the extension, nothing is usable by PUBLIC: grant an application
-- role USAGE on schema idempotency, EXECUTE on its functions and USAGE on
-- the foreign server idempotency (doc/scaling.md).
REVOKE ALL ON SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON ALL ROUTINES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON ALL ROUTINES IN SCHEMA idempotency_shard FROM PUBLIC;

CREATE FUNCTION idempotency_shard.grant_usage(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA idempotency, idempotency_shard TO %s', role);
    EXECUTE format('GRANT EXECUTE ON ALL ROUTINES IN SCHEMA idempotency TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION idempotency_shard.route(text, text),'
                   ' idempotency_shard.route(text, uuid),'
                   ' idempotency_shard.issue_token(uuid, text, interval) TO %s', role);
    EXECUTE format('GRANT USAGE ON FOREIGN SERVER idempotency TO %s', role);
END
$$;
COMMENT ON FUNCTION idempotency_shard.grant_usage(regrole) IS 'let a role call the proxied functions';
REVOKE ALL ON FUNCTION idempotency_shard.grant_usage(regrole) FROM PUBLIC;
