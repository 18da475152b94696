--
-- Section 2: one-time submit tokens.
--
CREATE TABLE idempotency.tokens (
    token       uuid PRIMARY KEY,
    scope       text COLLATE "C" NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires_at  timestamptz NOT NULL,
    consumed_at timestamptz
);
COMMENT ON TABLE idempotency.tokens IS 'one-time submit tokens; consumed_at is set by the one successful consume_token()';

CREATE INDEX tokens_expires_at_idx ON idempotency.tokens (expires_at);

CREATE FUNCTION idempotency.issue_token(scope text DEFAULT '', ttl interval DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'idempotency_issue_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.issue_token(text, interval) IS 'issue a one-time token (random UUID) valid for ttl';

CREATE FUNCTION idempotency.consume_token(token uuid, scope text DEFAULT '')
RETURNS boolean
AS 'MODULE_PATHNAME', 'idempotency_consume_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.consume_token(uuid, text) IS 'true exactly once per token within its ttl and scope';
