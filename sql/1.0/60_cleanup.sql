--
-- Section 6: expiry and cleanup.  Every purge statement is driven by an
-- index on the column that says a row may go (see src/cleanup.c); these
-- two partial indexes complete the set.
--
CREATE INDEX tokens_consumed_at_idx
    ON idempotency.tokens (consumed_at) WHERE consumed_at IS NOT NULL;
CREATE INDEX outbox_events_published_at_idx
    ON idempotency.outbox_events (published_at) WHERE published_at IS NOT NULL;

CREATE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
AS 'MODULE_PATHNAME', 'idempotency_purge_expired_batch'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 4;
COMMENT ON FUNCTION idempotency.purge_expired_batch(integer) IS 'one batch of purge_expired in the caller''s transaction: at most batch_size rows per relation';

-- No SET clause: a procedure that commits may not have one.  Every name in
-- the body is qualified instead.
--
-- Every batch but the last commits with synchronous_commit off: its COMMIT
-- does not wait for the flush of the megabytes of WAL it wrote (mostly
-- full-page images), which would hold WALWriteLock and stall the commits of
-- concurrent claims for milliseconds; the WAL writer flushes it in the
-- background instead, and a crash can only bring back expired rows that the
-- next purge deletes again.  The last batch commits with the caller's
-- setting, which flushes everything before the CALL returns; a batch that
-- deletes nothing flushes the earlier ones itself (see src/cleanup.c).
CREATE PROCEDURE idempotency.purge_expired(batch_size integer DEFAULT 10000)
LANGUAGE plpgsql
AS $$
DECLARE
    durable CONSTANT text := pg_catalog.current_setting('synchronous_commit');
    largest bigint;
BEGIN
    LOOP
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        SELECT pg_catalog.max(b.deleted) INTO largest
          FROM idempotency.purge_expired_batch(batch_size) AS b;
        IF largest OPERATOR(pg_catalog.<) batch_size THEN
            PERFORM pg_catalog.set_config('synchronous_commit', durable, true);
        END IF;
        COMMIT;
        EXIT WHEN largest OPERATOR(pg_catalog.<) batch_size;
    END LOOP;
END
$$;
COMMENT ON PROCEDURE idempotency.purge_expired(integer) IS 'delete expired keys and tokens, consumed tokens, old inbox marks and old published events, committing each batch';

CREATE FUNCTION idempotency.schedule_cleanup(schedule text DEFAULT '*/5 * * * *')
RETURNS bigint
AS 'MODULE_PATHNAME', 'idempotency_schedule_cleanup'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.schedule_cleanup(text) IS 'create or reschedule the pg_cron job idempotency-cleanup that runs purge_expired() in this database; returns its job id';

CREATE FUNCTION idempotency.unschedule_cleanup()
RETURNS boolean
AS 'MODULE_PATHNAME', 'idempotency_unschedule_cleanup'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.unschedule_cleanup() IS 'remove this database''s pg_cron job idempotency-cleanup; false when there was none';
