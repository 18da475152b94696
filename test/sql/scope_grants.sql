-- Scopes as a boundary (1.7, doc/reference.md "Scopes as a boundary"):
-- grant_scopes() restricts a role to named scopes and scope prefixes;
-- outside them every call that takes a scope fails with 42501 before it
-- reads anything, and the views show nothing of other scopes.  A role
-- without grants, and a superuser, keeps every scope.  Restrictions reach
-- the roles that inherit from the restricted one.
\set VERBOSITY sqlstate
\i test/sql/include/error_of.sql
\i test/sql/include/fence_of.sql
CREATE ROLE regress_scoped;
CREATE ROLE regress_scoped_login IN ROLE regress_scoped;
CREATE ROLE regress_scoped_noinherit NOINHERIT IN ROLE regress_scoped;
CREATE ROLE regress_unscoped;
SELECT idempotency.grant_usage('regress_scoped');
SELECT idempotency.grant_usage('regress_scoped_noinherit');
SELECT idempotency.grant_usage('regress_unscoped');
CREATE TABLE scoped_payments (id int PRIMARY KEY, card text);
GRANT SELECT, INSERT ON scoped_payments TO regress_scoped, regress_unscoped;

-- keys of several services, made by the owner (a superuser: no boundary)
SELECT outcome FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-A');
SELECT idempotency.complete('pay-1', pg_temp.fence_of('pay-1', 'tenant-A'), '{"card": "A-4242"}', scope => 'tenant-A');
SELECT outcome FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-B');
SELECT idempotency.complete('pay-1', pg_temp.fence_of('pay-1', 'tenant-B'), '{"card": "B-1111"}', scope => 'tenant-B');
SELECT outcome FROM idempotency.claim('cart-1', scope => 'shop-eu');
SELECT outcome FROM idempotency.claim('held-1', scope => 'tenant-B');
SELECT outcome FROM idempotency.claim('stalled-1', scope => 'shop-us');
SELECT outcome FROM idempotency.claim('stalled-1', scope => 'tenant-B');
SELECT outcome FROM idempotency.claim('stalled-1', scope => 'shopping');
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 minute'
 WHERE idempotency_key = 'stalled-1';

-- the boundary: tenant-A, and every scope that starts with shop-
SELECT idempotency.grant_scopes('regress_scoped', ARRAY['tenant-A', 'shop-*']);
SELECT idempotency.grant_scopes('regress_scoped', ARRAY['tenant-A']);  -- again: harmless
SELECT role, scope, is_prefix FROM idempotency.scope_grants ORDER BY 1::text, 2, 3;

SET ROLE regress_scoped;
-- inside: as before
SELECT outcome FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-A');
SELECT response_body FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-A');
SELECT status, response_body FROM idempotency.lookup('pay-1', 'tenant-A');
SELECT outcome, fence AS shop_fence FROM idempotency.claim('new-1', scope => 'shop-eu') \gset
\echo :outcome
SELECT idempotency.checkpoint('new-1', :shop_fence, 'charged', scope => 'shop-eu');
SELECT idempotency.complete('new-1', :shop_fence, '{"ok": true}', scope => 'shop-eu');
SELECT outcome, response_body
  FROM idempotency.execute('x-1', '{}', 'INSERT INTO scoped_payments VALUES (1, ''A'') RETURNING card',
                           scope => 'tenant-A');
SELECT idempotency.consume_token(idempotency.issue_token('shop-eu'), 'shop-eu') AS consumed;
-- outside: 42501 before anything is read or written; a key that exists
-- and one that does not give the same error
SELECT c AS call, pg_temp.error_of(c) AS error FROM (VALUES
  ($$SELECT idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-B')$$),
  ($$SELECT idempotency.claim('no-such-key', scope => 'tenant-B')$$),
  ($$SELECT idempotency.claim('pay-1', '{"amount": 1}')$$),
  ($$SELECT idempotency.claim('k', scope => 'shop')$$),
  ($$SELECT idempotency.claim('k', scope => 'shopping')$$),
  ($$SELECT idempotency.claim('k', scope => 'tenant-a')$$),
  ($$SELECT idempotency.lookup('pay-1', 'tenant-B')$$),
  ($$SELECT idempotency.lookup('no-such-key', 'tenant-B')$$),
  ($$SELECT idempotency.complete('held-1', 1, '{}', scope => 'tenant-B')$$),
  ($$SELECT idempotency.complete('no-such-key', 1, '{}', scope => 'tenant-B')$$),
  ($$SELECT idempotency.fail('held-1', 1, scope => 'tenant-B')$$),
  ($$SELECT idempotency.checkpoint('held-1', 1, 'x', scope => 'tenant-B')$$),
  ($$SELECT idempotency.release('held-1', 1, 'tenant-B')$$),
  ($$SELECT idempotency.execute('x-2', '{}', 'INSERT INTO scoped_payments VALUES (2, ''B'')', scope => 'tenant-B')$$),
  ($$SELECT idempotency.issue_token('tenant-B')$$),
  ($$SELECT idempotency.consume_token('00000000-0000-4000-8000-000000000000', 'tenant-B')$$)
) AS calls(c);
-- argument errors come first, as before
SELECT pg_temp.error_of($$SELECT idempotency.claim(NULL, scope => 'tenant-B')$$) AS null_key;
SELECT pg_temp.error_of($$SELECT idempotency.claim('k', scope => NULL)$$) AS null_scope;
-- execute's statement did not run
SELECT count(*) AS payments FROM scoped_payments;
-- the views: only tenant-A and shop-*; the backlog columns are there
SELECT scope, status, keys FROM idempotency.stats ORDER BY 1, 2;
SELECT scope, idempotency_key FROM idempotency.stalled_keys ORDER BY 1, 2;
-- a condition of the reader's does not see the rows of other scopes
CREATE FUNCTION pg_temp.leak(s text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS $$
BEGIN RAISE NOTICE 'saw scope %', s; RETURN true; END $$;
\set VERBOSITY terse
SELECT scope FROM idempotency.stalled_keys WHERE pg_temp.leak(scope);
\set VERBOSITY sqlstate
RESET ROLE;

-- through membership: a role that inherits from the restricted one is
-- restricted too; a NOINHERIT member is not, until it takes the role
SET ROLE regress_scoped_login;
SELECT outcome FROM idempotency.claim('m-1', scope => 'shop-eu');
SELECT pg_temp.error_of($$SELECT idempotency.claim('m-1', scope => 'tenant-B')$$) AS login_outside;
SELECT count(*) AS stalled_seen FROM idempotency.stalled_keys WHERE idempotency_key = 'stalled-1';
RESET ROLE;
SET ROLE regress_scoped_noinherit;
SELECT outcome FROM idempotency.claim('m-2', scope => 'tenant-B');
RESET ROLE;

-- a role without grants, and the owner, see every scope
SET ROLE regress_unscoped;
SELECT outcome FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-B');
SELECT count(DISTINCT scope) AS scopes_seen FROM idempotency.stats
 WHERE scope IN ('tenant-A', 'tenant-B', 'shop-eu', 'shop-us', 'shopping', '', repeat('y', 255));
SELECT scope FROM idempotency.stalled_keys WHERE idempotency_key = 'stalled-1' ORDER BY 1;
RESET ROLE;
SELECT count(DISTINCT scope) AS owner_scopes_seen FROM idempotency.stats
 WHERE scope IN ('tenant-A', 'tenant-B', 'shop-eu', 'shop-us', 'shopping', '', repeat('y', 255));

-- grants to two roles add up for a role that inherits from both
CREATE ROLE regress_scoped_b;
SELECT idempotency.grant_usage('regress_scoped_b');
SELECT idempotency.grant_scopes('regress_scoped_b', ARRAY['tenant-B']);
GRANT regress_scoped_b TO regress_scoped_login;
SET ROLE regress_scoped_login;
SELECT scope, status, keys FROM idempotency.stats ORDER BY 1, 2;
RESET ROLE;
REVOKE regress_scoped_b FROM regress_scoped_login;
SET ROLE regress_scoped_login;
SELECT pg_temp.error_of($$SELECT idempotency.lookup('pay-1', 'tenant-B')$$) AS membership_revoked;
RESET ROLE;

-- administration is the owner's; bad arguments
SET ROLE regress_scoped;
SELECT pg_temp.error_of($$SELECT idempotency.grant_scopes('regress_scoped', ARRAY['tenant-B'])$$) AS app_grants;
SELECT pg_temp.error_of($$SELECT idempotency.revoke_scopes('regress_scoped')$$) AS app_lifts;
SELECT pg_temp.error_of($$SELECT * FROM idempotency.scope_grants$$) AS app_reads;
RESET ROLE;
SELECT c AS call, pg_temp.error_of(c) AS error FROM (VALUES
  ($$SELECT idempotency.grant_scopes(NULL, ARRAY['a'])$$),
  ($$SELECT idempotency.grant_scopes('regress_scoped', NULL)$$),
  ($$SELECT idempotency.grant_scopes('regress_scoped', '{}')$$),
  ($$SELECT idempotency.grant_scopes('regress_scoped', ARRAY['a', NULL])$$),
  ($$SELECT idempotency.grant_scopes('regress_scoped', ARRAY[repeat('x', 256)])$$),
  ($$SELECT idempotency.grant_scopes('regress_scoped', ARRAY[['a'], ['b']])$$),
  ($$SELECT idempotency.grant_scopes(CURRENT_USER::regrole, ARRAY['a'])$$),
  ($$SELECT idempotency.revoke_scopes(NULL)$$),
  ($$SELECT idempotency.revoke_scopes('regress_scoped', ARRAY[NULL])$$),
  ($$SELECT idempotency.revoke_scopes('regress_scoped', ARRAY['tenant-A', 'shop-*'])$$)
) AS calls(c);
-- 255 characters and a prefix of 255 are fine; '' is the default scope
SELECT idempotency.grant_scopes('regress_scoped', ARRAY[repeat('x', 255), repeat('y', 255) || '*', '']);
SET ROLE regress_scoped;
SELECT outcome FROM idempotency.claim('d-1');
SELECT outcome FROM idempotency.claim('y-1', scope => repeat('y', 255));
RESET ROLE;
SELECT idempotency.revoke_scopes('regress_scoped', ARRAY[repeat('x', 255), repeat('y', 255) || '*', '', 'not-granted']);

-- revoking a prefix by its name; the last scope cannot go by name
SELECT idempotency.revoke_scopes('regress_scoped', ARRAY['shop-*']);
SELECT role, scope, is_prefix FROM idempotency.scope_grants ORDER BY 1::text, 2, 3;
SET ROLE regress_scoped;
SELECT pg_temp.error_of($$SELECT idempotency.claim('k', scope => 'shop-eu')$$) AS prefix_revoked;
RESET ROLE;
SELECT pg_temp.error_of($$SELECT idempotency.revoke_scopes('regress_scoped', ARRAY['tenant-A'])$$) AS last_scope;

-- a rolled-back grant leaves no trace in this session's checks
BEGIN;
SELECT idempotency.grant_scopes('regress_unscoped', ARRAY['nowhere']);
SET LOCAL ROLE regress_unscoped;
SELECT pg_temp.error_of($$SELECT idempotency.claim('k', scope => 'tenant-B')$$) AS inside_transaction;
ROLLBACK;
SET ROLE regress_unscoped;
SELECT outcome FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-B') AS after_rollback;
RESET ROLE;

-- lifting the restriction: every scope again
SELECT idempotency.revoke_scopes('regress_scoped');
SELECT count(*) AS grants_left FROM idempotency.scope_grants;
SET ROLE regress_scoped;
SELECT outcome FROM idempotency.claim('pay-1', '{"amount": 1}', scope => 'tenant-B');
SELECT count(DISTINCT scope) AS scopes_seen FROM idempotency.stats
 WHERE scope IN ('tenant-A', 'tenant-B', 'shop-eu', 'shop-us', 'shopping', '', repeat('y', 255));
RESET ROLE;

-- the grants of a dropped role go with the next grant or revoke
SELECT idempotency.grant_scopes('regress_scoped_login', ARRAY['tenant-A']);
DROP OWNED BY regress_scoped_login;
DROP ROLE regress_scoped_login;
SELECT count(*) AS rows_of_dropped_role FROM idempotency.scope_grants g
 WHERE NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.role);
SELECT idempotency.revoke_scopes('regress_scoped_b');
SELECT count(*) AS rows_left FROM idempotency.scope_grants;

-- cleanup
DELETE FROM idempotency.idempotency_keys
 WHERE scope IN ('tenant-A', 'tenant-B', 'shop-eu', 'shop-us', 'shopping', '', repeat('y', 255))
   AND idempotency_key IN ('pay-1', 'cart-1', 'held-1', 'stalled-1', 'new-1', 'x-1', 'm-1', 'm-2', 'd-1', 'y-1');
DELETE FROM idempotency.tokens WHERE scope = 'shop-eu';
DROP TABLE scoped_payments;
DROP OWNED BY regress_scoped, regress_scoped_noinherit, regress_unscoped, regress_scoped_b;
DROP ROLE regress_scoped, regress_scoped_noinherit, regress_unscoped, regress_scoped_b;
