--
-- Section 4: transactional outbox and processed-events inbox.
--
CREATE TABLE idempotency.outbox_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type  text NOT NULL,
    aggregate_id    text NOT NULL,
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
);
COMMENT ON TABLE idempotency.outbox_events IS 'transactional outbox: events written with the business change, published by relays';

CREATE TABLE idempotency.processed_events (
    consumer     text COLLATE "C" NOT NULL,
    event_id     text COLLATE "C" NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer, event_id)
);
COMMENT ON TABLE idempotency.processed_events IS 'inbox: (consumer, event id) pairs already processed';

CREATE INDEX processed_events_processed_at_idx
    ON idempotency.processed_events (processed_at);
