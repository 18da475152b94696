--
-- hostile_input: every function of the schema with NULL in each argument
-- position; empty, oversized, non-ASCII and control-character keys and
-- scopes; huge and deeply nested JSON; zero, negative and enormous
-- intervals; injection attempts in identifier and text arguments.  Each
-- must raise doc/reference.md's SQLSTATE (never XX000, never a crash, never a silent
-- NULL) and a failed call must leave every table as it was.
--
-- The NULL probe reads pg_proc, so functions added later are covered
-- without editing this file.  A function whose argument has a NULL meaning
-- in doc/reference.md is listed in null_allowed below; a new function with such an
-- argument must be added there.  Cases for functions that are not in every
-- build (state machines, outbox, inbox, cleanup, privileges) run only when
-- the function exists and print only their violations, so this file's
-- output is the same with or without them.
--
SET client_min_messages = warning;
CREATE TABLE regress_hostile_orders (id text PRIMARY KEY, state text NOT NULL);
INSERT INTO regress_hostile_orders VALUES ('o1', 'PENDING');
CREATE ROLE regress_hostile_role;

-- The first column of the statement's first row as text ('ok' for none),
-- or the SQLSTATE it raised.
CREATE FUNCTION regress_try(sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE sql INTO result;
    RETURN coalesce(result, 'ok');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- md5 of the rows of every table of the extension and of the canary table.
CREATE FUNCTION regress_digest() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    t regclass;
    rows text;
    all_rows text := '';
BEGIN
    FOR t IN SELECT c.oid FROM pg_class c
             WHERE (c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p'))
                OR c.oid = 'regress_hostile_orders'::regclass
             ORDER BY c.relname COLLATE "C"
    LOOP
        EXECUTE format('SELECT string_agg(x::text, %L ORDER BY x::text COLLATE "C") FROM %s x', E'\n', t)
            INTO rows;
        all_rows := all_rows || t::text || ':' || coalesce(rows, '') || E'\n';
    END LOOP;
    RETURN md5(all_rows);
END $$;

-- A valid argument of the given type and name, as an SQL literal; NULL
-- when the probe has no sample for the type.
CREATE FUNCTION regress_sample(typ regtype, argname text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT CASE typ
    WHEN 'text'::regtype THEN CASE
        WHEN argname = 'scope' THEN quote_literal('regress-hostile')
        WHEN argname = 'statement' THEN quote_literal('SELECT 1')
        WHEN argname = 'schedule' THEN quote_literal('*/5 * * * *')
        WHEN argname = 'from_state' THEN quote_literal('PENDING')
        WHEN argname = 'to_state' THEN quote_literal('PAID')
        WHEN argname = 'key' THEN quote_literal('regress-hostile-o1')
        ELSE quote_literal('regress-hostile') END
    WHEN 'jsonb'::regtype THEN CASE
        WHEN argname = 'transitions' THEN quote_literal('{"PENDING": ["PAID"]}') || '::jsonb'
        ELSE quote_literal('{"a": 1}') || '::jsonb' END
    WHEN 'interval'::regtype THEN CASE
        WHEN argname = 'wait' THEN quote_literal('10 milliseconds') || '::interval'
        ELSE quote_literal('1 hour') || '::interval' END
    WHEN 'integer'::regtype THEN CASE
        WHEN argname = 'response_code' THEN '200' ELSE '1' END
    WHEN 'bigint'::regtype THEN '1::bigint'
    WHEN 'boolean'::regtype THEN 'true'
    WHEN 'uuid'::regtype THEN quote_literal('00000000-0000-4000-8000-000000000000') || '::uuid'
    WHEN 'regclass'::regtype THEN quote_literal('regress_hostile_orders') || '::regclass'
    WHEN 'name'::regtype THEN CASE
        WHEN argname = 'key_column' THEN '''id''::name' ELSE '''state''::name' END
    WHEN 'text[]'::regtype THEN '''{}''::text[]'
    WHEN 'jsonb[]'::regtype THEN '''{}''::jsonb[]'
    WHEN 'bigint[]'::regtype THEN '''{1}''::bigint[]'
    WHEN 'regrole'::regtype THEN quote_literal('regress_hostile_role') || '::regrole'
    END
$$;

-- Arguments whose NULL has a meaning in doc/reference.md (a default, "not
-- compared", "keeps it", "none").
CREATE TABLE null_allowed (fn text, argname text);
INSERT INTO null_allowed VALUES
    ('claim', 'request'), ('claim', 'ttl'), ('claim', 'lease'), ('claim', 'wait'),
    ('complete', 'ttl'), ('complete', 'response_ttl'),
    ('fail', 'error'), ('fail', 'ttl'), ('fail', 'response_ttl'),
    ('checkpoint', 'recovery_point'), ('checkpoint', 'lease'),
    ('execute', 'request'), ('execute', 'params'), ('execute', 'ttl'),
    ('execute', 'response_ttl'), ('execute', 'wait'),
    ('issue_token', 'ttl'),
    ('enqueue_event', 'headers'), ('emit_event', 'headers'),
    ('mark_published', 'lease_token'), ('mark_failed', 'lease_token'),
    ('enqueue_events', 'headers'),
    ('transition', 'set_columns'), ('metrics_reset', 'scope'), ('revoke_scopes', 'scopes'),
    ('release_event_leases', 'relay_role'), ('release_event_leases', 'longer_than');

-- One probe per function and argument position: that argument NULL, the
-- others valid.
CREATE TABLE null_probe AS
SELECT p.oid::regprocedure AS fn, p.proname::text AS proname, i AS argno,
       coalesce(p.proargnames[i], '$' || i) AS argname,
       EXISTS (SELECT FROM null_allowed a
               WHERE a.fn = p.proname AND a.argname = p.proargnames[i]) AS null_has_meaning,
       CASE WHEN p.prokind = 'p' THEN 'CALL ' ELSE 'SELECT (' END ||
       'idempotency.' || quote_ident(p.proname) || '(' ||
       (SELECT string_agg(CASE WHEN j = i THEN 'NULL::' || format_type(p.proargtypes[j - 1], NULL)
                               ELSE regress_sample(p.proargtypes[j - 1], p.proargnames[j]) END,
                          ', ' ORDER BY j)
        FROM generate_series(1, p.pronargs) j) ||
       CASE WHEN p.prokind = 'p' THEN ')' ELSE ')) IS NULL' END AS sql,
       (SELECT bool_and(regress_sample(p.proargtypes[j - 1], p.proargnames[j]) IS NOT NULL)
        FROM generate_series(1, p.pronargs) j) AS has_samples
FROM pg_proc p, generate_series(1, p.pronargs) i
WHERE p.pronamespace = 'idempotency'::regnamespace
  AND p.prokind IN ('f', 'p')
  AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype);

-- every function of the extension has a sample for each argument type
SELECT DISTINCT fn FROM null_probe WHERE NOT has_samples ORDER BY 1;
-- the probe covers at least the request-key, token and lock functions
SELECT count(DISTINCT fn) >= 12 AS functions_probed, count(*) >= 30 AS positions_probed
FROM null_probe;

SELECT regress_digest() AS digest_before \gset
ALTER TABLE null_probe ADD COLUMN result text;
UPDATE null_probe SET result = regress_try(sql) WHERE NOT null_has_meaning;
-- NULL where it has no meaning: 22023 every time (a "t" result would be a
-- silent NULL, "f" a value; both are wrong)
SELECT fn, argname, result FROM null_probe
WHERE NOT null_has_meaning AND result IS DISTINCT FROM '22023'
ORDER BY fn::text COLLATE "C", argno;
-- and nothing changed
SELECT regress_digest() = :'digest_before' AS unchanged_after_null_probe;

-- NULL where it has a meaning: never an internal error
UPDATE null_probe SET result = regress_try(sql) WHERE null_has_meaning;
SELECT fn, argname, result FROM null_probe
WHERE null_has_meaning AND result IN ('XX000', 'XX001', 'XX002')
ORDER BY fn::text COLLATE "C", argno;
SELECT count(*) >= 10 AS null_meanings_probed FROM null_probe WHERE null_has_meaning;

--
-- Bad values.  "fn" names the function a case needs; NULL for the
-- request-key, token and lock functions, which every build has.
--
CREATE TABLE hostile_case (id serial, fn text, sql text, expect text, result text);
INSERT INTO hostile_case (fn, sql, expect) VALUES
-- keys: 1 to 255 characters, counted in characters
(NULL, $$SELECT (idempotency.claim('', NULL, 'regress-hostile')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim(repeat('k', 256), NULL, 'regress-hostile')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim(repeat('é', 256), NULL, 'regress-hostile')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim(repeat('€', 255), NULL, 'regress-hostile')).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.claim(repeat('k', 255), NULL, 'regress-hostile')).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.claim(repeat('k', 100000), NULL, 'regress-hostile')).outcome$$, '22023'),
-- scopes: 0 to 255 characters
(NULL, $$SELECT (idempotency.claim('regress-hostile-s1', NULL, repeat('s', 256))).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-s1', NULL, 'regress-hostile' || repeat('ß', 240))).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-s1', NULL, 'regress-hostile' || repeat('ß', 241))).outcome$$, '22023'),
(NULL, $$SELECT idempotency.lookup('regress-hostile-s1', repeat('s', 256)) IS NULL$$, '22023'),
(NULL, $$SELECT idempotency.lookup('', 'regress-hostile') IS NULL$$, '22023'),
-- control characters, non-ASCII, quotes and SQL text are plain data
(NULL, $$SELECT (idempotency.claim(E'k\x01\x02\t\n\r\x7f', NULL, 'regress-hostile')).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.claim(E'k\x01\x02\t\n\r\x7f', NULL, 'regress-hostile')).outcome$$, 'in_progress'),
(NULL, $$SELECT (idempotency.claim('🔑 ключ 鍵 ‮', NULL, 'regress-hostile 🌍')).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.lookup('🔑 ключ 鍵 ‮', 'regress-hostile 🌍')).idempotency_key$$, '🔑 ключ 鍵 ‮'),
(NULL, $$SELECT (idempotency.claim($k$x'); DROP TABLE regress_hostile_orders; --$k$, NULL, $s$regress-hostile' OR '1'='1$s$)).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.claim('%', NULL, 'regress-hostile')).outcome$$, 'claimed'),
(NULL, $$SELECT idempotency.lookup('%', '%') IS NULL$$, 'true'),
(NULL, $$SELECT idempotency.lookup('regress-hostile-s1', '_egress-hostile') IS NULL$$, 'true'),
-- huge and deeply nested JSON
(NULL, $$SELECT length(idempotency.fingerprint((SELECT jsonb_agg(repeat('x', 1000)) FROM generate_series(1, 5000))))$$, '32'),
(NULL, $$SELECT length(idempotency.fingerprint((repeat('[', 5000) || repeat(']', 5000))::jsonb))$$, '32'),
(NULL, $$SELECT length(idempotency.fingerprint((repeat('{"a":', 5000) || '1' || repeat('}', 5000))::jsonb))$$, '32'),
(NULL, $$SELECT length(idempotency.fingerprint((repeat('[', 1000000) || repeat(']', 1000000))::jsonb))$$, '54001'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-big', (SELECT jsonb_agg(repeat('x', 1000)) FROM generate_series(1, 5000)), 'regress-hostile')).outcome$$, 'claimed'),
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-big', 1, (SELECT jsonb_agg(repeat('x', 1000)) FROM generate_series(1, 2000)), 200, 'regress-hostile')$$, '54000'),
(NULL, $$SELECT 'ok' FROM idempotency.fail('regress-hostile-big', 1, (SELECT jsonb_agg(repeat('x', 1000)) FROM generate_series(1, 2000)), 500, true, 'regress-hostile')$$, '54000'),
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-big', (SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'regress-hostile-big'), (repeat('[', 5000) || repeat(']', 5000))::jsonb, 200, 'regress-hostile')$$, 'ok'),
(NULL, $$SELECT jsonb_typeof((idempotency.claim('regress-hostile-big', (SELECT jsonb_agg(repeat('x', 1000)) FROM generate_series(1, 5000)), 'regress-hostile')).response_body)$$, 'array'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-big', '{"other": 1}', 'regress-hostile')).outcome$$, 'mismatch'),
-- intervals: positive, at most 100 years, ttl not shorter than the lease
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '0')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '-1 second')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '1 mon -30 days')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '101 years')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '178000000 years')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '1 second')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '1 hour', '0')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '1 hour', '-1 hour')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '1 hour', '2 hours')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', NULL, '100 years')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i', NULL, 'regress-hostile', '30 seconds', '30 seconds')).outcome$$, 'claimed'),
(NULL, $$SELECT (idempotency.claim('regress-hostile-i2', NULL, 'regress-hostile', '100 years', '100 years')).outcome$$, 'claimed'),
(NULL, $$SELECT 'ok' FROM idempotency.checkpoint('regress-hostile-i2', 1, 'p', '0', 'regress-hostile')$$, '22023'),
(NULL, $$SELECT 'ok' FROM idempotency.checkpoint('regress-hostile-i2', 1, 'p', '-5 minutes', 'regress-hostile')$$, '22023'),
(NULL, $$SELECT 'ok' FROM idempotency.checkpoint('regress-hostile-i2', 1, '', NULL, 'regress-hostile')$$, '22023'),
(NULL, $$SELECT idempotency.issue_token('regress-hostile', '0') IS NULL$$, '22023'),
(NULL, $$SELECT idempotency.issue_token('regress-hostile', '-1 day') IS NULL$$, '22023'),
(NULL, $$SELECT idempotency.issue_token('regress-hostile', '1000 years') IS NULL$$, '22023'),
(NULL, $$SELECT idempotency.issue_token(repeat('s', 256)) IS NULL$$, '22023'),
(NULL, $$SELECT idempotency.consume_token(gen_random_uuid(), repeat('s', 256))$$, '22023'),
(NULL, $$SELECT idempotency.consume_token(gen_random_uuid(), 'regress-hostile')$$, 'false'),
-- fences that never held the key, response codes out of range
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-i2', -1, '{}', 200, 'regress-hostile')$$, '55000'),
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-i2', 0, '{}', 200, 'regress-hostile')$$, '55000'),
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-i2', 9223372036854775807, '{}', 200, 'regress-hostile')$$, '55000'),
(NULL, $$SELECT 'ok' FROM idempotency.release('regress-hostile-i2', -9223372036854775808, 'regress-hostile')$$, '55000'),
(NULL, $$SELECT 'ok' FROM idempotency.checkpoint('regress-hostile-i2', 0, 'p', NULL, 'regress-hostile')$$, '55000'),
(NULL, $$SELECT 'ok' FROM idempotency.fail('regress-hostile-nokey', 1, NULL, 500, true, 'regress-hostile')$$, '55000'),
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-i2', 1, '{}', 0, 'regress-hostile')$$, '22023'),
(NULL, $$SELECT 'ok' FROM idempotency.complete('regress-hostile-i2', 1, '{}', 600, 'regress-hostile')$$, '22023'),
(NULL, $$SELECT 'ok' FROM idempotency.fail('regress-hostile-i2', 1, NULL, -500, true, 'regress-hostile')$$, '22023'),
-- execute(): empty, several or hostile statements; parameters are data
(NULL, $$SELECT (idempotency.execute('regress-hostile-x', NULL, '', '{}', 'regress-hostile')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.execute('regress-hostile-x', NULL, '  ;  ; ', '{}', 'regress-hostile')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.execute('regress-hostile-x', NULL, 'SELECT 1; DROP TABLE regress_hostile_orders', '{}', 'regress-hostile')).outcome$$, '42601'),
(NULL, $$SELECT (idempotency.execute('regress-hostile-x', NULL, 'SELECT $1', '{{a},{b}}', 'regress-hostile')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.execute('regress-hostile-x', NULL, 'SELECT 1', '{}', 'regress-hostile', '1 second')).outcome$$, '22023'),
(NULL, $$SELECT (idempotency.execute('regress-hostile-x', NULL, 'SELECT count(*) FROM regress_hostile_orders WHERE id = $1', ARRAY['x'' OR ''1''=''1'], 'regress-hostile')).response_body::text$$, '0'),
(NULL, $$SELECT (idempotency.execute('regress-hostile-x2', NULL, 'SELECT $1 IS NULL', ARRAY[NULL], 'regress-hostile')).response_body::text$$, 'true'),
-- execute() inside execute(), while the outer statements fill the
-- statement cache past its size, so that it is emptied mid-statement
(NULL, $$SELECT count(*) FROM generate_series(1, 1100) g, idempotency.execute('regress-hostile-nest' || g, NULL, 'SELECT (idempotency.execute(''regress-hostile-inner'' || $1, NULL, ''SELECT 42'', ''{}'', ''regress-hostile'')).response_body, ' || g, ARRAY[g::text], 'regress-hostile') e WHERE e.response_body = '42'$$, '1100'),
-- lock helpers
(NULL, $$SELECT idempotency.lock_key('')$$, '22023'),
(NULL, $$SELECT idempotency.lock_key(repeat('k', 256))$$, '22023'),
(NULL, $$SELECT idempotency.lock_key(repeat('€', 255)) IS NOT NULL$$, 'true'),
(NULL, $$SELECT idempotency.try_lock('')$$, '22023'),
(NULL, $$SELECT idempotency.try_lock(E'\x01\x02 🔒')$$, 'true'),
-- state machines: identifiers are never spliced unquoted
('idempotency.define_state_machine(text,jsonb)', $$SELECT 'ok' FROM idempotency.define_state_machine('regress_hostile_m', '[1, 2]')$$, '22023'),
('idempotency.define_state_machine(text,jsonb)', $$SELECT 'ok' FROM idempotency.define_state_machine('regress_hostile_m', '"PENDING"')$$, '22023'),
('idempotency.enforce_state_machine(regclass,name,text)', $$SELECT 'ok' FROM idempotency.enforce_state_machine('regress_hostile_orders', 'state; DROP TABLE regress_hostile_orders; --', 'regress_hostile_m')$$, '42703'),
('idempotency.enforce_state_machine(regclass,name,text)', $$SELECT 'ok' FROM idempotency.enforce_state_machine('regress_hostile_orders', 'state" = state; --', 'regress_hostile_m')$$, '42703'),
('idempotency.transition(regclass,name,text,name,text,text,jsonb)', $$SELECT (idempotency.transition('regress_hostile_orders', 'id', 'o1', 'state; DROP TABLE regress_hostile_orders', 'PENDING', 'PAID')).outcome$$, '42703'),
('idempotency.transition(regclass,name,text,name,text,text,jsonb)', $$SELECT (idempotency.transition('regress_hostile_orders', 'id" OR true --', 'o1', 'state', 'PENDING', 'PAID')).outcome$$, '42703'),
('idempotency.transition(regclass,name,text,name,text,text,jsonb)', $$SELECT (idempotency.transition('regress_hostile_orders', 'id', $k$o1' OR '1'='1$k$, 'state', 'PENDING', 'PAID')).outcome$$, 'not_found'),
('idempotency.transition(regclass,name,text,name,text,text,jsonb)', $$SELECT (idempotency.transition('regress_hostile_orders', 'id', 'o1', 'state', 'PENDING', 'PAID', '{"state = ''X''; --": 1}')).outcome$$, '42703'),
('idempotency.transition(regclass,name,text,name,text,text,jsonb)', $$SELECT (idempotency.transition('regress_hostile_orders', 'id', 'o1', 'state', 'PENDING', 'PAID', '{"id": "o2", "id\"; DROP TABLE x; --": 1}')).outcome$$, '42703'),
('idempotency.transition(regclass,name,text,name,text,text,jsonb)', $$SELECT (idempotency.transition('regress_hostile_nosuch', 'id', 'o1', 'state', 'PENDING', 'PAID')).outcome$$, '42P01'),
-- inbox and outbox
('idempotency.process_once(text,text)', $$SELECT idempotency.process_once('', 'e1')$$, '22023'),
('idempotency.process_once(text,text)', $$SELECT idempotency.process_once(repeat('c', 256), 'e1')$$, '22023'),
('idempotency.process_once(text,text)', $$SELECT idempotency.process_once('regress-hostile', '')$$, '22023'),
('idempotency.process_once(text,text)', $$SELECT idempotency.process_once('regress-hostile', repeat('é', 256))$$, '22023'),
('idempotency.claim_events(integer,interval)', $$SELECT count(*) FROM idempotency.claim_events(0)$$, '22023'),
('idempotency.claim_events(integer,interval)', $$SELECT count(*) FROM idempotency.claim_events(-1)$$, '22023'),
('idempotency.claim_events(integer,interval)', $$SELECT count(*) FROM idempotency.claim_events(1, '0')$$, '22023'),
('idempotency.claim_events(integer,interval)', $$SELECT count(*) FROM idempotency.claim_events(1, '-1 second')$$, '22023'),
-- cleanup
('idempotency.purge_expired_batch(integer)', $$SELECT count(*) FROM idempotency.purge_expired_batch(0)$$, '22023'),
('idempotency.purge_expired_batch(integer)', $$SELECT count(*) FROM idempotency.purge_expired_batch(-10)$$, '22023'),
('idempotency.purge_expired(integer)', $$CALL idempotency.purge_expired(0)$$, '22023');

UPDATE hostile_case SET result = 'absent' WHERE fn IS NOT NULL AND to_regprocedure(fn) IS NULL;

-- the failures first, with a digest around them
SELECT regress_digest() AS digest_before \gset
UPDATE hostile_case SET result = regress_try(sql) WHERE result IS NULL AND expect ~ '^[0-9A-Z]{5}$';
SELECT regress_digest() = :'digest_before' AS unchanged_after_bad_values;
UPDATE hostile_case SET result = regress_try(sql) WHERE result IS NULL;

-- request keys, tokens and locks: every case and its result
SELECT id, result, result = expect AS as_expected FROM hostile_case WHERE fn IS NULL ORDER BY id;
-- the other functions: only what went wrong
SELECT id, fn, expect, result FROM hostile_case
WHERE fn IS NOT NULL AND result <> 'absent' AND result <> expect ORDER BY id;

-- the canary table is intact
SELECT * FROM regress_hostile_orders ORDER BY id;

-- clean up what this test wrote
\i test/sql/include/forget_rows.sql
SELECT pg_temp.forget_rows('regress-hostile');
DROP TABLE null_probe, null_allowed, hostile_case, regress_hostile_orders;
DROP FUNCTION regress_try(text), regress_digest(), regress_sample(regtype, text);
DROP ROLE regress_hostile_role;
