-- The views idempotency.stats and idempotency.stalled_keys.
\set VERBOSITY terse
-- other test files leave rows behind: start from empty tables
TRUNCATE idempotency.idempotency_keys, idempotency.tokens,
         idempotency.outbox_events, idempotency.processed_events;

-- empty: still one row, so the backlog columns are always there
SELECT scope, status, keys, expired, outbox_unpublished,
       outbox_oldest_unpublished_age IS NULL AS no_backlog_age, outbox_dead, inbox_size
  FROM idempotency.stats;

-- one transaction, so that now() is the same in every statement
BEGIN;
SELECT count(*) FROM (
  SELECT idempotency.claim('a' || g, scope => 'shop') FROM generate_series(1, 3) g
  UNION ALL SELECT idempotency.claim('b1', scope => 'billing')
  UNION ALL SELECT idempotency.claim('done')) s;
SELECT idempotency.complete('done', fence, '{}') FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'done';
-- a crashed holder (lease run out) and an expired, not yet purged key
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '5 minutes'
 WHERE idempotency_key = 'a1';
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 minute'
 WHERE idempotency_key = 'b1';
UPDATE idempotency.idempotency_keys SET created_at = now() - interval '1 hour',
       expires_at = now() - interval '1 second'
 WHERE idempotency_key = 'done';

INSERT INTO idempotency.outbox_events
       (aggregate_type, aggregate_id, event_type, payload, created_at, published_at, dead_at)
VALUES ('order', '1', 'a', '{}', now() - interval '2 hours', NULL, NULL),
       ('order', '2', 'b', '{}', now() - interval '1 hour', NULL, NULL),
       ('order', '3', 'c', '{}', now() - interval '3 hours', now(), NULL),
       ('order', '4', 'd', '{}', now() - interval '5 hours', NULL, now());
INSERT INTO idempotency.processed_events (consumer, event_id)
VALUES ('billing', 'e1'), ('billing', 'e2'), ('mail', 'e1');

SELECT scope, status, keys, oldest_created_at = now() - interval '1 hour' AS created_an_hour_ago,
       expired, outbox_unpublished, outbox_oldest_unpublished_age, outbox_dead, inbox_size
  FROM idempotency.stats ORDER BY scope COLLATE "C", status;

-- stalled keys, the longest stalled first
SELECT scope, idempotency_key, attempts, recovery_point, stalled_for
  FROM idempotency.stalled_keys;

-- a completer resumes them
SELECT (idempotency.claim('a1', scope => 'shop')).outcome;
SELECT scope, idempotency_key FROM idempotency.stalled_keys;
COMMIT;

DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.outbox_events;
DELETE FROM idempotency.processed_events;
