--
-- bench/scale/setup.sql: the tables of `make bench-scale` beside the
-- extension's: the business table and the hand-written key table of the
-- raw-SQL baseline, with its own purge, run by pg_cron like ours.
--
CREATE SCHEMA bench;

CREATE TABLE bench.payments (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_no   text NOT NULL,
    amount     integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bench.raw_keys (
    idempotency_key text COLLATE "C" PRIMARY KEY,
    request_hash    bytea,
    status          text NOT NULL,
    response_code   integer,
    response_body   jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX ON bench.raw_keys (expires_at);

-- the hand-written cleanup: expired rows in batches of 10000
CREATE PROCEDURE bench.raw_purge()
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    LOOP
        DELETE FROM bench.raw_keys
         WHERE ctid = ANY (ARRAY(SELECT ctid FROM bench.raw_keys
                                  WHERE expires_at < now()
                                  ORDER BY expires_at LIMIT 10000));
        GET DIAGNOSTICS n = ROW_COUNT;
        COMMIT;
        EXIT WHEN n < 10000;
    END LOOP;
END
$$;
