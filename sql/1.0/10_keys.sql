--
-- Section 1: request keys (Idempotency-Key header, Stripe style).
--
CREATE TYPE idempotency.key_status AS ENUM ('processing', 'completed', 'failed');

-- Fences come from one sequence: every new holder of any key gets a larger
-- fence than every earlier holder, even across purge and re-creation.
CREATE SEQUENCE idempotency.fence_seq AS bigint;

-- Keys and scopes are opaque identifiers: the "C" collation makes their
-- B-tree comparisons plain byte comparisons.  fillfactor leaves room on
-- each page for HOT updates by complete() and checkpoint().
CREATE TABLE idempotency.idempotency_keys (
    scope           text COLLATE "C" NOT NULL DEFAULT '',
    idempotency_key text COLLATE "C" NOT NULL,
    request_hash    bytea,
    status          idempotency.key_status NOT NULL DEFAULT 'processing',
    fence           bigint NOT NULL,
    attempts        integer NOT NULL DEFAULT 1,
    recovery_point  text NOT NULL DEFAULT 'started',
    response_code   integer,
    response_body   jsonb,
    retryable       boolean,
    locked_until    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
) WITH (fillfactor = 80);

COMMENT ON TABLE idempotency.idempotency_keys IS 'one row per (scope, Idempotency-Key): who holds it and the stored answer';
COMMENT ON COLUMN idempotency.idempotency_keys.request_hash IS 'SHA-256 of the canonical request body (fingerprint()), NULL when not compared';
COMMENT ON COLUMN idempotency.idempotency_keys.fence IS 'fencing token of the current holder; holder calls with another fence fail with 55000';
COMMENT ON COLUMN idempotency.idempotency_keys.retryable IS 'for failed keys: true when the next claim resumes, false when it replays the error';
COMMENT ON COLUMN idempotency.idempotency_keys.locked_until IS 'end of the holder''s lease while processing';

CREATE INDEX idempotency_keys_expires_at_idx
    ON idempotency.idempotency_keys (expires_at);

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

CREATE FUNCTION idempotency.fingerprint(request jsonb)
RETURNS bytea
AS 'MODULE_PATHNAME', 'idempotency_fingerprint'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.fingerprint(jsonb) IS 'SHA-256 of the canonical jsonb text: key order and whitespace do not matter';

CREATE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.claim(text, jsonb, text, interval, interval) IS 'atomically claim a request key: claimed, resumed, replay, in_progress or mismatch';

CREATE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer DEFAULT 200,
    scope         text    DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_complete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text) IS 'store the answer of a held key; later claims replay it';

CREATE FUNCTION idempotency.fail(
    key           text,
    fence         bigint,
    error         jsonb   DEFAULT NULL,
    response_code integer DEFAULT 500,
    retryable     boolean DEFAULT true,
    scope         text    DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text) IS 'record a failure of a held key: retryable ones are resumed, final ones replayed';

CREATE FUNCTION idempotency.checkpoint(
    key            text,
    fence          bigint,
    recovery_point text,
    lease          interval DEFAULT NULL,
    scope          text     DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_checkpoint'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.checkpoint(text, bigint, text, interval, text) IS 'record a recovery point of a held key and extend its lease';

CREATE FUNCTION idempotency.release(
    key   text,
    fence bigint,
    scope text DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.release(text, bigint, text) IS 'forget a held key, e.g. after a validation error before any side effect';

CREATE FUNCTION idempotency.lookup(key text, scope text DEFAULT '')
RETURNS idempotency.idempotency_keys
AS 'MODULE_PATHNAME', 'idempotency_lookup'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION idempotency.lookup(text, text) IS 'the row of a key, or NULL when absent or expired';

CREATE FUNCTION idempotency.execute(
    key       text,
    request   jsonb,
    statement text,
    params    text[]   DEFAULT '{}',
    scope     text     DEFAULT '',
    ttl       interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_execute'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.execute(text, jsonb, text, text[], text, interval) IS 'exactly-once SQL: claim, run the statement with the caller''s rights, store its result, complete';
