-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: a bounded number of claims sleep for a key] ---------------------

--
-- A claim given a wait keeps its connection while it sleeps, and the
-- key's holder usually needs one from the same pool or transaction pooler
-- to finish: duplicates that took every connection starved the holder
-- until its lease ran out, and the request ran again.  From 1.8 at most
-- idempotency.max_waiters_per_key claims (superuser-set, default 1) sleep
-- for a key at a time; the others answer in_progress at once, with the
-- time to retry.  In the C edition the library does it for every symbol;
-- this statement restates claim() with the symbol it bound in 1.7, so
-- that the portable edition's body, which changed, lands in an updated
-- installation.
--
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

-- [section: grants an update hands on survive a dump] -----------------------

--
-- Within an extension script every GRANT and REVOKE records the object's
-- whole ACL in pg_init_privs as its initial privileges, and pg_dump leaves
-- those out of a dump: a restore's CREATE EXTENSION gives only a fresh
-- install's.  So a grant an update hands on to a new signature (1.5 to 1.6,
-- move_execute_grants), and any grant of a user's on an object that an
-- update script grants or revokes on, is lost by pg_dump and pg_restore.
-- The C edition set pg_init_privs back by hand (1.2 to 1.3,
-- reset_init_privs), which needs a superuser; through pg_tle the updating
-- role is none, and such grants stayed initial privileges.
--
-- queue_pending_grants() does it with GRANT and REVOKE alone, which the
-- owner may run.  For each object of the extension (routine, relation,
-- type, and its schema) whose initial privileges hold an item of another
-- role than its grantor (a fresh install's hold the owner's own only), it
-- revokes every other role's privileges (CASCADE, for the grants made
-- with a grant option), which records the owner's alone as initial, and
-- queues each of them, as they were, in pending_grants.  A deferred
-- constraint trigger there makes the queued grants again at the commit
-- of the update, outside the script, where they are ordinary grants that
-- pg_dump keeps.  The grants are queued in the order of their chains from
-- the owner, and one made by another role than the owner is made as that
-- role (SET LOCAL ROLE) where the committing role may, else as the
-- committing role (the grantee keeps the privilege and grant option), as
-- move_execute_grants does.  Until that commit the roles concerned lack
-- those privileges (a statement after the update in its own transaction
-- sees them revoked; a session that set the constraints IMMEDIATE before
-- the update has them made within the script, initial again, as before
-- 1.8).  It repairs as well the databases that older
-- updates left with such initial privileges.  It runs last in this
-- script, after every section that grants, and a later update script that
-- grants in its course calls it at its end too.  In the plain script of
-- the portable edition there is no extension and nothing to do.
-- (Column privileges are left as they are: no script grants any.)
--
CREATE TABLE idempotency.pending_grants (
    ord bigint NOT NULL,
    statement text NOT NULL,
    grantor name
);
COMMENT ON TABLE idempotency.pending_grants IS 'grants an update makes again at its commit, so that they are not initial privileges (empty outside an update''s transaction)';
REVOKE ALL ON idempotency.pending_grants FROM PUBLIC;

-- Every queued grant in order, by the first of the trigger's calls; the
-- others find the queue empty.
CREATE FUNCTION idempotency.pending_grants_run()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    item record;
    saved_role text := pg_catalog.current_setting('role');
BEGIN
    FOR item IN SELECT g.statement, g.grantor FROM idempotency.pending_grants g ORDER BY g.ord LOOP
        IF item.grantor IS NULL THEN
            EXECUTE item.statement;
            CONTINUE;
        END IF;
        BEGIN
            PERFORM pg_catalog.set_config('role', item.grantor, true);
            EXECUTE item.statement;
            PERFORM pg_catalog.set_config('role', saved_role, true);
        EXCEPTION WHEN OTHERS THEN
            -- the role could not be set, or may not grant (the block's
            -- SET is undone with it): granted by the committing role
            EXECUTE item.statement;
        END;
    END LOOP;
    DELETE FROM idempotency.pending_grants;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION idempotency.pending_grants_run() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER pending_grants_at_commit
AFTER INSERT ON idempotency.pending_grants
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION idempotency.pending_grants_run();

CREATE FUNCTION idempotency.queue_pending_grants()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    obj record;
    revoked text;
BEGIN
    FOR obj IN
        SELECT t.target, t.owner, t.acl, i.initprivs
          FROM pg_catalog.pg_extension e, pg_catalog.pg_init_privs i,
               LATERAL (SELECT 'ROUTINE ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure, p.proowner, p.proacl
                          FROM pg_catalog.pg_proc p
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                           AND p.oid OPERATOR(pg_catalog.=) i.objoid
                        UNION ALL
                        SELECT CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END
                                 OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass, c.relowner, c.relacl
                          FROM pg_catalog.pg_class c
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                           AND c.oid OPERATOR(pg_catalog.=) i.objoid
                        UNION ALL
                        SELECT 'TYPE ' OPERATOR(pg_catalog.||) y.oid::pg_catalog.regtype, y.typowner, y.typacl
                          FROM pg_catalog.pg_type y
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                           AND y.oid OPERATOR(pg_catalog.=) i.objoid
                        UNION ALL
                        SELECT 'SCHEMA ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(n.nspname), n.nspowner, n.nspacl
                          FROM pg_catalog.pg_namespace n
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                           AND n.oid OPERATOR(pg_catalog.=) i.objoid) AS t(target, owner, acl)
         WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency'
           AND i.privtype OPERATOR(pg_catalog.=) 'e'
           AND i.objsubid OPERATOR(pg_catalog.=) 0
           AND ((i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                 AND i.objoid OPERATOR(pg_catalog.=) e.extnamespace)
                OR EXISTS (SELECT
                             FROM pg_catalog.pg_depend d
                            WHERE d.classid OPERATOR(pg_catalog.=) i.classoid
                              AND d.objid OPERATOR(pg_catalog.=) i.objoid
                              AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                              AND d.refobjid OPERATOR(pg_catalog.=) e.oid
                              AND d.deptype OPERATOR(pg_catalog.=) 'e'))
           AND EXISTS (SELECT FROM pg_catalog.aclexplode(i.initprivs) x
                        WHERE x.grantee OPERATOR(pg_catalog.<>) x.grantor)
    LOOP
        -- the grants as they are now, in the order of their chains
        INSERT INTO idempotency.pending_grants (ord, statement, grantor)
        WITH RECURSIVE acl AS (
            SELECT a.grantee, a.grantor, a.privilege_type, a.is_grantable
              FROM pg_catalog.aclexplode(obj.acl) a
             WHERE a.grantee OPERATOR(pg_catalog.<>) obj.owner
        ), chain AS (
            SELECT acl.grantee, acl.privilege_type, 0 AS depth
              FROM acl WHERE acl.grantor OPERATOR(pg_catalog.=) obj.owner
            UNION
            SELECT acl.grantee, acl.privilege_type, chain.depth OPERATOR(pg_catalog.+) 1
              FROM acl, chain
             WHERE acl.grantor OPERATOR(pg_catalog.=) chain.grantee
               AND acl.privilege_type OPERATOR(pg_catalog.=) chain.privilege_type
               AND chain.depth OPERATOR(pg_catalog.<) 100
        )
        SELECT (SELECT coalesce(pg_catalog.max(g.ord), 0) FROM idempotency.pending_grants g)
                 OPERATOR(pg_catalog.+) pg_catalog.row_number() OVER (
                   ORDER BY (SELECT pg_catalog.min(chain.depth) FROM chain
                              WHERE chain.grantee OPERATOR(pg_catalog.=) acl.grantor
                                AND chain.privilege_type OPERATOR(pg_catalog.=) acl.privilege_type) NULLS FIRST,
                            acl.grantor, acl.grantee, acl.privilege_type),
               pg_catalog.format('GRANT %s ON %s TO %s%s', acl.privilege_type, obj.target,
                   CASE WHEN acl.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE acl.grantee::pg_catalog.regrole::pg_catalog.text END,
                   CASE WHEN acl.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END),
               CASE WHEN acl.grantor OPERATOR(pg_catalog.<>) obj.owner
                    THEN (SELECT r.rolname FROM pg_catalog.pg_roles r
                           WHERE r.oid OPERATOR(pg_catalog.=) acl.grantor) END
          FROM acl;
        -- every other role's privileges revoked (of the roles that still
        -- exist), the grants made with theirs too: the owner's are left,
        -- and recorded as the initial ones
        SELECT pg_catalog.string_agg(DISTINCT
                   CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE x.grantee::pg_catalog.regrole::pg_catalog.text END, ', ')
          INTO revoked
          FROM (SELECT a.grantee FROM pg_catalog.aclexplode(obj.acl) a
                UNION
                SELECT a.grantee FROM pg_catalog.aclexplode(obj.initprivs) a) x
         WHERE x.grantee OPERATOR(pg_catalog.<>) obj.owner
           AND (x.grantee OPERATOR(pg_catalog.=) 0
                OR EXISTS (SELECT FROM pg_catalog.pg_roles r
                            WHERE r.oid OPERATOR(pg_catalog.=) x.grantee));
        IF revoked IS NOT NULL THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s CASCADE', obj.target, revoked);
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION idempotency.queue_pending_grants() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.queue_pending_grants() IS 'in an update script, at its end: the grants of other roles than the owner that pg_init_privs records as initial privileges are revoked, and made again at the commit (pending_grants), so that pg_dump keeps them';

-- last in the script: after the grants of every section above
SELECT idempotency.queue_pending_grants();

-- [section: settings refused alike in both editions] ------------------------

--
-- The C refuses a bad idempotency.* value at SET (22023); the portable
-- edition reads every setting through one reader per type
-- (sql/portable/settings.sql, replaced by this version's script), which
-- refuses it with the same error at the first call that reads it.
-- execute(), whose portable body reads idempotency.max_response_bytes
-- itself (it runs with the caller's rights, who may not call the owner's
-- readers), is stated again for its portable body; in the C edition it
-- binds the symbol it bound before.
--

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
