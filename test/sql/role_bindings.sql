-- Role bindings by name (1.8).  A key's holder, an event's lease and a
-- scope grant are bound to the role they NAME (holder_role_name,
-- lease_role_name, scope_grants.role_name), not to the OID in the regrole
-- columns: an OID names another role after pg_restore of a dropped role's
-- row, or on a logical subscriber with binary = true.  The test moves the
-- OIDs by hand, as a restore or a binary subscription would, and drops a
-- holder: a stranger is refused (42501, with a hint that names who may
-- release the key), the named role still acts, and the owner or a
-- superuser releases a dropped holder's key.
\set VERBOSITY terse
-- the SQLSTATE, message, detail and hint of a failing statement
CREATE FUNCTION pg_temp.refusal(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  state text; msg text; detail text; hint text;
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                          detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
  RETURN regexp_replace(concat_ws(E'\n  ', state || ': ' || msg, 'DETAIL: ' || NULLIF(detail, ''), 'HINT: ' || NULLIF(hint, '')),
                        'event \d+', 'event N', 'g');
END $$;
CREATE ROLE regress_rb_holder;
CREATE ROLE regress_rb_stranger;
CREATE ROLE regress_rb_relay;
CREATE ROLE regress_rb_tenant_c;
SELECT idempotency.grant_usage('regress_rb_holder'),
       idempotency.grant_usage('regress_rb_stranger'),
       idempotency.grant_usage('regress_rb_relay'),
       idempotency.grant_usage('regress_rb_tenant_c');
CREATE TABLE rb_notes (name text PRIMARY KEY, value bigint);
GRANT ALL ON rb_notes TO PUBLIC;
CREATE FUNCTION pg_temp.note(n text) RETURNS bigint
LANGUAGE sql AS $$ SELECT value FROM public.rb_notes WHERE name = n $$;

-- A claim records its role's name beside its OID; so do execute() and a
-- claim that takes a key over.
SET ROLE regress_rb_holder;
INSERT INTO rb_notes
SELECT 'k-' || i, (idempotency.claim('k-' || i, NULL, 'rb')).fence FROM generate_series(1, 4) i;
SELECT outcome FROM idempotency.execute('ex', '{}', 'SELECT 1', scope => 'rb');
RESET ROLE;
SELECT idempotency_key, holder_role, holder_role_name
  FROM idempotency.idempotency_keys WHERE scope = 'rb' ORDER BY 1;

-- The OID of a key moved to another role (a restore where the stranger
-- has the holder's old OID, a binary subscription): the binding stays
-- with the name.
UPDATE idempotency.idempotency_keys SET holder_role = 'regress_rb_stranger'::regrole
 WHERE scope = 'rb' AND idempotency_key IN ('k-1', 'k-2');
SET ROLE regress_rb_stranger;
-- these should all fail, changing nothing
SELECT pg_temp.refusal(format($$SELECT idempotency.complete('k-1', %s, '{"forged": true}', scope => 'rb')$$, pg_temp.note('k-1')));
SELECT pg_temp.refusal(format($$SELECT idempotency.fail('k-1', %s, '{}', 500, true, 'rb')$$, pg_temp.note('k-1')));
SELECT pg_temp.refusal(format($$SELECT idempotency.checkpoint('k-1', %s, 'forged', scope => 'rb')$$, pg_temp.note('k-1')));
SELECT pg_temp.refusal(format($$SELECT idempotency.release('k-1', %s, 'rb')$$, pg_temp.note('k-1')));
SET ROLE regress_rb_holder;
SELECT idempotency.checkpoint('k-1', pg_temp.note('k-1'), 'charged', scope => 'rb');
SELECT idempotency.complete('k-1', pg_temp.note('k-1'), '{"by": "holder"}', scope => 'rb');
RESET ROLE;
SELECT idempotency_key, status, recovery_point, response_body
  FROM idempotency.idempotency_keys WHERE scope = 'rb' AND idempotency_key = 'k-1';

-- The holder is dropped (its grants first).  Its keys keep its name,
-- which matches no role now; a role created after it, whatever OID it
-- gets, and the stranger given the old OID are refused, and the hint
-- says who may release the key.
DROP OWNED BY regress_rb_holder;
DROP ROLE regress_rb_holder;
CREATE ROLE regress_rb_newcomer;
SELECT idempotency.grant_usage('regress_rb_newcomer');
UPDATE idempotency.idempotency_keys SET holder_role = 'regress_rb_newcomer'::regrole
 WHERE scope = 'rb' AND idempotency_key = 'k-3';
SELECT idempotency_key, holder_role_name, holder_role IS NOT NULL AS has_oid
  FROM idempotency.idempotency_keys WHERE scope = 'rb' AND status = 'processing' ORDER BY 1;
SET ROLE regress_rb_newcomer;
-- these should all fail
SELECT pg_temp.refusal(format($$SELECT idempotency.complete('k-3', %s, '{}', scope => 'rb')$$, pg_temp.note('k-3')));
SELECT pg_temp.refusal(format($$SELECT idempotency.fail('k-3', %s, '{}', 400, false, 'rb')$$, pg_temp.note('k-3')));
SELECT pg_temp.refusal(format($$SELECT idempotency.checkpoint('k-3', %s, NULL, scope => 'rb')$$, pg_temp.note('k-3')));
SELECT pg_temp.refusal(format($$SELECT idempotency.release('k-3', %s, 'rb')$$, pg_temp.note('k-3')));
SET ROLE regress_rb_stranger;
SELECT pg_temp.refusal(format($$SELECT idempotency.release('k-2', %s, 'rb')$$, pg_temp.note('k-2')));
RESET ROLE;
-- the owner (a superuser here) releases them; the next claim runs anew
SELECT idempotency.release('k-2', pg_temp.note('k-2'), 'rb');
SELECT idempotency.release('k-3', pg_temp.note('k-3'), 'rb');
SET ROLE regress_rb_newcomer;
SELECT outcome, attempts FROM idempotency.claim('k-3', NULL, 'rb');
RESET ROLE;

-- A key whose holder is not known by name (its role was dropped before
-- the update to 1.8, or it came from a server at 1.7) fails closed.
UPDATE idempotency.idempotency_keys SET holder_role_name = NULL
 WHERE scope = 'rb' AND idempotency_key = 'k-4';
SET ROLE regress_rb_stranger;
SELECT pg_temp.refusal(format($$SELECT idempotency.complete('k-4', %s, '{}', scope => 'rb')$$, pg_temp.note('k-4')));
RESET ROLE;
SELECT idempotency.complete('k-4', pg_temp.note('k-4'), '{"by": "owner"}', scope => 'rb');
-- and one with neither (before 1.7) takes any role's calls, as before
SET ROLE regress_rb_stranger;
INSERT INTO rb_notes SELECT 'legacy', fence FROM idempotency.claim('legacy', NULL, 'rb');
RESET ROLE;
UPDATE idempotency.idempotency_keys SET holder_role = NULL, holder_role_name = NULL
 WHERE scope = 'rb' AND idempotency_key = 'legacy';
SET ROLE regress_rb_newcomer;
SELECT idempotency.complete('legacy', pg_temp.note('legacy'), '{"by": "anyone"}', scope => 'rb');
RESET ROLE;
SELECT idempotency_key, status, response_body
  FROM idempotency.idempotency_keys WHERE scope = 'rb' ORDER BY 1;

-- Outbox: claim_events records the relay's name; an event whose OID moved
-- to another role is still the relay's.
DELETE FROM idempotency.outbox_events;
SELECT count(*) FROM (
  SELECT idempotency.enqueue_event('rb', 'e' || i, 'made', '{}') FROM generate_series(1, 2) i) e;
INSERT INTO rb_notes
SELECT 'event-' || aggregate_id, id FROM idempotency.outbox_events WHERE aggregate_type = 'rb';
SET ROLE regress_rb_relay;
INSERT INTO rb_notes SELECT 'token', max(lease_token) FROM idempotency.claim_events(2);
RESET ROLE;
UPDATE idempotency.outbox_events SET lease_role = 'regress_rb_stranger'::regrole
 WHERE aggregate_type = 'rb';
SELECT aggregate_id, lease_role, lease_role_name FROM idempotency.outbox_events
 WHERE aggregate_type = 'rb' ORDER BY id;
SET ROLE regress_rb_stranger;
-- these should all fail
SELECT pg_temp.refusal(format($$SELECT idempotency.mark_published(ARRAY[%s], %s)$$, pg_temp.note('event-e1'), pg_temp.note('token')));
SELECT pg_temp.refusal(format($$SELECT idempotency.mark_failed(ARRAY[%s], 'forged', %s)$$, pg_temp.note('event-e2'), pg_temp.note('token')));
SET ROLE regress_rb_relay;
SELECT idempotency.mark_published(ARRAY[pg_temp.note('event-e1')], pg_temp.note('token'));
RESET ROLE;
UPDATE idempotency.outbox_events SET lease_role_name = 'regress_rb_gone'
 WHERE aggregate_type = 'rb' AND aggregate_id = 'e2';
SET ROLE regress_rb_relay;
SELECT pg_temp.refusal(format($$SELECT idempotency.mark_failed(ARRAY[%s], 'retry', %s)$$, pg_temp.note('event-e2'), pg_temp.note('token')));
RESET ROLE;
SELECT idempotency.mark_failed(ARRAY[pg_temp.note('event-e2')], 'by owner', pg_temp.note('token'));
SELECT aggregate_id, published_at IS NOT NULL AS published, attempts, last_error
  FROM idempotency.outbox_events WHERE aggregate_type = 'rb' ORDER BY id;

-- Scope grants: the row names the tenant; moved to the stranger's OID it
-- still restricts the tenant, and not the stranger.
SELECT idempotency.grant_scopes('regress_rb_tenant_c', ARRAY['c']);
SELECT role, role_name, scope FROM idempotency.scope_grants ORDER BY role_name, scope;
UPDATE idempotency.scope_grants SET role = 'regress_rb_stranger'::regrole
 WHERE role_name = 'regress_rb_tenant_c';
SET ROLE regress_rb_tenant_c;
SELECT outcome FROM idempotency.claim('t-1', NULL, 'c');
SELECT pg_temp.refusal($$SELECT idempotency.lookup('k-1', 'rb')$$);
SELECT scope FROM idempotency.stats WHERE scope IS NOT NULL ORDER BY 1;
SET ROLE regress_rb_stranger;
SELECT status FROM idempotency.lookup('k-1', 'rb');
SELECT count(*) > 1 AS sees_other_scopes FROM idempotency.stats WHERE scope IS NOT NULL;
RESET ROLE;
-- granting again repairs the OID; revoking by role finds the row by name
SELECT idempotency.grant_scopes('regress_rb_tenant_c', ARRAY['c', 'd']);
SELECT role, role_name, scope FROM idempotency.scope_grants ORDER BY role_name, scope;
SELECT idempotency.revoke_scopes('regress_rb_tenant_c', ARRAY['d']);
SELECT idempotency.revoke_scopes('regress_rb_tenant_c');
SELECT count(*) FROM idempotency.scope_grants;

-- A renamed tenant stays inside its scopes: its row's name is no role's
-- now, so the row's OID restricts it, and another role's grant_scopes,
-- which removes the rows of roles that no longer exist, keeps it.
SELECT idempotency.grant_scopes('regress_rb_tenant_c', ARRAY['c']);
ALTER ROLE regress_rb_tenant_c RENAME TO regress_rb_tenant_renamed;
SELECT idempotency.grant_scopes('regress_rb_relay', ARRAY['r']);
SET ROLE regress_rb_tenant_renamed;
SELECT outcome FROM idempotency.claim('t-2', NULL, 'c');
SELECT pg_temp.refusal($$SELECT idempotency.claim('t-2', NULL, 'd')$$);
RESET ROLE;
SELECT role, role_name, scope FROM idempotency.scope_grants ORDER BY role_name, scope;
ALTER ROLE regress_rb_tenant_renamed RENAME TO regress_rb_tenant_c;
SELECT idempotency.revoke_scopes('regress_rb_tenant_c');
SELECT idempotency.revoke_scopes('regress_rb_relay');

DELETE FROM idempotency.outbox_events WHERE aggregate_type = 'rb';
DELETE FROM idempotency.idempotency_keys WHERE scope IN ('rb', 'c');
DROP TABLE rb_notes;
DROP OWNED BY regress_rb_stranger, regress_rb_relay, regress_rb_tenant_c, regress_rb_newcomer;
DROP ROLE regress_rb_stranger, regress_rb_relay, regress_rb_tenant_c, regress_rb_newcomer;
