-- purge_expired_batch() and purge_expired(): what goes, what stays.
\set VERBOSITY terse
SET idempotency.processed_retention = '7 days';
-- other test files leave rows behind: start from empty tables
TRUNCATE idempotency.idempotency_keys, idempotency.tokens,
         idempotency.outbox_events, idempotency.processed_events;
SET idempotency.outbox_retention = '7 days';

-- keys: expired ones go, live ones and held ones stay
SELECT (idempotency.claim('live-done')).outcome;
SELECT idempotency.complete('live-done', (SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'live-done'), '{"ok":true}');
SELECT (idempotency.claim('live-held')).outcome;
SELECT count(*) AS claimed FROM generate_series(1, 25) g,
       LATERAL idempotency.claim('expired-' || g) c WHERE c.outcome = 'claimed';
UPDATE idempotency.idempotency_keys
   SET expires_at = now() - interval '1 second', locked_until = NULL, status = 'completed'
 WHERE idempotency_key LIKE 'expired-%';
-- past expires_at, but its holder still has a lease: kept
SELECT (idempotency.claim('expired-but-leased', lease => '1 hour', ttl => '1 hour')).outcome;
UPDATE idempotency.idempotency_keys SET expires_at = now() - interval '1 second'
 WHERE idempotency_key = 'expired-but-leased';
-- processing, lease and ttl both run out: goes
SELECT (idempotency.claim('expired-crashed')).outcome;
UPDATE idempotency.idempotency_keys
   SET expires_at = now() - interval '1 second', locked_until = now() - interval '2 seconds'
 WHERE idempotency_key = 'expired-crashed';

-- tokens: expired and consumed go, live ones stay
CREATE TEMP TABLE t AS
SELECT idempotency.issue_token() AS live, idempotency.issue_token() AS used,
       idempotency.issue_token() AS old;
SELECT idempotency.consume_token(used) FROM t;
UPDATE idempotency.tokens SET expires_at = now() - interval '1 second'
 WHERE token = (SELECT old FROM t);

-- inbox marks older than idempotency.processed_retention go
INSERT INTO idempotency.processed_events (consumer, event_id, processed_at)
VALUES ('billing', 'old', now() - interval '8 days'),
       ('billing', 'recent', now() - interval '6 days');

-- published events older than idempotency.outbox_retention go; unpublished
-- and dead ones stay however old
INSERT INTO idempotency.outbox_events
       (aggregate_type, aggregate_id, event_type, payload, created_at, published_at, dead_at)
VALUES ('order', '1', 'old-published', '{}', now() - interval '9 days', now() - interval '8 days', NULL),
       ('order', '2', 'recent-published', '{}', now() - interval '9 days', now() - interval '1 day', NULL),
       ('order', '3', 'old-unpublished', '{}', now() - interval '30 days', NULL, NULL),
       ('order', '4', 'old-dead', '{}', now() - interval '30 days', NULL, now() - interval '29 days');

-- one batch of 10: at most 10 rows per relation
SELECT * FROM idempotency.purge_expired_batch(10);
SELECT count(*) AS expired_keys_left FROM idempotency.idempotency_keys
 WHERE idempotency_key LIKE 'expired-%';

-- the procedure repeats batches, committing each, until nothing is left;
-- it commits them with synchronous_commit off but leaves the caller's
-- setting as it was
SET synchronous_commit = remote_write;
CALL idempotency.purge_expired(10);
SHOW synchronous_commit;
RESET synchronous_commit;
SELECT idempotency_key, status FROM idempotency.idempotency_keys ORDER BY 1;
SELECT token = live AS live_token_kept FROM idempotency.tokens, t;
-- (consuming it makes it purgeable: the next batch takes it)
SELECT idempotency.consume_token(live) AS live_token_works FROM t;
SELECT event_id FROM idempotency.processed_events ORDER BY 1;
SELECT event_type FROM idempotency.outbox_events ORDER BY id;

-- a shorter retention, set per session, purges more
SET idempotency.outbox_retention = '1 hour';
SELECT * FROM idempotency.purge_expired_batch() WHERE deleted > 0;
SELECT event_type FROM idempotency.outbox_events ORDER BY id;
RESET idempotency.outbox_retention;

-- nothing left to purge
SELECT * FROM idempotency.purge_expired_batch();
CALL idempotency.purge_expired();

-- these should all fail
\set VERBOSITY sqlstate
SELECT * FROM idempotency.purge_expired_batch(NULL);
SELECT * FROM idempotency.purge_expired_batch(0);
CALL idempotency.purge_expired(-1);
BEGIN;
CALL idempotency.purge_expired();
ROLLBACK;
\set VERBOSITY terse

DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.tokens;
DELETE FROM idempotency.processed_events;
DELETE FROM idempotency.outbox_events;
