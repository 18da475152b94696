-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: bounded outbox leases] ------------------------------------------

--
-- One relay could lease every pending event for a century
-- (claim_events(2147483647, '100 years')) and the others got nothing.
-- claim_events binds 1.8's symbol, which refuses (22023), before it
-- writes anything, a batch above idempotency.outbox_max_batch or a lease
-- above idempotency.outbox_max_lease: settings that only superusers (and
-- roles granted SET on them) change in the C edition; the portable
-- edition takes a session's value only when it is lower than the
-- database's (doc/portable.md).  The library's older symbols keep serving
-- databases not yet updated, unbounded.
--
CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

--
-- An operator takes leases back: the pending events leased by relay_role
-- (NULL: by any role) whose lease still has more than longer_than to run
-- (NULL: any live lease) become claimable again.  The lease is ended, not
-- erased: locked_until becomes now, so the next claim counts a takeover
-- and hands out a new lease_token, and the relay that held the event can
-- no longer mark it once another relay has leased it (as after a lease
-- that ran out).  attempts, lease_role and the order of each aggregate
-- are kept: claim_events hands an aggregate's events out only after or
-- together with its earlier pending events whatever their leases, so
-- taking some leases back never lets a later event out first.  Plain
-- SQL, the same text in both editions, run with the caller's rights: it
-- needs UPDATE on outbox_events, which only the owner and superusers
-- have, and grant_usage does not grant it.
--
CREATE FUNCTION idempotency.release_event_leases(
    relay_role  regrole  DEFAULT NULL,
    longer_than interval DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
WITH now AS (SELECT pg_catalog.clock_timestamp() AS t),
released AS (
    UPDATE idempotency.outbox_events e
       SET locked_until = now.t
      FROM now
     WHERE e.published_at IS NULL AND e.dead_at IS NULL
       AND e.locked_until OPERATOR(pg_catalog.>) now.t
       AND ($1 IS NULL OR e.lease_role::pg_catalog.oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid)
       AND ($2 IS NULL OR e.locked_until OPERATOR(pg_catalog.>) (now.t OPERATOR(pg_catalog.+) $2))
    RETURNING e.id)
SELECT pg_catalog.count(*) FROM released
$$;
REVOKE ALL ON FUNCTION idempotency.release_event_leases(regrole, interval) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.release_event_leases(regrole, interval) IS 'for operators: end the live leases of pending events (of relay_role, with more than longer_than to run), so that other relays claim them, in order; returns how many';
