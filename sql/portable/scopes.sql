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
-- - nothing is cached: each call that takes a scope looks at
--   scope_grants, so the trigger has nothing to tell.  It costs nothing
--   that shows while the table has never had a row (no page: the test of
--   portable_scope_fits(), below), a scan of an empty table while it has
--   pages but no row, one probe of its primary key for a role that calls
--   with one of its own scopes (1.9), and a scan of the rows otherwise.

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

-- portable helper: since 1.9

-- 1.9: as 1.8, with the cheap cases first: no row at all, then a row of
-- the role itself (role_name, the primary key's first column) that allows
-- the scope.  A superuser is unrestricted and would pass the full rule;
-- a role's own row restricts it and allows what it names, whatever else
-- the rule finds.  The rest is 1.8's rule, renamed roles' rows by OID
-- included.
CREATE OR REPLACE FUNCTION idempotency.portable_check_scope(p_scope text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    caller CONSTANT name := COALESCE(NULLIF(pg_catalog.current_setting('role'), 'none'),
                                     SESSION_USER);
BEGIN
    IF NOT EXISTS (SELECT FROM idempotency.scope_grants) THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM idempotency.scope_grants g
                WHERE g.role_name OPERATOR(pg_catalog.=) caller
                  AND CASE WHEN g.is_prefix THEN pg_catalog.starts_with(p_scope, g.scope)
                           ELSE g.scope OPERATOR(pg_catalog.=) p_scope END) THEN
        RETURN;
    END IF;
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

-- portable helper: since 1.0, again in 1.6, 1.7

-- A scope that portable_arg_name(scope, 'scope', 0, 255) passes at once
-- (1.9): at most 255 characters, and no role restricted, for certain:
-- scope_grants (1.7) has no page, so it has never had a row, or not since
-- VACUUM truncated the pages of deleted rows.  Any other scope goes to
-- portable_arg_name(), and from it to portable_check_scope().  Plain SQL,
-- inlined into the expression of the body that calls it: one look at the
-- table's size, with no scan (to_regclass(): before 1.7 there is no
-- table, and nobody is restricted; the 1.7 script creates its helpers
-- before the table).  The 1.8 script names the table itself.
CREATE FUNCTION idempotency.portable_scope_fits(scope text)
RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
SELECT pg_catalog.char_length(scope) OPERATOR(pg_catalog.<=) 255
   AND COALESCE(pg_catalog.pg_relation_size(pg_catalog.to_regclass('idempotency.scope_grants')), 0)
       OPERATOR(pg_catalog.=) 0
$$;
REVOKE ALL ON FUNCTION idempotency.portable_scope_fits(text) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_scope_fits(text) IS 'portable edition: whether a scope passes at once (no role restricted)';

-- portable helper: since 1.8, again in 1.9

-- 1.8: scope_grants exists when the script creates its helpers, and is
-- named at once (no lookup of the name at each call).
CREATE OR REPLACE FUNCTION idempotency.portable_scope_fits(scope text)
RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
SELECT pg_catalog.char_length(scope) OPERATOR(pg_catalog.<=) 255
   AND pg_catalog.pg_relation_size('idempotency.scope_grants'::pg_catalog.regclass) OPERATOR(pg_catalog.=) 0
$$;
REVOKE ALL ON FUNCTION idempotency.portable_scope_fits(text) FROM PUBLIC;

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
