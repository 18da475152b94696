-- sql/portable/tokens.sql: the portable bodies of src/tokens.c,
-- issue_token() and consume_token().
--
-- As in the C, consuming is one guarded UPDATE: of two concurrent
-- consumers the second waits for the first one's row lock, re-reads the
-- row and finds it consumed.  One clock reading per call
-- (clock_timestamp()), taken when the call starts its work.  Both are
-- SECURITY DEFINER, where the C switches to the extension owner for its
-- statement.

-- portable: idempotency_issue_token
CREATE FUNCTION idempotency.issue_token(scope text DEFAULT '', ttl interval DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_scope CONSTANT text := scope;
    p_ttl interval := ttl;
    token uuid;
    now timestamptz;
BEGIN
    PERFORM idempotency.portable_arg_name(p_scope, 'scope', 0, 255);
    p_ttl := idempotency.portable_arg_interval(p_ttl, 'ttl', 'idempotency.token_ttl',
                                               '10 minutes');
    -- a version 4 (random) UUID, RFC 4122, from the server's strong source
    token := pg_catalog.gen_random_uuid();
    now := pg_catalog.clock_timestamp();
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.issue_token()');
    INSERT INTO idempotency.tokens (token, scope, created_at, expires_at)
    VALUES (token, p_scope, now, now OPERATOR(pg_catalog.+) p_ttl);
    RETURN token;
END
$$;

-- portable: idempotency_consume_token
CREATE FUNCTION idempotency.consume_token(token uuid, scope text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_token CONSTANT uuid := token;
    p_scope CONSTANT text := scope;
    now timestamptz;
BEGIN
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'token must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM idempotency.portable_arg_name(p_scope, 'scope', 0, 255);
    now := pg_catalog.clock_timestamp();
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.consume_token()');
    UPDATE idempotency.tokens t SET consumed_at = now
     WHERE t.token OPERATOR(pg_catalog.=) p_token
       AND t.scope OPERATOR(pg_catalog.=) p_scope
       AND t.consumed_at IS NULL AND t.expires_at OPERATOR(pg_catalog.>) now;
    RETURN FOUND;
END
$$;
