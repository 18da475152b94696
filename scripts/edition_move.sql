-- scripts/edition_move.sql: moves a database from one edition of
-- idempotency to another in place (doc/operations.md, "Moving between the
-- C and the portable edition").  Run with psql after the old edition was
-- renamed to schema idempotency_moving and the new one installed in
-- schema idempotency, at the same version:
--
--   psql -X -v ON_ERROR_STOP=1 -d app -1 \
--     -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
--     -c 'CREATE EXTENSION idempotency' -f scripts/edition_move.sql
--
-- One DO block, so one transaction even outside -1.  It locks the old
-- tables, checks that both editions are at the same version and that the
-- new tables are empty, and refuses while something outside the old
-- schema depends on it (a view, a foreign key, a default: move those
-- first) or the old schema holds an object that is not the extension's;
-- then it copies every row, sets each sequence where the old one
-- stood, grants on each new object what the old one granted to roles
-- other than its owner, moves the state-machine triggers of the
-- application's tables to the new edition, and drops the old edition
-- (DROP EXTENSION when it is one, then the schema).  Identifiers come from
-- the catalogs and are quoted with format('%I'); nothing is read from
-- input.  Needs the rights of the new edition's owner on the new objects
-- and of the old owner on the old ones (a superuser, or the one role
-- that owns both).
DO $move$
DECLARE
    old_ns  CONSTANT name := 'idempotency_moving';
    new_ns  CONSTANT name := 'idempotency';
    old_version text;
    new_version text;
    r       record;
    cols    text;
    vals    text;
    n_old   bigint;
    n_new   bigint;
    blocked text;
    messages CONSTANT text := pg_catalog.current_setting('client_min_messages');
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF pg_catalog.to_regnamespace(old_ns) IS NULL OR pg_catalog.to_regnamespace(new_ns) IS NULL THEN
        RAISE EXCEPTION 'edition_move: schemas idempotency_moving (the old edition) and idempotency (the new one) must both exist'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- no writer may add rows to the old tables after they are copied
    FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c
              WHERE c.relnamespace = old_ns::regnamespace AND c.relkind = 'r'
              ORDER BY c.relname COLLATE "C"
    LOOP
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', r.rel);
    END LOOP;

    -- the version of each: the extension's, or the plain script's table
    SELECT e.extversion INTO old_version FROM pg_extension e
     WHERE e.extname = 'idempotency' AND e.extnamespace = old_ns::regnamespace;
    IF old_version IS NULL AND pg_catalog.to_regclass('idempotency_moving.plain_version') IS NOT NULL THEN
        SELECT v.version INTO old_version FROM idempotency_moving.plain_version v;
    END IF;
    SELECT e.extversion INTO new_version FROM pg_extension e
     WHERE e.extname = 'idempotency' AND e.extnamespace = new_ns::regnamespace;
    IF new_version IS NULL AND pg_catalog.to_regclass('idempotency.plain_version') IS NOT NULL THEN
        SELECT v.version INTO new_version FROM idempotency.plain_version v;
    END IF;
    IF old_version IS NULL OR new_version IS NULL OR old_version <> new_version THEN
        RAISE EXCEPTION 'edition_move: the old edition is at version %, the new one at %', old_version, new_version
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Update the old edition, or install the new one at the old one''s version.';
    END IF;

    -- what outside the old schema depends on it, but the state-machine triggers
    SELECT string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', '
                      ORDER BY pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid))
      INTO blocked
      FROM pg_depend d
     CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0) ref
     CROSS JOIN LATERAL (
            SELECT CASE d.classid
                   WHEN 'pg_attrdef'::regclass THEN
                        (SELECT c.relnamespace FROM pg_attrdef x JOIN pg_class c ON c.oid = x.adrelid WHERE x.oid = d.objid)
                   WHEN 'pg_rewrite'::regclass THEN
                        (SELECT c.relnamespace FROM pg_rewrite x JOIN pg_class c ON c.oid = x.ev_class WHERE x.oid = d.objid)
                   WHEN 'pg_trigger'::regclass THEN
                        (SELECT c.relnamespace FROM pg_trigger x JOIN pg_class c ON c.oid = x.tgrelid WHERE x.oid = d.objid)
                   WHEN 'pg_constraint'::regclass THEN
                        (SELECT x.connamespace FROM pg_constraint x WHERE x.oid = d.objid)
                   ELSE pg_catalog.to_regnamespace(
                            (pg_catalog.pg_identify_object(d.classid, d.objid, d.objsubid)).schema)
                   END AS ns) dep
     WHERE d.deptype IN ('n', 'a')
       AND ref.schema = old_ns
       AND dep.ns IS DISTINCT FROM old_ns::regnamespace
       AND NOT (d.classid = 'pg_trigger'::regclass AND EXISTS (
                SELECT FROM pg_trigger t
                 WHERE t.oid = d.objid
                   AND t.tgfoid = 'idempotency_moving.state_machine_trigger()'::regprocedure));
    IF blocked IS NOT NULL THEN
        RAISE EXCEPTION 'edition_move: objects outside the old edition depend on it: %', blocked
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Drop them and create them again on the new edition after the move.';
    END IF;

    -- what is in the old schema but not in the new edition (an object of
    -- the application) would go with the old schema: refused too; the
    -- portable edition's own helpers, sequences (a session's last
    -- notification) and version table are not in the C's
    SELECT string_agg(x.what, ', ' ORDER BY x.what) INTO blocked
      FROM (SELECT format('relation %I.%I', old_ns, c.relname) AS what
              FROM pg_class c
             WHERE c.relnamespace = old_ns::regnamespace
               AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c', 'i')
               AND c.relname NOT IN ('plain_version', 'plain_version_pkey')
               AND NOT (c.relkind = 'S' AND c.relname ~ '^portable_')
               AND NOT EXISTS (SELECT FROM pg_class n
                                WHERE n.relnamespace = new_ns::regnamespace AND n.relname = c.relname)
            UNION ALL
            SELECT format('function %s', p.oid::regprocedure)
              FROM pg_proc p
             WHERE p.pronamespace = old_ns::regnamespace AND p.proname !~ '^portable_'
               AND NOT EXISTS (SELECT FROM pg_proc n
                                WHERE n.pronamespace = new_ns::regnamespace AND n.proname = p.proname)
            UNION ALL
            SELECT format('type %I.%I', old_ns, t.typname)
              FROM pg_type t
             WHERE t.typnamespace = old_ns::regnamespace AND t.typrelid = 0 AND t.typelem = 0
               AND NOT EXISTS (SELECT FROM pg_type n
                                WHERE n.typnamespace = new_ns::regnamespace AND n.typname = t.typname)) x;
    IF blocked IS NOT NULL THEN
        RAISE EXCEPTION 'edition_move: the old schema holds objects that are not the extension''s: %', blocked
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Move them to another schema first.';
    END IF;

    -- rows: every table of the new edition but the plain script's version
    -- table, column by column; a column of the old schema's own type
    -- (key_status) goes through its text
    FOR r IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = new_ns::regnamespace AND c.relkind = 'r'
                AND c.relname <> 'plain_version'
              ORDER BY c.relname COLLATE "C"
    LOOP
        IF pg_catalog.to_regclass(format('%I.%I', old_ns, r.relname)) IS NULL THEN
            RAISE EXCEPTION 'edition_move: the old edition has no table %', r.relname
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum),
               string_agg(CASE WHEN t.typnamespace = old_ns::regnamespace
                               THEN format('%I::text::%s', a.attname, pg_catalog.format_type(na.atttypid, na.atttypmod))
                               ELSE format('%I', a.attname) END, ', ' ORDER BY a.attnum)
          INTO cols, vals
          FROM pg_attribute na
          JOIN pg_attribute a
            ON a.attrelid = format('%I.%I', old_ns, r.relname)::regclass
           AND a.attname = na.attname AND a.attnum > 0 AND NOT a.attisdropped
          JOIN pg_type t ON t.oid = a.atttypid
         WHERE na.attrelid = format('%I.%I', new_ns, r.relname)::regclass
           AND na.attnum > 0 AND NOT na.attisdropped AND na.attgenerated = '';
        EXECUTE format('SELECT count(*) FROM %I.%I', new_ns, r.relname) INTO n_new;
        IF n_new > 0 THEN
            RAISE EXCEPTION 'edition_move: table idempotency.% of the new edition is not empty', r.relname
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        EXECUTE format('INSERT INTO %I.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %I.%I',
                       new_ns, r.relname, cols, vals, old_ns, r.relname);
        EXECUTE format('SELECT count(*) FROM %I.%I', old_ns, r.relname) INTO n_old;
        EXECUTE format('SELECT count(*) FROM %I.%I', new_ns, r.relname) INTO n_new;
        IF n_old <> n_new THEN
            RAISE EXCEPTION 'edition_move: % rows of % copied into %', n_new, n_old, r.relname
                USING ERRCODE = 'internal_error';
        END IF;
        RAISE NOTICE 'edition_move: % rows of %', n_new, r.relname;
    END LOOP;

    -- sequences: where the old ones stood (fences, event ids, lease tokens)
    FOR r IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = new_ns::regnamespace AND c.relkind = 'S'
                AND pg_catalog.to_regclass(format('%I.%I', old_ns, c.relname)) IS NOT NULL
    LOOP
        EXECUTE format('SELECT pg_catalog.setval(%L, s.last_value, s.is_called) FROM %I.%I s',
                       format('%I.%I', new_ns, r.relname), old_ns, r.relname);
    END LOOP;

    -- grants: what each old object (the schema, routines by name and
    -- argument types, relations and types by name) gave roles other than
    -- its owner, PUBLIC included, on the new object of the same name
    FOR r IN
        WITH objs AS (
            SELECT 'SCHEMA' AS kind, format('%I', new_ns) AS target, o.nspacl AS acl, o.nspowner AS owner
              FROM pg_namespace o WHERE o.oid = old_ns::regnamespace
            UNION ALL
            SELECT CASE WHEN o.prokind = 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
                   n.oid::regprocedure::text, o.proacl, o.proowner
              FROM pg_proc o
              JOIN pg_proc n ON n.pronamespace = new_ns::regnamespace
                            AND n.proname = o.proname AND n.proargtypes = o.proargtypes
             WHERE o.pronamespace = old_ns::regnamespace
            UNION ALL
            SELECT CASE WHEN o.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                   n.oid::regclass::text, o.relacl, o.relowner
              FROM pg_class o
              JOIN pg_class n ON n.relnamespace = new_ns::regnamespace AND n.relname = o.relname
             WHERE o.relnamespace = old_ns::regnamespace AND o.relkind IN ('r', 'p', 'v', 'm', 'S')
            UNION ALL
            SELECT 'TYPE', n.oid::regtype::text, o.typacl, o.typowner
              FROM pg_type o
              JOIN pg_type n ON n.typnamespace = new_ns::regnamespace AND n.typname = o.typname
             WHERE o.typnamespace = old_ns::regnamespace)
        SELECT objs.kind, objs.target, a.privilege_type, a.is_grantable,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE format('%I', g.rolname) END AS grantee
          FROM objs
         CROSS JOIN LATERAL pg_catalog.aclexplode(objs.acl) a
          LEFT JOIN pg_roles g ON g.oid = a.grantee
         WHERE objs.acl IS NOT NULL AND a.grantee <> objs.owner
         ORDER BY 1, 2, 3, 5
    LOOP
        EXECUTE format('GRANT %s ON %s %s TO %s%s', r.privilege_type, r.kind, r.target, r.grantee,
                       CASE WHEN r.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;

    -- state-machine triggers: dropped from the old edition, enforced by the
    -- new one (its trigger arguments are the column and the machine)
    CREATE TEMPORARY TABLE edition_move_machines ON COMMIT DROP AS
    SELECT t.tgrelid::regclass AS tbl, t.tgname,
           pg_catalog.convert_from(pg_catalog.substr(t.tgargs, 1, pg_catalog.position(t.tgargs, '\x00'::bytea) - 1),
                                   pg_catalog.getdatabaseencoding()) AS col,
           pg_catalog.convert_from(pg_catalog.rtrim(pg_catalog.substr(t.tgargs, pg_catalog.position(t.tgargs, '\x00'::bytea) + 1), '\x00'::bytea),
                                   pg_catalog.getdatabaseencoding()) AS machine
      FROM pg_trigger t
     WHERE t.tgfoid = 'idempotency_moving.state_machine_trigger()'::regprocedure
       AND t.tgparentid = 0 AND t.tgnargs = 2;
    FOR r IN SELECT * FROM edition_move_machines ORDER BY tbl, tgname COLLATE "C" LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tbl);
    END LOOP;
    FOR r IN SELECT * FROM edition_move_machines ORDER BY tbl, tgname COLLATE "C" LOOP
        PERFORM idempotency.enforce_state_machine(r.tbl, r.col::name, r.machine);
        RAISE NOTICE 'edition_move: state machine % enforced on %.%', r.machine, r.tbl, r.col;
    END LOOP;

    -- the old edition
    IF EXISTS (SELECT FROM pg_extension e
                WHERE e.extname = 'idempotency' AND e.extnamespace = old_ns::regnamespace) THEN
        DROP EXTENSION idempotency;
    END IF;
    -- without the cascade's list of every object
    PERFORM pg_catalog.set_config('client_min_messages', 'warning', true);
    DROP SCHEMA idempotency_moving CASCADE;
    PERFORM pg_catalog.set_config('client_min_messages', messages, true);
    RAISE NOTICE 'edition_move: moved to the new edition at version %', new_version;
END
$move$;
