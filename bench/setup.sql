--
-- bench/setup.sql: the baselines that `make bench` measures the extension
-- against, written the way an application team writes them by hand.
-- Loaded into the throwaway benchmark database after CREATE EXTENSION.
--
CREATE SCHEMA bench;

-- The seeds' middleware table: one row per Idempotency-Key, the request
-- hash computed by the application, statuses as text.
CREATE TABLE bench.seed_keys (
    idempotency_key text COLLATE "C" PRIMARY KEY,
    request_hash    bytea,
    status          text NOT NULL,
    response_code   integer,
    response_body   jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX ON bench.seed_keys (expires_at);

-- The business write of the end-to-end request.
CREATE TABLE bench.payments (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_no   text NOT NULL,
    amount     integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Same shapes as the extension's tables, for the bare-statement baselines
-- (LIKE copies whatever indexes the extension gives its own tables), but
-- keyed by the key text as a hand-written table is: without 1.2's
-- key_hash, whose primary key the PL/pgSQL claim's ON CONFLICT cannot name.
CREATE TABLE bench.pl_keys (LIKE idempotency.idempotency_keys INCLUDING ALL);
ALTER TABLE bench.pl_keys DROP COLUMN key_hash,
    ADD PRIMARY KEY (scope, idempotency_key);
CREATE SEQUENCE bench.pl_fence_seq AS bigint;

-- State-machine rows: one table for transition(), one for the raw pair.
CREATE TABLE bench.orders_ext (id bigint PRIMARY KEY, state text NOT NULL, note text);
CREATE TABLE bench.orders_raw (id bigint PRIMARY KEY, state text NOT NULL, note text);
INSERT INTO bench.orders_ext SELECT i, 's0', NULL FROM generate_series(1, 100000) i;
INSERT INTO bench.orders_raw SELECT i, 's0', NULL FROM generate_series(1, 100000) i;

-- claim() in PL/pgSQL: the same decisions as the extension's C code
-- (replay, mismatch, in_progress, takeover of expired or crashed keys),
-- a read first and an upsert when the key may be taken.
CREATE FUNCTION bench.plpgsql_claim(p_key text, p_request jsonb DEFAULT NULL,
                                    p_scope text DEFAULT '',
                                    p_ttl interval DEFAULT '24 hours',
                                    p_lease interval DEFAULT '30 seconds')
RETURNS idempotency.claim_result
LANGUAGE plpgsql AS $$
DECLARE
    h     bytea := CASE WHEN p_request IS NULL THEN NULL
                        ELSE sha256(convert_to(p_request::text, 'UTF8')) END;
    t     timestamptz := statement_timestamp();
    k     bench.pl_keys;
    r     idempotency.claim_result;
BEGIN
    FOR attempt IN 1..3 LOOP
        SELECT * INTO k FROM bench.pl_keys
         WHERE scope = p_scope AND idempotency_key = p_key;
        IF FOUND AND k.expires_at > t THEN
            r.status := k.status;
            IF k.request_hash IS NOT NULL AND h IS NOT NULL AND k.request_hash <> h THEN
                r.outcome := 'mismatch';
                RETURN r;
            END IF;
            r.attempts := k.attempts;
            r.recovery_point := k.recovery_point;
            IF k.status = 'completed' OR (k.status = 'failed' AND NOT k.retryable) THEN
                r.outcome := 'replay';
                r.response_code := k.response_code;
                r.response_body := k.response_body;
                RETURN r;
            END IF;
            IF k.status = 'processing' AND k.locked_until > t THEN
                r.outcome := 'in_progress';
                r.retry_after := k.locked_until - t;
                RETURN r;
            END IF;
        END IF;
        INSERT INTO bench.pl_keys AS o (scope, idempotency_key, request_hash, status,
                fence, attempts, recovery_point, locked_until, created_at,
                updated_at, expires_at)
        VALUES (p_scope, p_key, h, 'processing', nextval('bench.pl_fence_seq'), 1,
                'started', t + p_lease, t, t, t + p_ttl)
        ON CONFLICT (scope, idempotency_key) DO UPDATE SET
            request_hash = CASE WHEN o.expires_at <= t THEN excluded.request_hash
                                ELSE COALESCE(o.request_hash, excluded.request_hash) END,
            status = 'processing', fence = excluded.fence,
            attempts = CASE WHEN o.expires_at <= t THEN 1 ELSE o.attempts + 1 END,
            recovery_point = CASE WHEN o.expires_at <= t THEN 'started' ELSE o.recovery_point END,
            response_code = NULL, response_body = NULL, retryable = NULL,
            locked_until = excluded.locked_until, updated_at = t,
            created_at = CASE WHEN o.expires_at <= t THEN t ELSE o.created_at END,
            expires_at = CASE WHEN o.expires_at <= t THEN excluded.expires_at
                              ELSE greatest(o.expires_at, excluded.locked_until) END
        WHERE o.expires_at <= t
           OR ((o.request_hash IS NULL OR h IS NULL OR o.request_hash = h)
               AND ((o.status = 'processing' AND o.locked_until <= t)
                    OR (o.status = 'failed' AND o.retryable)))
        RETURNING 'processing', fence, attempts, recovery_point
        INTO r.status, r.fence, r.attempts, r.recovery_point;
        IF FOUND THEN
            r.outcome := CASE WHEN r.attempts = 1 THEN 'claimed' ELSE 'resumed' END;
            RETURN r;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'could not claim key %', p_key;
END
$$;

-- complete() in PL/pgSQL: the fenced UPDATE.
CREATE FUNCTION bench.plpgsql_complete(p_key text, p_fence bigint, p_body jsonb,
                                       p_code integer DEFAULT 200,
                                       p_scope text DEFAULT '')
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE bench.pl_keys
       SET status = 'completed', response_code = p_code, response_body = p_body,
           locked_until = NULL, updated_at = statement_timestamp()
     WHERE scope = p_scope AND idempotency_key = p_key
       AND fence = p_fence AND status = 'processing';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency lease lost for key "%"', p_key
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;

-- The bare inbox and outbox INSERTs write into copies of the extension's
-- tables, indexes included.
CREATE TABLE bench.inbox (LIKE idempotency.processed_events INCLUDING ALL);
CREATE TABLE bench.outbox (LIKE idempotency.outbox_events INCLUDING ALL);
