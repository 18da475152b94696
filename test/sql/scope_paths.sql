-- The scope check of claim() on each of its paths (doc/reference.md,
-- "Scopes as a boundary"): no row in scope_grants, a row of the role
-- itself (an exact scope and a prefix), a row of a role whose privileges
-- it has, every row revoked again (the table keeps its pages until VACUUM
-- truncates them), and the row of a role renamed since, which still
-- restricts it by its OID.  The portable edition takes a cheap path for
-- the first cases (sql/portable/scopes.sql); the outcomes are the same.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE ROLE regress_sp_app;
CREATE ROLE regress_sp_group;
CREATE ROLE regress_sp_member IN ROLE regress_sp_group;
SELECT idempotency.grant_usage('regress_sp_app'), idempotency.grant_usage('regress_sp_member');
RESET client_min_messages;
CREATE FUNCTION pg_temp.claims(r text) RETURNS TABLE (scope text, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    EXECUTE format('SET ROLE %I', r);
    FOREACH s IN ARRAY ARRAY['', 'tenant-A', 'shop-eu', 'shopping'] LOOP
        scope := s;
        BEGIN
            outcome := (idempotency.claim('sp-' || r || '-' || s, NULL, s)).outcome;
        EXCEPTION WHEN insufficient_privilege THEN
            outcome := '42501';
        END;
        RETURN NEXT;
    END LOOP;
    RESET ROLE;
END
$$;
SELECT count(*) AS grants FROM idempotency.scope_grants;
-- no row: every scope
SELECT * FROM pg_temp.claims('regress_sp_app');
-- rows of the role itself: tenant-A and the prefix shop-
SELECT idempotency.grant_scopes('regress_sp_app', ARRAY['tenant-A', 'shop-*']);
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'sp-%';
SELECT * FROM pg_temp.claims('regress_sp_app');
-- a row of a role whose privileges the member has
SELECT idempotency.grant_scopes('regress_sp_group', ARRAY['shop-eu']);
SELECT * FROM pg_temp.claims('regress_sp_member');
-- every row revoked: nobody restricted, with the table's pages left
SELECT idempotency.revoke_scopes('regress_sp_app'), idempotency.revoke_scopes('regress_sp_group');
SELECT count(*) AS grants, pg_relation_size('idempotency.scope_grants') > 0 AS has_pages
  FROM idempotency.scope_grants;
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'sp-%';
SELECT * FROM pg_temp.claims('regress_sp_app');
SELECT * FROM pg_temp.claims('regress_sp_member');
-- renamed: the row names no role, and restricts the role of its OID
SELECT idempotency.grant_scopes('regress_sp_app', ARRAY['tenant-A']);
ALTER ROLE regress_sp_app RENAME TO regress_sp_renamed;
DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'sp-%';
SELECT * FROM pg_temp.claims('regress_sp_renamed');
ALTER ROLE regress_sp_renamed RENAME TO regress_sp_app;
SELECT idempotency.revoke_scopes('regress_sp_app');

DELETE FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'sp-%';
SET client_min_messages = warning;
DROP OWNED BY regress_sp_app, regress_sp_member;
DROP ROLE regress_sp_app, regress_sp_member, regress_sp_group;
