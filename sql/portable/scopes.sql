-- sql/portable/scopes.sql: the portable bodies of src/scopes.c, scopes as
-- a boundary (1.7): the check of a scope against the calling role's
-- grants, and the trigger of scope_grants.
--
-- The rule is the C's (src/scopes.c) and the views' (the 1.7 script): a
-- role is restricted when it, or a role whose privileges it has
-- (pg_has_role(..., 'USAGE')), has rows in scope_grants, and may then use
-- the scopes of all those rows (equal, or starting with a row's scope
-- where is_prefix); superusers and roles without rows are unrestricted.
--
-- Edition differences (doc/portable.md):
-- - the role checked is the session's (SET ROLE, or the session user), as
--   for lookup()'s fence: the functions that call the check are SECURITY
--   DEFINER, inside which current_user is the owner.  Called from another
--   SECURITY DEFINER function, the C checks that function's owner;
-- - nothing is cached: each call that takes a scope reads scope_grants
--   (one index-less scan of a table of a few rows), so the trigger has
--   nothing to tell.

-- portable helper: since 1.0

-- Before 1.7 there is no boundary: every role may use every scope (the
-- 1.7 script replaces this, below).
CREATE FUNCTION idempotency.portable_check_scope(p_scope text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_check_scope(text) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_check_scope(text) IS 'portable edition: 42501 unless the session''s role may use the scope (1.7: scope_grants)';

-- portable helper: since 1.7

-- Raise 42501 unless the session's role may use "p_scope" (idem_check_scope):
-- before anything about the key is read, so the error does not tell
-- whether it exists.  Runs as the extension owner.
CREATE OR REPLACE FUNCTION idempotency.portable_check_scope(p_scope text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    caller CONSTANT name := COALESCE(NULLIF(pg_catalog.current_setting('role'), 'none'),
                                     SESSION_USER);
BEGIN
    IF COALESCE((SELECT pg_catalog.bool_or(CASE WHEN g.is_prefix
                                                THEN pg_catalog.starts_with(p_scope, g.scope)
                                                ELSE g.scope OPERATOR(pg_catalog.=) p_scope END)
                   FROM idempotency.scope_grants g
                  WHERE pg_catalog.pg_has_role(caller, g.role::pg_catalog.oid, 'USAGE')
                    AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                              WHERE r.rolname OPERATOR(pg_catalog.=) caller)),
                true) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'permission denied for scope "%"', p_scope
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = pg_catalog.format('Role "%s" may use only the scopes that idempotency.grant_scopes() gave it.',
                                         caller);
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_check_scope(text) FROM PUBLIC;

-- portable helper: since 1.8

-- 1.8: the rows are the roles' by name (role_name; src/scopes.c); a row
-- whose name is no role's (renamed, or dropped) restricts the role of its
-- OID, if any: restricting is the side that fails closed.
CREATE OR REPLACE FUNCTION idempotency.portable_check_scope(p_scope text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    caller CONSTANT name := COALESCE(NULLIF(pg_catalog.current_setting('role'), 'none'),
                                     SESSION_USER);
BEGIN
    IF COALESCE((SELECT pg_catalog.bool_or(CASE WHEN g.is_prefix
                                                THEN pg_catalog.starts_with(p_scope, g.scope)
                                                ELSE g.scope OPERATOR(pg_catalog.=) p_scope END)
                   FROM idempotency.scope_grants g
                   JOIN pg_catalog.pg_roles gr ON gr.oid OPERATOR(pg_catalog.=) COALESCE(
                                (SELECT n.oid FROM pg_catalog.pg_roles n WHERE n.rolname OPERATOR(pg_catalog.=) g.role_name),
                                g.role::pg_catalog.oid)
                  WHERE pg_catalog.pg_has_role(caller, gr.oid, 'USAGE')
                    AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                              WHERE r.rolname OPERATOR(pg_catalog.=) caller)),
                true) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'permission denied for scope "%"', p_scope
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = pg_catalog.format('Role "%s" may use only the scopes that idempotency.grant_scopes() gave it.',
                                         caller);
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_check_scope(text) FROM PUBLIC;

-- portable: idempotency_scope_grants_changed
-- The C sessions cache the grants; the portable ones read them at each
-- call, so there is nothing to tell them.
CREATE FUNCTION idempotency.scope_grants_changed()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    RETURN NULL;
END
$$;
