-- idempotency 1.6 -> 1.7 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.7 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.7'" to load this file. \quit

-- [section: the portable edition's parity] ----------------------------------

--
-- This section states again the functions whose portable bodies
-- (sql/portable/, doc/portable.md) changed in 1.7 and whose C symbol did
-- not, so that an installation of the portable edition updated to 1.7
-- gets them; in the C edition each statement binds the symbol it bound
-- before.
--

-- The portable body pins search_path in the catalog (SECURITY DEFINER
-- with SET search_path), as every SECURITY DEFINER function must.
CREATE OR REPLACE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
AS 'MODULE_PATHNAME', 'idempotency_purge_expired_batch_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 5;

-- [section: lookup hides an answer past its time] ---------------------------

--
-- lookup() returns the key's row without its response_body once
-- response_expires_at has come, the moment claims start answering gone,
-- whoever asks and whether or not purge_expired() has dropped the body
-- yet (the code stays, as in gone).  The 1.7 library does so for the 1.0
-- symbol too; this statement binds 1.7's symbol, so that the portable
-- edition's body, which changed, lands in an updated installation.  The
-- views (stats, stalled_keys, metrics) show no answers.
--
CREATE OR REPLACE FUNCTION idempotency.lookup(key text, scope text DEFAULT '')
RETURNS idempotency.idempotency_keys
AS 'MODULE_PATHNAME', 'idempotency_lookup_1_7'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION idempotency.lookup(text, text) IS 'the row of a key, or NULL when absent or expired; its response_body NULL once response_expires_at has come';

-- [section: relays that never pass lease_token] ----------------------------

--
-- A relay that never passes lease_token cannot mark an event whose lease
-- was taken over, not even failed (issue 44, item 10).  From 1.7:
-- claim_events makes dead, before it picks candidates, every pending
-- event whose lease ran out unmarked and whose failures and takeovers,
-- with the takeover it would now count, reach
-- idempotency.outbox_max_attempts (as a dead event made by mark_failed,
-- it no longer holds back the later events of its aggregate); a mark
-- without a token that leaves such events alone warns, with the fix; and
-- stats counts them (outbox_taken_over).  The mark statements rebind the
-- symbols they bound, so that the portable edition's bodies, which warn
-- now, land in an updated installation.
--
CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE OR REPLACE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published_1_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed_1_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON COLUMN idempotency.outbox_events.takeovers IS 'times claim_events() leased the event after a lease of it ran out unmarked; marks without a lease_token leave it alone once above 0; failures and takeovers together reach idempotency.outbox_max_attempts, and the event is dead';

CREATE OR REPLACE VIEW idempotency.stats AS
SELECT k.scope,
       k.status,
       COALESCE(k.keys, 0) AS keys,
       k.oldest_created_at,
       COALESCE(k.expired, 0) AS expired,
       o.outbox_unpublished,
       pg_catalog.now() OPERATOR(pg_catalog.-) o.oldest_unpublished AS outbox_oldest_unpublished_age,
       o.outbox_dead,
       i.inbox_size,
       o.outbox_taken_over
  FROM (SELECT pg_catalog.count(*) FILTER (WHERE e.dead_at IS NULL) AS outbox_unpublished,
               pg_catalog.min(e.created_at) FILTER (WHERE e.dead_at IS NULL) AS oldest_unpublished,
               pg_catalog.count(*) FILTER (WHERE e.dead_at IS NOT NULL) AS outbox_dead,
               pg_catalog.count(*) FILTER (WHERE e.dead_at IS NULL
                                           AND e.takeovers OPERATOR(pg_catalog.>) 0) AS outbox_taken_over
          FROM idempotency.outbox_events e
         WHERE e.published_at IS NULL) o
 CROSS JOIN
       (SELECT pg_catalog.count(*) AS inbox_size
          FROM idempotency.processed_events) i
  LEFT JOIN
       (SELECT s.scope, s.status,
               pg_catalog.count(*) AS keys,
               pg_catalog.min(s.created_at) AS oldest_created_at,
               pg_catalog.count(*) FILTER (WHERE s.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS expired
          FROM idempotency.idempotency_keys s
         GROUP BY s.scope, s.status) k ON true;
COMMENT ON VIEW idempotency.stats IS 'per scope and status: keys, oldest created_at, expired but not yet purged; outbox backlog (events taken over included) and inbox size';
