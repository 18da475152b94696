-- Privileges: nothing for PUBLIC, grant_usage() for applications, owner-only
-- administration, and a search_path hijack that changes nothing.
\set VERBOSITY sqlstate
CREATE ROLE regress_nobody;
CREATE ROLE regress_app;

-- no function of the extension is executable by PUBLIC, and no table,
-- view or sequence readable
SELECT p.oid::regprocedure AS public_routine FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND has_function_privilege('regress_nobody', p.oid, 'EXECUTE');
SELECT c.relname AS public_relation FROM pg_class c
 WHERE c.relnamespace = 'idempotency'::regnamespace
   AND c.relkind IN ('r', 'v', 'S', 'p')
   AND (has_table_privilege('regress_nobody', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER'));
SELECT has_schema_privilege('regress_nobody', 'idempotency', 'USAGE') AS public_schema_usage;

-- every SECURITY DEFINER function pins search_path
SELECT p.oid::regprocedure AS definer_without_search_path FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace AND p.prosecdef
   AND NOT coalesce(p.proconfig @> '{"search_path=pg_catalog, pg_temp"}', false);

-- the rows of the tables survive pg_dump
SELECT c AS dumped FROM pg_extension e, unnest(e.extconfig::regclass[]) c
 WHERE e.extname = 'idempotency'
   AND c IN ('idempotency.idempotency_keys'::regclass, 'idempotency.tokens'::regclass,
             'idempotency.fence_seq'::regclass, to_regclass('idempotency.scope_grants'))
 ORDER BY 1::text;

-- these should all fail: PUBLIC can do nothing
SET ROLE regress_nobody;
SELECT idempotency.claim('k');
SELECT idempotency.issue_token();
SELECT * FROM idempotency.stats;
SELECT idempotency.lock_key('k');
RESET ROLE;

SELECT idempotency.grant_usage('regress_app');
SELECT idempotency.grant_usage('regress_app');  -- again: harmless

-- what the application role may call: the allow-list, minus what this
-- version lacks; and none of the owner-only functions
SELECT p.proname, has_function_privilege('regress_app', p.oid, 'EXECUTE') AS app_may_call
  FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND p.proname IN ('claim', 'complete', 'fail', 'checkpoint', 'release', 'lookup',
                     'execute', 'fingerprint', 'issue_token', 'consume_token',
                     'lock_key', 'try_lock', 'purge_expired', 'purge_expired_batch',
                     'schedule_cleanup', 'unschedule_cleanup', 'grant_usage')
 ORDER BY 1;
-- the functions of the other sections of doc/reference.md (true also before they exist)
SELECT coalesce(bool_and(has_function_privilege('regress_app', p.oid, 'EXECUTE')), true)
       AS app_may_call_outbox_inbox_transition
  FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND p.proname IN ('transition', 'enqueue_event', 'claim_events', 'mark_published',
                     'mark_failed', 'emit_event', 'process_once');
SELECT p.oid::regprocedure AS owner_only_but_granted FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND p.proname IN ('define_state_machine', 'enforce_state_machine',
                     'drop_state_machine_enforcement', 'schedule_cleanup',
                     'unschedule_cleanup', 'purge_expired', 'purge_expired_batch',
                     'grant_usage', 'grant_scopes', 'revoke_scopes')
   AND has_function_privilege('regress_app', p.oid, 'EXECUTE');
SELECT c.relkind = 'v' AS is_view,
       bool_or(has_table_privilege('regress_app', c.oid, 'SELECT')) AS app_may_select,
       bool_or(has_table_privilege('regress_app', c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE')) AS app_may_write
  FROM pg_class c
 WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'p')
 GROUP BY 1 ORDER BY 1;
SELECT bool_and(has_table_privilege('regress_app', c.oid, 'SELECT')) AS app_reads_both_views
  FROM pg_class c WHERE c.oid IN ('idempotency.stats'::regclass, 'idempotency.stalled_keys'::regclass);

-- the application role at work
SET ROLE regress_app;
SELECT outcome, attempts, fence AS order_1_fence
  FROM idempotency.claim('order-1', '{"amount":100}') \gset
\echo :outcome :attempts
-- lookup() hides the fence from the application role: only the holder
-- learns it, from its claim
SELECT status, fence IS NULL AS fence_hidden FROM idempotency.lookup('order-1');
SELECT idempotency.complete('order-1', :order_1_fence, '{"id":1}', 201);
SELECT outcome, response_code, response_body FROM idempotency.claim('order-1', '{"amount":100}');
SELECT idempotency.consume_token(idempotency.issue_token()) AS consumed;
SELECT idempotency.try_lock('order-1') AS locked;
SELECT count(*) AS stats_rows FROM idempotency.stats WHERE keys > 0;
SELECT count(*) AS stalled FROM idempotency.stalled_keys;
RESET ROLE;

-- stalled_keys hides the fence as lookup() does: a role that may read the
-- table of keys (the owner, or one granted SELECT on it) sees it, the
-- application role sees NULL
SET ROLE regress_app;
SELECT fence AS stalled_fence FROM idempotency.claim('stalled-1') \gset
RESET ROLE;
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 minute'
 WHERE idempotency_key = 'stalled-1';
SELECT idempotency_key, fence = :stalled_fence AS owner_sees_fence FROM idempotency.stalled_keys;
SET ROLE regress_app;
SELECT idempotency_key, fence IS NULL AS fence_hidden, attempts FROM idempotency.stalled_keys;
RESET ROLE;
GRANT SELECT ON idempotency.idempotency_keys TO regress_app;
SET ROLE regress_app;
SELECT idempotency_key, fence = :stalled_fence AS reader_sees_fence FROM idempotency.stalled_keys;
RESET ROLE;
REVOKE SELECT ON idempotency.idempotency_keys FROM regress_app;
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key = 'stalled-1';
SET ROLE regress_app;

-- these should all fail: no direct access to the tables, no administration
SELECT * FROM idempotency.idempotency_keys;
UPDATE idempotency.idempotency_keys SET response_code = 500;
DELETE FROM idempotency.tokens;
INSERT INTO idempotency.tokens (token, expires_at) VALUES (gen_random_uuid(), now());
SELECT nextval('idempotency.fence_seq');
SELECT * FROM idempotency.purge_expired_batch();
CALL idempotency.purge_expired();
SELECT idempotency.schedule_cleanup();
SELECT idempotency.unschedule_cleanup();
SELECT idempotency.grant_usage('regress_nobody');
SELECT idempotency.grant_scopes('regress_app', ARRAY['a']);
SELECT idempotency.revoke_scopes('regress_app');
RESET ROLE;
-- a role name that needs quoting
CREATE ROLE "regress Odd-Name";
SELECT idempotency.grant_usage('"regress Odd-Name"');
SELECT has_function_privilege('regress Odd-Name', 'idempotency.claim(text,jsonb,text,interval,interval,interval)', 'EXECUTE')
       AS odd_name_may_claim;
DROP OWNED BY "regress Odd-Name";
DROP ROLE "regress Odd-Name";
-- these should all fail
SELECT idempotency.grant_usage(NULL);
SELECT idempotency.grant_usage('regress_no_such_role');

-- search_path hijack: an application role puts a schema of its own first,
-- with an "=" that is always true, a now() in the far future and a
-- nextval() that always returns 1.  Claims, completions and tokens must
-- behave exactly as before.
CREATE SCHEMA regress_evil AUTHORIZATION regress_app;
SET ROLE regress_app;
CREATE FUNCTION regress_evil.always(text, text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.always);
CREATE FUNCTION regress_evil.always_uuid(uuid, uuid) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR regress_evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = regress_evil.always_uuid);
CREATE FUNCTION regress_evil.now() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2999-01-01'::timestamptz$$;
CREATE FUNCTION regress_evil.nextval(regclass) RETURNS bigint
    LANGUAGE sql AS 'SELECT 1::bigint';
SET search_path = regress_evil, pg_catalog, public;
SELECT 'a' = 'b' AS hijacked_equals, now() > '2998-01-01' AS hijacked_now;

SELECT outcome, attempts, fence AS order_2_fence
  FROM idempotency.claim('order-2', '{"amount":7}') \gset
\echo :outcome :attempts
SELECT outcome, attempts FROM idempotency.claim('order-3');
SELECT (idempotency.claim('order-2', '{"amount":7}')).outcome AS second_claim;
SELECT (idempotency.claim('order-2', '{"amount":8}')).outcome AS other_payload;
SELECT :order_2_fence > 1 AS real_fence;
SELECT idempotency.complete('order-2', :order_2_fence, '{"id":2}');
-- order-3 was not touched by completing order-2
SELECT (idempotency.lookup('order-3')).status AS order_3_status;
SELECT outcome, response_body FROM idempotency.claim('order-2', '{"amount":7}');
SELECT outcome, response_body FROM idempotency.claim('order-1', '{"amount":100}');
SELECT idempotency.consume_token('00000000-0000-4000-8000-000000000000') AS unknown_token;
SELECT idempotency.consume_token(idempotency.issue_token()) AS fresh_token;
-- a stale fence still fails
SELECT idempotency.complete('order-3', 1, '{}');
RESET search_path;
RESET ROLE;

SELECT idempotency_key, status, response_body FROM idempotency.idempotency_keys ORDER BY 1;

SET client_min_messages = warning;
DROP SCHEMA regress_evil CASCADE;
RESET client_min_messages;
DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.tokens;
DROP OWNED BY regress_app, regress_nobody;
DROP ROLE regress_app, regress_nobody;
