-- Versions and upgrades (doc/operations.md, "Upgrades"): 1.9 is the
-- default, reached from 1.0 by the update scripts in turn.  The library
-- serves a database at 1.2 before it is updated (its key_hash is still a
-- generated column) and refuses key calls in one at 1.0 or 1.1, and the
-- outbox's calls in one at 1.0, until it is updated (55000); with live
-- keys, a holder in flight and grants to an
-- application role a database is updated: rows, fences and grants
-- survive, the keys are found by their hash, the holder completes with
-- its fence, and the catalog equals that of a fresh CREATE EXTENSION.
SELECT name, default_version, installed_version
  FROM pg_available_extensions WHERE name = 'idempotency';
SELECT version, superuser, trusted, relocatable, schema, requires
  FROM pg_available_extension_versions WHERE name = 'idempotency' AND version = '1.0';
SELECT e.extversion, n.nspname, e.extrelocatable
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'idempotency';
-- the default version is 1.0 itself or reached from 1.0 by update scripts
SELECT a.default_version = '1.0' OR EXISTS (
         SELECT 1 FROM pg_extension_update_paths('idempotency') p
          WHERE p.source = '1.0' AND p.target = a.default_version AND p.path IS NOT NULL)
       AS default_reachable_from_1_0
  FROM pg_available_extensions a WHERE a.name = 'idempotency';

-- every object in the schema belongs to the extension, so that an update
-- script can replace it and DROP EXTENSION removes it
SELECT c.relname AS stray_relation FROM pg_class c
 WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'i', 'p')
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
   AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = c.oid);
SELECT p.oid::regprocedure AS stray_routine FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e');

-- install 1.0 in a fresh database, with work in flight, and update it
CREATE DATABASE regress_upgrade;
\c regress_upgrade
-- A summary of everything the extension owns in this database: its
-- functions with signatures, labels, results, comments and grants; its
-- relations with their columns, defaults, constraints, indexes and
-- grants; its types; its initial privileges (pg_init_privs, what pg_dump
-- leaves out).  Equal summaries mean equal catalogs.
SET check_function_bodies = off;
CREATE FUNCTION regress_catalog_summary() RETURNS text
LANGUAGE sql AS $$
  SELECT string_agg(line, E'\n' ORDER BY line COLLATE "C") FROM (
    SELECT format('routine %s %s %s %s %s %s %s', p.oid::regprocedure,
                  pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                  p.provolatile, p.proparallel, p.proisstrict, p.prosecdef)
           || format(' config=%s acl=%s comment=%s', p.proconfig, p.proacl,
                     obj_description(p.oid, 'pg_proc')) AS line
      FROM pg_proc p WHERE p.pronamespace = 'idempotency'::regnamespace
    UNION ALL
    SELECT format('relation %s %s acl=%s options=%s comment=%s', c.relname, c.relkind, c.relacl,
                  c.reloptions, obj_description(c.oid, 'pg_class'))
      FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace
    UNION ALL
    SELECT format('column %s.%s %s notnull=%s default=%s identity=%s comment=%s',
                  c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid), a.attidentity,
                  col_description(c.oid, a.attnum))
      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
      LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
     WHERE c.relnamespace = 'idempotency'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid))
      FROM pg_constraint WHERE connamespace = 'idempotency'::regnamespace
    UNION ALL
    SELECT format('index %s', pg_get_indexdef(i.indexrelid))
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE c.relnamespace = 'idempotency'::regnamespace
    UNION ALL
    SELECT format('type %s %s', t.typname, t.typtype)
      FROM pg_type t WHERE t.typnamespace = 'idempotency'::regnamespace
    UNION ALL
    SELECT format('view %s %s', c.relname, pg_get_viewdef(c.oid))
      FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'v'
    UNION ALL
    SELECT format('initial privileges %s %s', pg_describe_object(classoid, objoid, objsubid), initprivs)
      FROM pg_init_privs WHERE privtype = 'e'
    UNION ALL
    SELECT format('config %s %s', c.relname, x.extcondition)
      FROM pg_extension x, unnest(x.extconfig, x.extcondition) AS u(cfg, extcondition)
      JOIN pg_class c ON c.oid = u.cfg
     WHERE x.extname = 'idempotency'
  ) lines
$$;
RESET check_function_bodies;
CREATE ROLE regress_upgrade_app;
CREATE EXTENSION idempotency VERSION '1.0';
SELECT idempotency.grant_usage('regress_upgrade_app');
-- an application role whose name needs quoting: the update to 1.1 copies
-- its grants to the new signatures (it quoted the quoted name again, and
-- failed: role ""regress_upgrade-svc"" does not exist)
CREATE ROLE "regress_upgrade-svc";
SELECT idempotency.grant_usage('"regress_upgrade-svc"');
-- the library serves the layout of its version and of the one before
-- (1.2): a database two versions behind is told to update first, by the
-- key calls and by the outbox's (not 42P01 or 42703)
\set VERBOSITY sqlstate
SELECT outcome FROM idempotency.claim('done-before', '{"n": 1}');
SELECT idempotency.lookup('done-before');
SELECT id FROM idempotency.claim_events(10, '1 minute');
SELECT idempotency.mark_published('{1}');
SELECT idempotency.mark_failed('{1}', 'refused');
\set VERBOSITY default
SELECT idempotency.claim_events(10, '1 minute');
-- a key stored at 1.0 (as the 1.0 library wrote it) survives the updates
INSERT INTO idempotency.idempotency_keys (scope, idempotency_key, request_hash, status,
       fence, attempts, recovery_point, response_code, response_body, expires_at)
VALUES ('', 'done-before', idempotency.fingerprint('{"n": 1}'), 'completed',
        nextval('idempotency.fence_seq'), 1, 'started', 201, '{"paid": 1}', now() + interval '1 day');
SET client_min_messages = warning;
ALTER EXTENSION idempotency UPDATE TO '1.2';
RESET client_min_messages;
-- at 1.2 (key_hash generated), with work in flight across the update
SELECT outcome, response_code FROM idempotency.claim('done-before', '{"n": 1}');
SELECT outcome FROM idempotency.claim('held-across', '{"n": 2}');
SELECT fence AS held_fence FROM idempotency.idempotency_keys
 WHERE idempotency_key = 'held-across' \gset
-- every holder call and lookup of the 1.2 layout
SELECT fence AS f FROM idempotency.claim('released-before') \gset
SELECT idempotency.checkpoint('released-before', :f, 'charged');
SELECT idempotency.release('released-before', :f);
SELECT idempotency.lookup('released-before') IS NULL AS released,
       (idempotency.lookup('done-before')).response_code;
SELECT fence AS f FROM idempotency.claim('failed-before') \gset
SELECT idempotency.fail('failed-before', :f, '{"declined": true}', 402, retryable => false);
SELECT outcome, response_code FROM idempotency.claim('failed-before');
-- at 1.5 the SQL is still bound to the older symbols, which behave as
-- they did: no answer expiry (idempotency.default_response_ttl does not
-- apply), and a purge that reports the relations only
SET client_min_messages = warning;
ALTER EXTENSION idempotency UPDATE TO '1.5';
RESET client_min_messages;
SET idempotency.default_response_ttl = '1 minute';
SELECT fence AS f FROM idempotency.claim('done-at-1.5', '{"n": 3}') \gset
SELECT idempotency.complete('done-at-1.5', :f, '{"at": "1.5"}');
SELECT outcome FROM idempotency.execute('executed-at-1.5', NULL, 'SELECT 1');
RESET idempotency.default_response_ttl;
SELECT relation, deleted FROM idempotency.purge_expired_batch();
-- a role granted EXECUTE on the holder calls by hand, before the update
-- (its name needs quoting)
CREATE ROLE "regress_upgrade direct";
GRANT USAGE ON SCHEMA idempotency TO "regress_upgrade direct";
GRANT EXECUTE ON FUNCTION idempotency.claim(text, jsonb, text, interval, interval),
      idempotency.complete(text, bigint, jsonb, integer, text, interval),
      idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval),
      idempotency.execute(text, jsonb, text, text[], text, interval)
   TO "regress_upgrade direct";
-- a role granted EXECUTE on complete with the grant option, which granted
-- it on: the update hands both grants on as they were, grant option and
-- grantor, so that the role may still revoke what it granted
CREATE ROLE regress_upgrade_mon;
CREATE ROLE regress_upgrade_relay;
GRANT USAGE ON SCHEMA idempotency TO regress_upgrade_mon, regress_upgrade_relay;
GRANT EXECUTE ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval)
   TO regress_upgrade_mon WITH GRANT OPTION;
SET ROLE regress_upgrade_mon;
GRANT EXECUTE ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval)
   TO regress_upgrade_relay;
RESET ROLE;
SELECT pg_catalog.nextval('idempotency.fence_seq') AS fence_before \gset
SET client_min_messages = warning;
ALTER EXTENSION idempotency UPDATE;
RESET client_min_messages;
SELECT e.extversion = a.default_version AS at_default_version
  FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
 WHERE e.extname = 'idempotency';
-- the rows survive the update, the holder finishes with its fence, and
-- the application role keeps every grant, on the new signatures too
SET ROLE regress_upgrade_app;
SELECT outcome, response_code, response_body FROM idempotency.claim('done-before', '{"n": 1}');
SELECT outcome, response_code FROM idempotency.claim('failed-before');
SELECT idempotency.complete('held-across', :held_fence, '{"paid": 2}', ttl => '1 hour');
SELECT outcome, response_body FROM idempotency.claim('held-across', '{"n": 2}');
SELECT outcome, fence > :fence_before AS fences_grow FROM idempotency.claim('after-update');
SELECT outcome, response_body FROM idempotency.claim('done-at-1.5', '{"n": 3}');
RESET ROLE;
-- the answers stored at 1.5 live as long as their keys
SELECT idempotency_key, response_expires_at FROM idempotency.idempotency_keys
 WHERE idempotency_key LIKE '%-at-1.5' ORDER BY idempotency_key COLLATE "C";
-- the role granted by hand holds EXECUTE on the new signatures, and the
-- initial privileges of those hold only the owner's entry, so that
-- pg_dump keeps the role's grant
SELECT p.oid::regprocedure AS routine,
       has_function_privilege('regress_upgrade direct', p.oid, 'EXECUTE') AS direct_may_run,
       (SELECT array_agg(a.grantee = p.proowner AND a.grantor = p.proowner)
          FROM pg_init_privs i, aclexplode(i.initprivs) a
         WHERE i.classoid = 'pg_proc'::regclass AND i.objoid = p.oid) AS initial_owner_only
  FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace AND p.proname IN ('claim', 'complete', 'fail', 'execute')
 ORDER BY p.oid::regprocedure::text COLLATE "C";
SELECT p.oid::regprocedure AS routine_app_lacks FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND p.proname IN ('claim', 'complete', 'fail', 'checkpoint', 'release', 'lookup', 'execute',
                     'mark_published', 'mark_failed', 'claim_events', 'enqueue_event')
   AND NOT has_function_privilege('regress_upgrade_app', p.oid, 'EXECUTE');
SELECT p.oid::regprocedure AS routine_svc_lacks FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND p.proname IN ('claim', 'complete', 'fail', 'checkpoint', 'release', 'lookup', 'execute',
                     'mark_published', 'mark_failed', 'claim_events', 'enqueue_event')
   AND NOT has_function_privilege('regress_upgrade-svc', p.oid, 'EXECUTE');
-- complete's grants to the role with the grant option and by it
SELECT a.grantee::regrole AS grantee,
       CASE WHEN a.grantor = p.proowner THEN 'owner' ELSE a.grantor::regrole::text END AS grantor,
       a.is_grantable
  FROM pg_proc p, aclexplode(p.proacl) a
 WHERE p.oid = 'idempotency.complete(text,bigint,jsonb,integer,text,interval,interval)'::regprocedure
   AND a.grantee IN ('regress_upgrade_mon'::regrole, 'regress_upgrade_relay'::regrole)
 ORDER BY a.grantee::regrole::text COLLATE "C";
SET ROLE regress_upgrade_mon;
REVOKE EXECUTE ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval, interval)
  FROM regress_upgrade_relay;
RESET ROLE;
SELECT has_function_privilege('regress_upgrade_relay',
         'idempotency.complete(text,bigint,jsonb,integer,text,interval,interval)', 'EXECUTE')
       AS relay_may_complete_after_revoke;
-- the keys of 1.0 and 1.2 have their hash, and the primary key is on it
SELECT idempotency_key, key_hash = idempotency.key_hash(scope, idempotency_key) AS hashed
  FROM idempotency.idempotency_keys ORDER BY idempotency_key;
SELECT pg_get_constraintdef(oid) FROM pg_constraint
 WHERE conrelid = 'idempotency.idempotency_keys'::regclass AND contype = 'p';
SELECT regress_catalog_summary() AS updated_catalog \gset
SELECT :'updated_catalog' LIKE '%routine idempotency.complete(text,bigint,jsonb,integer,text,interval,interval)%'
       AND :'updated_catalog' LIKE '%column idempotency_keys.fence bigint%'
       AND :'updated_catalog' LIKE '%column idempotency_keys.response_expires_at timestamp with time zone%'
       AND :'updated_catalog' LIKE '%index CREATE INDEX idempotency_keys_response_expires_at_idx %WHERE (response_expires_at > ''-infinity''::timestamp with time zone)%'
       AND :'updated_catalog' LIKE '%initial privileges function idempotency.complete(text,bigint,jsonb,integer,text,interval,interval) {%=X/%}%'
       AND :'updated_catalog' LIKE '%routine idempotency.execute(text,jsonb,text,text[],text,interval,interval,interval) %regress_upgrade direct\\"=X/%'
       AND :'updated_catalog' LIKE '%routine idempotency.claim(text,jsonb,text,interval,interval,interval) %regress_upgrade direct\\"=X/%'
       AND :'updated_catalog' NOT LIKE '%complete(text,bigint,jsonb,integer,text) %'
       AND :'updated_catalog' NOT LIKE '%complete(text,bigint,jsonb,integer,text,interval) %'
       AND :'updated_catalog' ~ 'relation idempotency_keys r acl=[^\n]* options=\{fillfactor=80,autovacuum_vacuum_scale_factor=0\.02,autovacuum_analyze_scale_factor=0\.05\} '
       AND :'updated_catalog' ~ 'relation processed_events r acl=[^\n]* options=\{autovacuum_vacuum_scale_factor=0\.02,autovacuum_analyze_scale_factor=0\.05\} '
       AS summary_covers_the_catalog;
-- the catalog of a fresh install is the same
DROP EXTENSION idempotency;
CREATE EXTENSION idempotency;
SELECT idempotency.grant_usage('regress_upgrade_app');
SELECT idempotency.grant_usage('"regress_upgrade-svc"');
GRANT USAGE ON SCHEMA idempotency TO "regress_upgrade direct";
GRANT EXECUTE ON FUNCTION idempotency.claim(text, jsonb, text, interval, interval, interval),
      idempotency.complete(text, bigint, jsonb, integer, text, interval, interval),
      idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval, interval),
      idempotency.execute(text, jsonb, text, text[], text, interval, interval, interval)
   TO "regress_upgrade direct";
GRANT USAGE ON SCHEMA idempotency TO regress_upgrade_mon, regress_upgrade_relay;
GRANT EXECUTE ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval, interval)
   TO regress_upgrade_mon WITH GRANT OPTION;
SELECT regress_catalog_summary() = :'updated_catalog' AS fresh_equals_updated;
DROP EXTENSION idempotency;
SELECT count(*) AS tables_left FROM pg_class
 WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'idempotency');
\c contrib_regression
DROP DATABASE regress_upgrade;
DROP ROLE regress_upgrade_app;
DROP ROLE "regress_upgrade direct";
DROP ROLE "regress_upgrade-svc";
DROP ROLE regress_upgrade_mon;
DROP ROLE regress_upgrade_relay;
