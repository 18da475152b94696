-- idempotency 1.5 -> 1.6 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.6 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.6'" to load this file. \quit

-- [section: keys outlive their answers] -------------------------------------

--
-- A key can keep its fingerprint and outcome after its stored answer is
-- dropped: complete() and a final fail() take response_ttl (default
-- idempotency.default_response_ttl, unset: the answer lives as long as the
-- key).  After response_expires_at a claim of the same request gets the
-- outcome 'gone' (HTTP 410) instead of the answer, and never runs the
-- request again while the key lives; purge_expired() drops such answers
-- (response_body becomes NULL and response_expires_at '-infinity', which
-- takes the row out of the index below) on its own schedule, before the
-- key itself expires.  NULL in the column: the answer lives as long as the
-- key, and the index holds nothing, so keys without a response_ttl cost
-- nothing more and complete() stays a HOT update.
--
ALTER TABLE idempotency.idempotency_keys ADD COLUMN response_expires_at timestamptz;
COMMENT ON COLUMN idempotency.idempotency_keys.response_expires_at IS 'when the stored answer goes (claims then get gone); NULL: with the key; -infinity: dropped by purge_expired';

CREATE INDEX idempotency_keys_response_expires_at_idx
    ON idempotency.idempotency_keys (response_expires_at)
    WHERE response_expires_at > '-infinity';

-- Same signature; the 1.6 library drops the answers past their time too.
CREATE OR REPLACE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
AS 'MODULE_PATHNAME', 'idempotency_purge_expired_batch_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 5;
COMMENT ON FUNCTION idempotency.purge_expired_batch(integer) IS 'one batch of purge_expired in the caller''s transaction: at most batch_size rows per relation, and at most batch_size answers past response_expires_at dropped (relation idempotency_keys.response_body)';

--
-- New signatures: the old ones are dropped once the roles that could run
-- them may run the new ones (move_execute_grants, below).
--
-- Grant EXECUTE on routine "to" to every role that holds it on "from", as
-- it holds it there: with the grant option where it had it, and granted by
-- the same role, so that a role that passed the privilege on may still
-- revoke it (REVOKE touches only the grants its role made); then drop
-- "from".  A grant by a role other than the owner is made under SET LOCAL
-- ROLE to that role, after the grant that gave that role the grant option
-- (the grants in the order of their chains from the owner; PostgreSQL 15
-- takes GRANTED BY only for the current user).  When the role cannot be
-- set (through pg_tle or the plain script the installing role is no
-- superuser, and may not be a member of it), the grant is made as the
-- installing role: the grantee keeps EXECUTE and any grant option, and
-- the owner is then its grantor.  (Until 1.7 this script granted every
-- grant as the owner and without the grant option; it is fixed in place,
-- as it is what an update runs.)  (A regrole's text is its name quoted
-- where needed, as 1.2--1.3 uses it: quote_ident() of it, as in 1.0--1.1
-- until 1.7, would quote a name such as "App Role" twice.)  A GRANT that
-- an extension script makes is recorded
-- in pg_init_privs as an initial privilege, which pg_dump leaves out of a
-- dump (see the initial privileges in 1.2--1.3), so "to"'s initial
-- privileges are set back to its owner's own.  That needs a superuser:
-- CREATE EXTENSION of the C edition runs as one; pg_tle's installing
-- role is not, and there the moved grants stay initial ones
-- (doc/portable.md).  From PostgreSQL 17 each role named there has a
-- shared dependency of type 'i', which goes with it.
CREATE FUNCTION idempotency.move_execute_grants(from_routine regprocedure, to_routine regprocedure)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    item record;
    grant_sql text;
    saved_role text := pg_catalog.current_setting('role');
BEGIN
    FOR item IN
        WITH RECURSIVE acl AS (
            SELECT a.grantee, a.grantor, a.is_grantable, p.proowner
              FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
             WHERE p.oid OPERATOR(pg_catalog.=) from_routine
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        ), chain AS (
            SELECT acl.grantee, acl.grantor, 0 AS depth
              FROM acl WHERE acl.grantor OPERATOR(pg_catalog.=) acl.proowner
            UNION
            SELECT acl.grantee, acl.grantor, chain.depth OPERATOR(pg_catalog.+) 1
              FROM acl, chain, acl AS given
             WHERE acl.grantor OPERATOR(pg_catalog.=) chain.grantee
               AND given.grantee OPERATOR(pg_catalog.=) chain.grantee
               AND given.grantor OPERATOR(pg_catalog.=) chain.grantor
               AND given.is_grantable
               AND chain.depth OPERATOR(pg_catalog.<) 100
        )
        SELECT acl.grantee, acl.grantor, acl.is_grantable,
               acl.grantor OPERATOR(pg_catalog.=) acl.proowner AS by_owner,
               (SELECT r.rolname FROM pg_catalog.pg_roles r
                 WHERE r.oid OPERATOR(pg_catalog.=) acl.grantor) AS grantor_name
          FROM acl
         ORDER BY (SELECT pg_catalog.min(chain.depth) FROM chain
                    WHERE chain.grantee OPERATOR(pg_catalog.=) acl.grantee
                      AND chain.grantor OPERATOR(pg_catalog.=) acl.grantor) NULLS LAST,
                  acl.grantor, acl.grantee
    LOOP
        grant_sql := pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', to_routine,
            CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE item.grantee::pg_catalog.regrole::pg_catalog.text END,
            CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        IF item.by_owner THEN
            EXECUTE grant_sql;
            CONTINUE;
        END IF;
        BEGIN
            PERFORM pg_catalog.set_config('role', item.grantor_name, true);
            EXECUTE grant_sql;
            PERFORM pg_catalog.set_config('role', saved_role, true);
        EXCEPTION WHEN OTHERS THEN
            -- the role could not be set, or may not grant (the block's
            -- SET is undone with it): granted by the installing role
            EXECUTE grant_sql;
        END;
    END LOOP;
    EXECUTE pg_catalog.format('DROP FUNCTION %s', from_routine);
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
             WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RETURN;
    END IF;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = ARRAY(SELECT a.item
                               FROM pg_catalog.unnest(i.initprivs) AS a(item)
                              WHERE (SELECT x.grantee OPERATOR(pg_catalog.=) x.grantor
                                       FROM pg_catalog.aclexplode(ARRAY[a.item]) x LIMIT 1))
     WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND i.objoid OPERATOR(pg_catalog.=) to_routine
       AND i.objsubid OPERATOR(pg_catalog.=) 0;
    DELETE FROM pg_catalog.pg_shdepend s
     WHERE s.dbid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
       AND s.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND s.objid OPERATOR(pg_catalog.=) to_routine
       AND s.deptype OPERATOR(pg_catalog.=) 'i'
       AND s.refobjid OPERATOR(pg_catalog.<>) (SELECT p.proowner FROM pg_catalog.pg_proc p
                                                WHERE p.oid OPERATOR(pg_catalog.=) to_routine);
END
$$;

--
-- claim() and execute() also take wait (doc/reference.md, "Waiting for
-- the holder"): a duplicate of a request whose holder is working sleeps
-- until the holder's completion, failure or release commits, or its lease
-- ends, instead of answering in_progress at once.
--
CREATE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_claim_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.claim(text, jsonb, text, interval, interval, interval) IS 'atomically claim a request key: claimed, resumed, replay, in_progress, mismatch or gone; with wait, a duplicate waits for the holder to finish';
REVOKE ALL ON FUNCTION idempotency.claim(text, jsonb, text, interval, interval, interval) FROM PUBLIC;
SELECT idempotency.move_execute_grants('idempotency.claim(text,jsonb,text,interval,interval)',
                                       'idempotency.claim(text,jsonb,text,interval,interval,interval)');

CREATE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer  DEFAULT 200,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_complete_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval, interval) IS 'store the answer of a held key; later claims replay it, for ttl from now when given, and get gone once response_ttl has passed';
REVOKE ALL ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval, interval) FROM PUBLIC;
SELECT idempotency.move_execute_grants('idempotency.complete(text,bigint,jsonb,integer,text,interval)',
                                       'idempotency.complete(text,bigint,jsonb,integer,text,interval,interval)');

CREATE FUNCTION idempotency.fail(
    key           text,
    fence         bigint,
    error         jsonb    DEFAULT NULL,
    response_code integer  DEFAULT 500,
    retryable     boolean  DEFAULT true,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_fail_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval, interval) IS 'record a failure of a held key: retryable ones are resumed, final ones replayed (for ttl from now when given, until response_ttl has passed)';
REVOKE ALL ON FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval, interval) FROM PUBLIC;
SELECT idempotency.move_execute_grants('idempotency.fail(text,bigint,jsonb,integer,boolean,text,interval)',
                                       'idempotency.fail(text,bigint,jsonb,integer,boolean,text,interval,interval)');

CREATE FUNCTION idempotency.execute(
    key          text,
    request      jsonb,
    statement    text,
    params       text[]   DEFAULT '{}',
    scope        text     DEFAULT '',
    ttl          interval DEFAULT NULL,
    response_ttl interval DEFAULT NULL,
    wait         interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_execute_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.execute(text, jsonb, text, text[], text, interval, interval, interval) IS 'exactly-once SQL: claim, run the statement with the caller''s rights, store its result, complete';
REVOKE ALL ON FUNCTION idempotency.execute(text, jsonb, text, text[], text, interval, interval, interval) FROM PUBLIC;
SELECT idempotency.move_execute_grants('idempotency.execute(text,jsonb,text,text[],text,interval)',
                                       'idempotency.execute(text,jsonb,text,text[],text,interval,interval,interval)');

DROP FUNCTION idempotency.move_execute_grants(regprocedure, regprocedure);

-- [section: metrics] ---------------------------------------------------------

--
-- Outcome counts per scope since a reset (src/metrics.c): claims by
-- outcome, holder calls that found their lease lost, keys purged.  They
-- live in shared memory, so they need the library in
-- shared_preload_libraries (else both functions raise 55000), cost no
-- write, and count on hot standbys too.  Monitoring is for operators:
-- nothing here is granted, grant_usage() leaves them out, and a monitoring
-- role needs USAGE on the schema, EXECUTE on metrics() and SELECT on the
-- view (doc/operations.md, "Metrics").
--
CREATE FUNCTION idempotency.metrics()
RETURNS TABLE (
    scope       text,
    claimed     bigint,
    replay      bigint,
    mismatch    bigint,
    in_progress bigint,
    resumed     bigint,
    gone        bigint,
    lease_lost  bigint,
    purged      bigint,
    reset_at    timestamptz)
AS 'MODULE_PATHNAME', 'idempotency_metrics'
LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.metrics() IS 'outcome counts per scope of this database since reset_at (the row with scope NULL: keys purged, and scopes beyond idempotency.metrics_max_scopes); needs idempotency in shared_preload_libraries';
REVOKE ALL ON FUNCTION idempotency.metrics() FROM PUBLIC;

CREATE FUNCTION idempotency.metrics_reset(scope text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_metrics_reset'
LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION idempotency.metrics_reset(text) IS 'set the outcome counts of one scope of this database, or with NULL of all its rows, back to zero';
REVOKE ALL ON FUNCTION idempotency.metrics_reset(text) FROM PUBLIC;

CREATE VIEW idempotency.metrics AS
SELECT m.scope, m.claimed, m.replay, m.mismatch, m.in_progress, m.resumed,
       m.gone, m.lease_lost, m.purged, m.reset_at
  FROM idempotency.metrics() m;
COMMENT ON VIEW idempotency.metrics IS 'outcome counts per scope since reset_at (idempotency.metrics()); selecting needs EXECUTE on that function too';
REVOKE ALL ON idempotency.metrics FROM PUBLIC;
