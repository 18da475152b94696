--
-- security: nothing is usable by PUBLIC; an application role reaches the
-- extension's rows only through the documented functions, one scope cannot
-- use another's keys or tokens, SECURITY DEFINER functions pin search_path,
-- and a hostile search_path cannot hijack the bookkeeping that runs as the
-- extension owner.
--
-- The application role gets its rights from grant_usage() when the build
-- has it, else by hand (USAGE on the schema, EXECUTE on the request-key, token and lock functions).
--
\set VERBOSITY sqlstate
SET client_min_messages = warning;
CREATE ROLE regress_sec_app;
CREATE ROLE regress_sec_nobody;
SELECT idempotency.grant_usage('regress_sec_app');

-- nothing of the extension is granted to PUBLIC (each query: no rows)
SELECT p.oid::regprocedure FROM pg_proc p
WHERE p.pronamespace = 'idempotency'::regnamespace
  AND (p.proacl IS NULL OR EXISTS (SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0))
ORDER BY 1::text COLLATE "C";
SELECT c.oid::regclass FROM pg_class c
WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
  AND (c.relacl IS NULL OR EXISTS (SELECT FROM aclexplode(c.relacl) a WHERE a.grantee = 0))
ORDER BY 1::text COLLATE "C";
SELECT n.nspname FROM pg_namespace n
WHERE n.nspname = 'idempotency'
  AND (n.nspacl IS NULL OR EXISTS (SELECT FROM aclexplode(n.nspacl) a WHERE a.grantee = 0));

-- the application role has no right on any table or sequence of the
-- extension, and cannot define state machines, schedule cleanup or grant
SELECT c.oid::regclass, p.priv FROM pg_class c,
    unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p(priv)
WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p')
  AND has_table_privilege('regress_sec_app', c.oid, p.priv)
ORDER BY 1::text COLLATE "C", 2;
SELECT c.oid::regclass FROM pg_class c
WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p')
  AND has_any_column_privilege('regress_sec_app', c.oid, 'SELECT, INSERT, UPDATE, REFERENCES');
SELECT c.oid::regclass, p.priv FROM pg_class c, unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) p(priv)
WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'S'
  AND has_sequence_privilege('regress_sec_app', c.oid, p.priv)
ORDER BY 1::text COLLATE "C", 2;
SELECT p.oid::regprocedure FROM pg_proc p
WHERE p.pronamespace = 'idempotency'::regnamespace
  AND p.proname IN ('define_state_machine', 'schedule_cleanup', 'unschedule_cleanup', 'grant_usage')
  AND has_function_privilege('regress_sec_app', p.oid, 'EXECUTE')
ORDER BY 1::text COLLATE "C";
-- SECURITY DEFINER functions pin search_path
SELECT p.oid::regprocedure FROM pg_proc p
WHERE p.pronamespace = 'idempotency'::regnamespace AND p.prosecdef
  AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%')
ORDER BY 1::text COLLATE "C";

-- these should all fail: a role without grants, and direct table access
SET ROLE regress_sec_nobody;
SELECT idempotency.claim('k');
SELECT count(*) FROM idempotency.idempotency_keys;
RESET ROLE;
SET ROLE regress_sec_app;
SELECT count(*) FROM idempotency.idempotency_keys;
SELECT count(*) FROM idempotency.tokens;
UPDATE idempotency.idempotency_keys SET response_body = '"stolen"';
DELETE FROM idempotency.tokens;
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, fence, expires_at)
VALUES (idempotency.key_hash('tenant-a', 'sec-k1'), 'tenant-a', 'sec-k1', 1, now() + interval '1 day');
SELECT nextval('idempotency.fence_seq');
SELECT setval('idempotency.fence_seq', 1);
-- execute() runs the statement with the caller's rights: no way around
SELECT (idempotency.execute('sec-x1', NULL, 'SELECT count(*) FROM idempotency.idempotency_keys')).outcome;
SELECT (idempotency.execute('sec-x2', NULL, 'UPDATE idempotency.idempotency_keys SET response_body = ''1''')).outcome;
SELECT (idempotency.execute('sec-x3', NULL, 'SELECT current_user', '{}', 'tenant-a')).response_body;
RESET ROLE;
-- the failed execute() calls stored nothing
SELECT idempotency_key FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'sec-x%' ORDER BY 1;

-- scopes are separate namespaces: tenant b's claim of tenant a's key is a
-- new claim, a's fence does not hold b's key, and each reads its own answer
SET ROLE regress_sec_app;
SELECT (idempotency.claim('sec-k1', '{"amount": 1}', 'tenant-a')).fence AS fence_a \gset
SELECT idempotency.complete('sec-k1', :fence_a, '{"card": "4242"}', 201, 'tenant-a');
SELECT outcome, status, response_body FROM idempotency.claim('sec-k1', '{"amount": 1}', 'tenant-b');
SELECT idempotency.complete('sec-k1', :fence_a, '{"card": "stolen"}', 200, 'tenant-b');
SELECT idempotency.release('sec-k1', :fence_a, 'tenant-b');
SELECT idempotency.checkpoint('sec-k1', :fence_a, 'hijacked', NULL, 'tenant-b');
SELECT outcome, response_code, response_body FROM idempotency.claim('sec-k1', '{"amount": 1}', 'tenant-a');
SELECT (idempotency.lookup('sec-k1', 'tenant-b')).status;
SELECT (idempotency.lookup('sec-k1', 'tenant-a')).response_body;
-- a token is only good in the scope it was issued for
SELECT idempotency.issue_token('tenant-a') AS token_a \gset
SELECT idempotency.consume_token(:'token_a', 'tenant-b') AS consumed_by_b;
SELECT idempotency.consume_token(:'token_a', '') AS consumed_by_default_scope;
SELECT idempotency.consume_token(:'token_a', 'tenant-a') AS consumed_by_a;
SELECT idempotency.consume_token(:'token_a', 'tenant-a') AS consumed_twice;
RESET ROLE;

-- search_path hijacking: the application role plants look-alikes of the
-- operators and functions the bookkeeping uses, ahead of pg_catalog.  Had
-- the bookkeeping, which runs as the extension owner, resolved any of them,
-- regress_evil.calls would name that owner.
CREATE SCHEMA regress_evil AUTHORIZATION regress_sec_app;
SET ROLE regress_sec_app;
CREATE TABLE regress_evil.calls (fn text, by_user text);
CREATE FUNCTION regress_evil.texteq(a text, b text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_evil.calls VALUES ('text =', current_user);
    RETURN pg_catalog.texteq(a, b);
END $$;
CREATE OPERATOR regress_evil.= (FUNCTION = regress_evil.texteq, LEFTARG = text, RIGHTARG = text);
CREATE FUNCTION regress_evil.int8eq(a bigint, b bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_evil.calls VALUES ('bigint =', current_user);
    RETURN pg_catalog.int8eq(a, b);
END $$;
CREATE OPERATOR regress_evil.= (FUNCTION = regress_evil.int8eq, LEFTARG = bigint, RIGHTARG = bigint);
CREATE FUNCTION regress_evil.now() RETURNS timestamptz
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_evil.calls VALUES ('now', current_user);
    RETURN pg_catalog.now();
END $$;
CREATE FUNCTION regress_evil.nextval(regclass) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_evil.calls VALUES ('nextval', current_user);
    RETURN 1;
END $$;
CREATE FUNCTION regress_evil.sha256(bytea) RETURNS bytea
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_evil.calls VALUES ('sha256', current_user);
    RETURN pg_catalog.sha256($1);
END $$;
SET search_path = regress_evil, pg_catalog, public;
-- the trap works on unqualified SQL (one call, by the application)
SELECT 'armed' = 'armed' AS trap_armed;
SELECT (idempotency.claim('sec-h1', '{"a": 1}', 'tenant-a')).fence AS fence_h \gset
SELECT idempotency.checkpoint('sec-h1', :fence_h, 'charged', NULL, 'tenant-a');
SELECT idempotency.complete('sec-h1', :fence_h, '{"ok": true}', 200, 'tenant-a');
SELECT outcome FROM idempotency.claim('sec-h1', '{"a": 1}', 'tenant-a');
SELECT (idempotency.claim('sec-h2', NULL, 'tenant-a')).fence AS fence_h2 \gset
SELECT idempotency.fail('sec-h2', :fence_h2, '{"e": 1}', 503, true, 'tenant-a');
SELECT (idempotency.claim('sec-h2', NULL, 'tenant-a')).fence AS fence_h2 \gset
SELECT idempotency.release('sec-h2', :fence_h2, 'tenant-a');
SELECT (idempotency.lookup('sec-h1', 'tenant-a')).status;
SELECT outcome, response_body FROM idempotency.execute('sec-h3', NULL, 'SELECT 41 + 1', '{}', 'tenant-a');
SELECT idempotency.consume_token(idempotency.issue_token('tenant-a'), 'tenant-a');
SELECT idempotency.lock_key('sec-h1') = idempotency.lock_key('sec-h1') AS stable_lock_key;
SELECT idempotency.try_lock('sec-h1');
SELECT length(idempotency.fingerprint('{"a": 1}'));
-- the other functions of doc/reference.md, when the build has them
DO $$
BEGIN
    IF to_regprocedure('idempotency.process_once(text,text)') IS NOT NULL THEN
        PERFORM idempotency.process_once('tenant-a', 'sec-e1');
    END IF;
    IF to_regprocedure('idempotency.enqueue_event(text,text,text,jsonb,jsonb)') IS NOT NULL THEN
        PERFORM idempotency.enqueue_event('sec-order', 'sec-1', 'created', '{}');
    END IF;
END $$;
RESET search_path;
RESET ROLE;
-- no look-alike ran as the extension owner (only the application's own
-- statement in execute() may use them, as the application itself)
SELECT fn, by_user, count(*) FROM regress_evil.calls GROUP BY 1, 2 ORDER BY 1, 2;

-- clean up
\i test/sql/include/forget_rows.sql
SELECT pg_temp.forget_rows('(tenant-a|tenant-b|sec-)');
DROP SCHEMA regress_evil CASCADE;
DROP OWNED BY regress_sec_app, regress_sec_nobody;
DROP ROLE regress_sec_app, regress_sec_nobody;
