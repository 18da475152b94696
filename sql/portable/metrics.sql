-- sql/portable/metrics.sql: the portable bodies of src/metrics.c,
-- metrics() and metrics_reset().
--
-- The C edition keeps the outcome counts in shared memory, which only a
-- library loaded at server start can have; SQL and PL/pgSQL cannot, and a
-- table of counts would turn every replay into a write (and fail on a hot
-- standby).  So the portable edition has no counts: both functions raise
-- 0A000, and idempotency.stats, which reads the tables, is its view of the
-- keys.

-- portable: idempotency_metrics
CREATE FUNCTION idempotency.metrics()
RETURNS TABLE (
    scope       text,
    claimed     bigint,
    replay      bigint,
    mismatch    bigint,
    in_progress bigint,
    resumed     bigint,
    gone        bigint,
    lease_lost  bigint,
    purged      bigint,
    reset_at    timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
BEGIN
    RAISE EXCEPTION 'idempotency.metrics() is not in the portable edition'
        USING ERRCODE = 'feature_not_supported',
              DETAIL = 'The outcome counts live in shared memory, which only the C edition''s library, preloaded, has.',
              HINT = 'Use the C edition with idempotency in shared_preload_libraries; idempotency.stats shows the keys in both editions.';
END
$$;

-- portable: idempotency_metrics_reset
CREATE FUNCTION idempotency.metrics_reset(scope text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
BEGIN
    RAISE EXCEPTION 'idempotency.metrics_reset() is not in the portable edition'
        USING ERRCODE = 'feature_not_supported',
              DETAIL = 'The outcome counts live in shared memory, which only the C edition''s library, preloaded, has.',
              HINT = 'Use the C edition with idempotency in shared_preload_libraries.';
END
$$;
