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

-- [section: only the holder acts as the holder] ---

--
-- A role that guessed another request's fence could complete, fail,
-- checkpoint or release it (issue 43).  From 1.7 a claim records the role
-- that claimed (the caller's current role; in the portable edition the
-- session's role), and a holder call from any other role that is not a
-- member of it is refused with 42501 whatever fence it passes, changing
-- nothing.  Likewise claim_events records the relay's role, and
-- mark_published and mark_failed refuse another role's leased events.
-- Keys and events from before 1.7 have no role recorded: any role may act
-- on them, as before.  Signatures are unchanged; each function binds a
-- new symbol, and the old ones keep serving databases not yet updated.
--
ALTER TABLE idempotency.idempotency_keys ADD COLUMN holder_role regrole;
COMMENT ON COLUMN idempotency.idempotency_keys.holder_role IS 'the role that claimed the key (1.7): only it, its members and superusers may complete, fail, checkpoint or release the key; NULL for keys claimed before 1.7, which any role may';

ALTER TABLE idempotency.outbox_events ADD COLUMN lease_role regrole;
COMMENT ON COLUMN idempotency.outbox_events.lease_role IS 'the role of the relay that last leased the event (claim_events, 1.7): only it, its members and superusers may mark the event; NULL for events never leased since 1.7';

CREATE OR REPLACE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_claim_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer  DEFAULT 200,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_complete_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.fail(
    key           text,
    fence         bigint,
    error         jsonb    DEFAULT NULL,
    response_code integer  DEFAULT 500,
    retryable     boolean  DEFAULT true,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_fail_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.checkpoint(
    key            text,
    fence          bigint,
    recovery_point text,
    lease          interval DEFAULT NULL,
    scope          text     DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_checkpoint_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.release(
    key   text,
    fence bigint,
    scope text DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_release_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.execute(
    key          text,
    request      jsonb,
    statement    text,
    params       text[]   DEFAULT '{}',
    scope        text     DEFAULT '',
    ttl          interval DEFAULT NULL,
    response_ttl interval DEFAULT NULL,
    wait         interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_execute_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE OR REPLACE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
