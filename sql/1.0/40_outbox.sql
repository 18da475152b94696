--
-- Section 4: transactional outbox and processed-events inbox.
--
-- Relays hand events out oldest first and in id order per aggregate; see
-- src/outbox.c for how concurrent relays and writers are kept apart.
--
CREATE TABLE idempotency.outbox_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type  text COLLATE "C" NOT NULL,
    aggregate_id    text COLLATE "C" NOT NULL,
    event_type      text NOT NULL,
    payload         jsonb NOT NULL,
    headers         jsonb,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    published_at    timestamptz,            -- NULL until published
    attempts        integer NOT NULL DEFAULT 0,
    locked_until    timestamptz,            -- relay lease
    next_attempt_at timestamptz,            -- retry backoff after mark_failed
    last_error      text,
    dead_at         timestamptz             -- set after outbox_max_attempts failures
) WITH (fillfactor = 90);
COMMENT ON TABLE idempotency.outbox_events IS 'transactional outbox: events written with the business change, published by relays';
COMMENT ON COLUMN idempotency.outbox_events.published_at IS 'set by mark_published(); NULL while the event waits to be published';
COMMENT ON COLUMN idempotency.outbox_events.attempts IS 'failed deliveries so far (mark_failed)';
COMMENT ON COLUMN idempotency.outbox_events.locked_until IS 'end of the lease of the relay that claimed the event';
COMMENT ON COLUMN idempotency.outbox_events.next_attempt_at IS 'earliest time of the next delivery after a failure';
COMMENT ON COLUMN idempotency.outbox_events.last_error IS 'error text of the last mark_failed()';
COMMENT ON COLUMN idempotency.outbox_events.dead_at IS 'set when the event failed idempotency.outbox_max_attempts times; never handed out again';

-- The relay's queue: pending events in id order, and per aggregate.
CREATE INDEX outbox_events_pending_idx
    ON idempotency.outbox_events (id)
    WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_events_aggregate_idx
    ON idempotency.outbox_events (aggregate_type, aggregate_id, id)
    WHERE published_at IS NULL AND dead_at IS NULL;
-- Events a relay has leased or failed and not yet published: the aggregates
-- that claim_events must hold back are found here.
CREATE INDEX outbox_events_held_idx
    ON idempotency.outbox_events (aggregate_type, aggregate_id)
    WHERE published_at IS NULL AND dead_at IS NULL
      AND (locked_until IS NOT NULL OR next_attempt_at IS NOT NULL);
-- (purge_expired's index on published_at is in 60_cleanup.sql.)

CREATE TABLE idempotency.processed_events (
    consumer     text COLLATE "C" NOT NULL,
    event_id     text COLLATE "C" NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer, event_id)
);
COMMENT ON TABLE idempotency.processed_events IS 'inbox: (consumer, event id) pairs already processed';

CREATE INDEX processed_events_processed_at_idx
    ON idempotency.processed_events (processed_at);

-- Their rows are user data: pg_dump keeps them, and the id sequence with them.
SELECT pg_catalog.pg_extension_config_dump('idempotency.outbox_events', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.outbox_events_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.processed_events', '');

CREATE FUNCTION idempotency.enqueue_event(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idempotency_enqueue_event'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.enqueue_event(text, text, text, jsonb, jsonb) IS 'write an event into the outbox in the caller''s transaction; wakes listeners of channel idempotency_outbox at commit';

CREATE FUNCTION idempotency.emit_event(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT NULL)
RETURNS pg_catalog.pg_lsn
AS 'MODULE_PATHNAME', 'idempotency_emit_event'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.emit_event(text, text, text, jsonb, jsonb) IS 'emit an event as a transactional logical decoding message (prefix idempotency_outbox) for change-data-capture relays';

CREATE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;
COMMENT ON FUNCTION idempotency.claim_events(integer, interval) IS 'lease up to batch publishable events to a relay, oldest first and in id order per aggregate';

CREATE FUNCTION idempotency.mark_published(ids bigint[])
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.mark_published(bigint[]) IS 'mark claimed events published; returns how many were pending';

CREATE FUNCTION idempotency.mark_failed(ids bigint[], error text)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.mark_failed(bigint[], text) IS 'put claimed events back after an exponential backoff, or make them dead after idempotency.outbox_max_attempts failures';

CREATE FUNCTION idempotency.process_once(consumer text, event_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idempotency_process_once'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.process_once(text, text) IS 'inbox dedup: true the first time a consumer sees an event id in a committed transaction, false for a duplicate';
