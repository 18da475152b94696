-- idempotency 1.2 -> 1.3 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.3 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-- [section: keys] ------------------------------------------------------------

-- [section: state machines] --------------------------------------------------

-- [section: outbox] ----------------------------------------------------------

-- Leases: claim_events counts a takeover on an event whose previous lease
-- ran out unmarked, and mark_published / mark_failed without a lease_token
-- leave an event that was taken over alone (1.1 and 1.2 checked such a
-- mark against a per-session memory of leases instead).  Every call reads
-- the clock when it starts its work.  The functions keep their signatures
-- and grants and bind to the symbols of 1.3.
ALTER TABLE idempotency.outbox_events ADD COLUMN takeovers integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN idempotency.outbox_events.takeovers IS 'times claim_events() leased the event after a lease of it ran out unmarked; marks without a lease_token leave it alone once above 0';

CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events_1_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE OR REPLACE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published_1_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.mark_published(bigint[], bigint) IS 'mark claimed events published; returns how many were pending and leased under lease_token (without it: not taken over by another relay)';

CREATE OR REPLACE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed_1_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.mark_failed(bigint[], text, bigint) IS 'put claimed events back after an exponential backoff, or make them dead after idempotency.outbox_max_attempts failures; only events leased under lease_token (without it: not taken over by another relay)';

-- Waking relays: a commit that skips its notification is counted until it
-- is visible, and relays look again while any is.  Whoever may claim
-- events may count them.
CREATE FUNCTION idempotency.outbox_quiet_commits()
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_outbox_quiet_commits'
LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.outbox_quiet_commits() IS 'transactions of this database that enqueued events without notifying and are not visible yet; a relay looks again while there are any';
REVOKE ALL ON FUNCTION idempotency.outbox_quiet_commits() FROM PUBLIC;
DO $$
DECLARE
    grantee oid;
BEGIN
    FOR grantee IN
        SELECT a.grantee
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid OPERATOR(pg_catalog.=) 'idempotency.claim_events(integer,interval)'::pg_catalog.regprocedure
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION idempotency.outbox_quiet_commits() TO %s',
            CASE WHEN grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;

-- [section: views and privileges] --------------------------------------------
