-- Lease tokens of claim_events() and the marks that check them
-- (doc/reference.md, "Outbox"), and claim_events() on a table whose
-- columns changed.
\set VERBOSITY terse
SELECT idempotency.enqueue_event('order', 'L', 'l1', '{}') AS l1 \gset
SELECT idempotency.enqueue_event('order', 'M', 'm1', '{}') AS m1 \gset

-- one token per call, on every event of it, larger for each new call
SELECT count(*) AS events, count(DISTINCT lease_token) AS tokens, min(lease_token) > 0 AS positive
  FROM idempotency.claim_events(10, '10 minutes');
SELECT lease_token AS first_token FROM idempotency.outbox_events WHERE id = :l1 \gset
-- a wrong token changes nothing; the right one marks
SELECT idempotency.mark_published(ARRAY[:l1], :first_token + 1000) AS wrong_token;
SELECT idempotency.mark_published(ARRAY[:l1], :first_token) AS right_token;
-- without a token, the session's own lease is checked: it holds m1
SELECT idempotency.mark_failed(ARRAY[:m1], 'down') AS own_lease;
SELECT event_type, published_at IS NOT NULL AS published, attempts
  FROM idempotency.outbox_events ORDER BY id;

-- an event this session never leased is marked without a check (an
-- operator's manual mark), and NULL ids are skipped
SELECT idempotency.enqueue_event('order', 'N', 'n1', '{}') AS n1 \gset
SELECT idempotency.mark_published(ARRAY[:n1, NULL]) AS unleased;

-- claim_events returns whole rows after a column was dropped and another
-- added (its result is the table's row type)
ALTER TABLE idempotency.outbox_events ADD COLUMN regress_extra text DEFAULT 'x';
ALTER TABLE idempotency.outbox_events DROP COLUMN regress_extra;
ALTER TABLE idempotency.outbox_events ADD COLUMN regress_note text DEFAULT 'note';
SELECT idempotency.enqueue_event('order', 'P', 'p1', '{"v": 1}') AS p1 \gset
SELECT event_type, payload, regress_note, lease_token > :first_token AS newer_token
  FROM idempotency.claim_events(10, '10 minutes');
SELECT idempotency.mark_published(ARRAY[:p1]) AS published;
ALTER TABLE idempotency.outbox_events DROP COLUMN regress_note;

-- these should fail with 22023
SELECT idempotency.mark_published(NULL, 1);
SELECT idempotency.mark_failed('{1}', NULL, 1);

DELETE FROM idempotency.outbox_events;
