-- idempotency 1.2 -> 1.3 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.3 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-- [section: keys] ------------------------------------------------------------

--
-- key_hash becomes a plain column that the library writes with every new
-- key, instead of a stored generated column: logical replication (pgoutput
-- of 15 and 17) does not send generated columns, and key_hash is the
-- primary key, so the replica identity.  A CHECK constraint holds it to
-- idempotency.key_hash(scope, idempotency_key), as the generated column
-- did.  No rewrite; the check reads the table once (doc/operations.md,
-- "Upgrades").
--
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN key_hash DROP EXPRESSION;
ALTER TABLE idempotency.idempotency_keys
    ADD CONSTRAINT idempotency_keys_key_hash_check
        CHECK (key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(scope, idempotency_key));
-- Rows that come without key_hash get it: a dump of a database at 1.2
-- (whose COPY leaves the generated column out) restored into 1.3, a
-- publisher at 1.2 replicating to 1.3, an INSERT written by hand.  The
-- library always gives key_hash, so the trigger's WHEN clause keeps it
-- from firing on claims; ALWAYS, so that it also fires in logical
-- replication's apply worker.
CREATE FUNCTION idempotency.fill_key_hash()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.key_hash := idempotency.key_hash(NEW.scope, NEW.idempotency_key);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION idempotency.fill_key_hash() IS 'trigger: give a row of idempotency_keys inserted without key_hash its hash';
REVOKE ALL ON FUNCTION idempotency.fill_key_hash() FROM PUBLIC;
CREATE TRIGGER idempotency_keys_fill_key_hash
    BEFORE INSERT ON idempotency.idempotency_keys
    FOR EACH ROW WHEN (NEW.key_hash IS NULL)
    EXECUTE FUNCTION idempotency.fill_key_hash();
ALTER TABLE idempotency.idempotency_keys ENABLE ALWAYS TRIGGER idempotency_keys_fill_key_hash;
COMMENT ON COLUMN idempotency.idempotency_keys.key_hash IS 'idempotency.key_hash(scope, idempotency_key), written with the row (a CHECK holds it): the primary key; look a key up with WHERE key_hash = idempotency.key_hash(scope, key)';

-- [section: state machines] --------------------------------------------------
--
-- enforce_state_machine() now installs a BEFORE UPDATE row trigger,
-- zz_idempotency_state_machine_<attnum>, on the table and on its
-- inheritance children: the AFTER UPDATE trigger of 1.2
-- (idempotency_state_machine_<attnum>) never fires for an UPDATE that
-- moves a row to another partition, nor for the rows of inheritance
-- children.  Every table that 1.2 enforced is enforced again, which
-- installs the new trigger and drops the old one.  A trigger whose column
-- was renamed or whose machine is gone is left as it was: it fails every
-- state change, as it did (42703, 42704), until enforced again.  Clones of
-- a partitioned table's trigger go with it.
SELECT idempotency.enforce_state_machine(t.tgrelid, a.attname, m.name)
  FROM pg_catalog.pg_trigger t
 CROSS JOIN LATERAL (
        SELECT pg_catalog.position(t.tgargs, '\x00'::pg_catalog.bytea) AS col_end) e
 CROSS JOIN LATERAL (
        SELECT pg_catalog.convert_from(pg_catalog.substr(t.tgargs, 1, e.col_end - 1),
                                       pg_catalog.getdatabaseencoding()) AS col,
               pg_catalog.substr(t.tgargs, e.col_end + 1) AS rest) r
  JOIN pg_catalog.pg_attribute a
    ON a.attrelid OPERATOR(pg_catalog.=) t.tgrelid
   AND a.attname OPERATOR(pg_catalog.=) r.col::pg_catalog.name
   AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
  JOIN idempotency.state_machines m
    ON m.name OPERATOR(pg_catalog.=) pg_catalog.convert_from(
         pg_catalog.substr(r.rest, 1, pg_catalog.position(r.rest, '\x00'::pg_catalog.bytea) - 1),
         pg_catalog.getdatabaseencoding())
 WHERE t.tgfoid OPERATOR(pg_catalog.=) 'idempotency.state_machine_trigger()'::pg_catalog.regprocedure
   AND t.tgparentid OPERATOR(pg_catalog.=) 0
   AND t.tgnargs OPERATOR(pg_catalog.=) 2
   AND t.tgname OPERATOR(pg_catalog.~) '^idempotency_state_machine_[0-9]+$'
 ORDER BY t.tgrelid, t.tgname COLLATE "C";

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

--
-- stalled_keys shows a key's fence only to a role that may read the table
-- of keys itself, as lookup() does: an application role given
-- grant_usage() sees NULL there too (doc/reference.md, "Privileges").  The
-- column keeps its name and type, so that grants on the view and views of
-- users built on it survive.
--
CREATE OR REPLACE VIEW idempotency.stalled_keys AS
SELECT k.scope,
       k.idempotency_key,
       CASE WHEN pg_catalog.has_table_privilege('idempotency.idempotency_keys'::pg_catalog.regclass,
                                                'SELECT')
            THEN k.fence END AS fence,
       k.attempts,
       k.recovery_point,
       k.locked_until,
       pg_catalog.now() OPERATOR(pg_catalog.-) k.locked_until AS stalled_for,
       k.created_at,
       k.updated_at,
       k.expires_at
  FROM idempotency.idempotency_keys k
 WHERE k.status OPERATOR(pg_catalog.=) 'processing'::idempotency.key_status
   AND k.locked_until OPERATOR(pg_catalog.<=) pg_catalog.now()
 ORDER BY k.locked_until, k.scope, k.idempotency_key;
COMMENT ON COLUMN idempotency.stalled_keys.fence IS 'the holder''s fence, shown only to a role that may read idempotency_keys (NULL to others, as in lookup())';

--
-- grant_usage() also grants outbox_quiet_commits(), which relays call (see
-- the outbox section).  It still picks the functions by name, so that a
-- new signature needs no new list.
--
CREATE OR REPLACE FUNCTION idempotency.grant_usage(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    routine regprocedure;
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION 'role must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA idempotency TO %s', role);
    FOR routine IN
        SELECT p.oid::pg_catalog.regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'idempotency'::pg_catalog.regnamespace
           AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY[
                   'fingerprint', 'claim', 'complete', 'fail', 'checkpoint', 'release',
                   'lookup', 'execute', 'issue_token', 'consume_token', 'transition',
                   'enqueue_event', 'enqueue_events', 'emit_event', 'claim_events', 'mark_published',
                   'mark_failed', 'outbox_quiet_commits', 'process_once', 'lock_key',
                   'try_lock']::pg_catalog.name[])
         ORDER BY 1
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', routine, role);
    END LOOP;
    EXECUTE pg_catalog.format(
        'GRANT SELECT ON idempotency.stats, idempotency.stalled_keys TO %s', role);
END
$$;

--
-- Initial privileges.  pg_dump leaves out of a dump the privileges that
-- pg_init_privs records as an extension object's initial ones, since the
-- CREATE EXTENSION of the restore gives them again.  Every GRANT that an
-- extension script runs is recorded there, also those by which an update
-- hands a user's grant on to a new signature (copy_execute_grants in
-- 1.0--1.1): such grants were left out of dumps, and lost on restore.
--
-- The rule: the initial privileges of the extension's objects are those
-- of a fresh CREATE EXTENSION, that is the owner's own and nothing for
-- any other role or PUBLIC (every script revokes PUBLIC and grants to no
-- one).  reset_init_privs() makes pg_init_privs say so again: of the
-- initial privileges of each object of the extension, and of its schema,
-- it keeps the owner's items (those whose grantee is their grantor) and
-- drops the others.  Every update script that grants anything to a role
-- in its course runs it at its end, after every section, as this one
-- does: create it, call it, drop it.
--
-- The catalog is written directly: within an extension script every
-- GRANT or REVOKE records its result as initial, and outside one nothing
-- changes pg_init_privs.  Since PostgreSQL 17 each role named in
-- pg_init_privs has a shared dependency of type 'i' (initial privileges)
-- in pg_shdepend; those of the roles dropped go with them, or the roles
-- could not be dropped.  The update runs as a superuser (superuser =
-- true in the control file).
--
CREATE FUNCTION idempotency.reset_init_privs()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT i.classoid, i.objoid, i.objsubid, i.kept
          FROM (SELECT p.classoid, p.objoid, p.objsubid, p.initprivs,
                       ARRAY(SELECT a.item
                               FROM pg_catalog.unnest(p.initprivs) AS a(item)
                              WHERE (SELECT x.grantee OPERATOR(pg_catalog.=) x.grantor
                                       FROM pg_catalog.aclexplode(ARRAY[a.item]) x
                                      LIMIT 1)) AS kept
                  FROM pg_catalog.pg_init_privs p, pg_catalog.pg_extension e
                 WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency'
                   AND p.privtype OPERATOR(pg_catalog.=) 'e'
                   AND ((p.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                         AND p.objoid OPERATOR(pg_catalog.=) e.extnamespace)
                        OR EXISTS (SELECT
                                     FROM pg_catalog.pg_depend d
                                    WHERE d.classid OPERATOR(pg_catalog.=) p.classoid
                                      AND d.objid OPERATOR(pg_catalog.=) p.objoid
                                      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                                      AND d.refobjid OPERATOR(pg_catalog.=) e.oid
                                      AND d.deptype OPERATOR(pg_catalog.=) 'e'))) i
         WHERE pg_catalog.cardinality(i.kept) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(i.initprivs)
    LOOP
        IF pg_catalog.cardinality(r.kept) OPERATOR(pg_catalog.=) 0 THEN
            DELETE FROM pg_catalog.pg_init_privs p
             WHERE p.classoid OPERATOR(pg_catalog.=) r.classoid
               AND p.objoid OPERATOR(pg_catalog.=) r.objoid
               AND p.objsubid OPERATOR(pg_catalog.=) r.objsubid;
        ELSE
            UPDATE pg_catalog.pg_init_privs p
               SET initprivs = r.kept
             WHERE p.classoid OPERATOR(pg_catalog.=) r.classoid
               AND p.objoid OPERATOR(pg_catalog.=) r.objoid
               AND p.objsubid OPERATOR(pg_catalog.=) r.objsubid;
        END IF;
        DELETE FROM pg_catalog.pg_shdepend s
         WHERE s.dbid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                               WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND s.classid OPERATOR(pg_catalog.=) r.classoid
           AND s.objid OPERATOR(pg_catalog.=) r.objoid
           AND s.objsubid OPERATOR(pg_catalog.=) r.objsubid
           AND s.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_authid'::pg_catalog.regclass
           AND s.deptype OPERATOR(pg_catalog.=) 'i'
           AND s.refobjid OPERATOR(pg_catalog.<>) ALL (
                   SELECT x.grantee FROM pg_catalog.aclexplode(r.kept) x
                   UNION ALL
                   SELECT x.grantor FROM pg_catalog.aclexplode(r.kept) x);
    END LOOP;
END
$$;

-- last in the script: after the grants of every section above
SELECT idempotency.reset_init_privs();
DROP FUNCTION idempotency.reset_init_privs();
