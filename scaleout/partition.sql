-- scaleout/partition.sql: helpers on every partition database, after
-- CREATE EXTENSION idempotency and route.sql.  Run as a superuser.

-- The proxy decides a new token's value (so that it knows the partition)
-- and asks the partition to issue it: the extension's issue_token()
-- checks scope and ttl and stores the row, then the row takes the
-- proxy's value.
CREATE FUNCTION idempotency_shard.issue_token(new_token uuid, scope text, ttl interval)
RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    issued uuid;
BEGIN
    IF new_token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22023';
    END IF;
    issued := idempotency.issue_token(scope, ttl);
    UPDATE idempotency.tokens t SET token = new_token
     WHERE t.token OPERATOR(pg_catalog.=) issued;
    RETURN new_token;
END
$$;
COMMENT ON FUNCTION idempotency_shard.issue_token(uuid, text, interval) IS 'issue a one-time token whose value the proxy chose';

-- After a split from N to 2N partitions, partitions i and i + N both hold
-- the rows of old partition i.  Each deletes the rows that now route to
-- the other one (the proxy no longer sends anything for them here).
CREATE FUNCTION idempotency_shard.drop_moved_rows(partition integer, partitions integer)
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mask bigint := partitions - 1;
    n bigint;
BEGIN
    IF partitions < 1 OR partitions & mask <> 0 OR partition < 0 OR partition >= partitions THEN
        RAISE EXCEPTION 'partition % of % is not a partition of a power-of-two cluster', partition, partitions
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM idempotency.idempotency_keys k
     WHERE idempotency_shard.route(k.scope, k.idempotency_key) & mask <> partition;
    GET DIAGNOSTICS n = ROW_COUNT;
    relation := 'idempotency_keys'; deleted := n; RETURN NEXT;
    DELETE FROM idempotency.tokens t
     WHERE idempotency_shard.route(t.scope, t.token) & mask <> partition;
    GET DIAGNOSTICS n = ROW_COUNT;
    relation := 'tokens'; deleted := n; RETURN NEXT;
    DELETE FROM idempotency.processed_events e
     WHERE idempotency_shard.route(e.consumer, e.event_id) & mask <> partition;
    GET DIAGNOSTICS n = ROW_COUNT;
    relation := 'processed_events'; deleted := n; RETURN NEXT;
END
$$;
COMMENT ON FUNCTION idempotency_shard.drop_moved_rows(integer, integer) IS 'after a split: delete the rows that route to another partition';

-- The role the proxy logs in as (its user mapping): what an application
-- may do, plus issuing tokens of the proxy's choosing.
CREATE FUNCTION idempotency_shard.grant_proxy(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency.grant_usage(role);
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA idempotency_shard TO %s', role);
    EXECUTE pg_catalog.format(
        'GRANT EXECUTE ON FUNCTION idempotency_shard.issue_token(uuid, text, interval) TO %s', role);
END
$$;
COMMENT ON FUNCTION idempotency_shard.grant_proxy(regrole) IS 'let the role of the proxy''s user mapping call what the proxy forwards';

REVOKE ALL ON ALL ROUTINES IN SCHEMA idempotency_shard FROM PUBLIC;
