-- idempotency 1.6 -> 1.7 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.7 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.7'" to load this file. \quit

-- [section: the portable edition's parity] ----------------------------------

--
-- This section states again the functions whose portable bodies
-- (sql/portable/, doc/portable.md) changed in 1.7 and whose C symbol did
-- not, so that an installation of the portable edition updated to 1.7
-- gets them; in the C edition each statement binds the symbol it bound
-- before.
--

-- The portable body pins search_path in the catalog (SECURITY DEFINER
-- with SET search_path), as every SECURITY DEFINER function must.
CREATE OR REPLACE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
AS 'MODULE_PATHNAME', 'idempotency_purge_expired_batch_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 5;

-- [section: lookup hides an answer past its time] ---------------------------

--
-- lookup() returns the key's row without its response_body once
-- response_expires_at has come, the moment claims start answering gone,
-- whoever asks and whether or not purge_expired() has dropped the body
-- yet (the code stays, as in gone).  The 1.7 library does so for the 1.0
-- symbol too; this statement binds 1.7's symbol, so that the portable
-- edition's body, which changed, lands in an updated installation.  The
-- views (stats, stalled_keys, metrics) show no answers.
--
CREATE OR REPLACE FUNCTION idempotency.lookup(key text, scope text DEFAULT '')
RETURNS idempotency.idempotency_keys
AS 'MODULE_PATHNAME', 'idempotency_lookup_1_7'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION idempotency.lookup(text, text) IS 'the row of a key, or NULL when absent or expired; its response_body NULL once response_expires_at has come';

-- [section: only the holder acts as the holder] ---

--
-- A role that guessed another request's fence could complete, fail,
-- checkpoint or release it (issue 43).  From 1.7 a claim records the role
-- that claimed (the caller's current role; in the portable edition the
-- session's role), and a holder call from any other role that is not a
-- member of it is refused with 42501 whatever fence it passes, changing
-- nothing.  Likewise claim_events records the relay's role, and
-- mark_published and mark_failed refuse another role's leased events.
-- Keys and events from before 1.7 have no role recorded: any role may act
-- on them, as before.  Signatures are unchanged; each function binds a
-- new symbol, and the old ones keep serving databases not yet updated.
--
ALTER TABLE idempotency.idempotency_keys ADD COLUMN holder_role regrole;
COMMENT ON COLUMN idempotency.idempotency_keys.holder_role IS 'the role that claimed the key (1.7): only it, its members and superusers may complete, fail, checkpoint or release the key; NULL for keys claimed before 1.7, which any role may';

ALTER TABLE idempotency.outbox_events ADD COLUMN lease_role regrole;
COMMENT ON COLUMN idempotency.outbox_events.lease_role IS 'the role of the relay that last leased the event (claim_events, 1.7): only it, its members and superusers may mark the event; NULL for events never leased since 1.7';

CREATE OR REPLACE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_claim_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer  DEFAULT 200,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_complete_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.fail(
    key           text,
    fence         bigint,
    error         jsonb    DEFAULT NULL,
    response_code integer  DEFAULT 500,
    retryable     boolean  DEFAULT true,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_fail_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.checkpoint(
    key            text,
    fence          bigint,
    recovery_point text,
    lease          interval DEFAULT NULL,
    scope          text     DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_checkpoint_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.release(
    key   text,
    fence bigint,
    scope text DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_release_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.execute(
    key          text,
    request      jsonb,
    statement    text,
    params       text[]   DEFAULT '{}',
    scope        text     DEFAULT '',
    ttl          interval DEFAULT NULL,
    response_ttl interval DEFAULT NULL,
    wait         interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_execute_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE OR REPLACE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed_1_7'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- [section: scopes as a boundary] -------------------------------------------

--
-- A role can be restricted to named scopes and scope prefixes
-- (doc/reference.md, "Scopes as a boundary"): grant_scopes(role, scopes)
-- writes rows of scope_grants, revoke_scopes(role[, scopes]) removes them.
-- A role is restricted when it, or a role whose privileges it has
-- (pg_has_role(role, granted, 'USAGE'): the roles it inherits from), has
-- rows; it may use the scopes of all those rows: equal to a row's scope,
-- or starting with it where is_prefix.  Superusers and roles without rows
-- are unrestricted, as every role was before 1.7.  Outside its scopes
-- every function that takes a scope raises 42501 before it reads anything
-- (the C checks where it reads the argument, src/scopes.c; the portable
-- bodies call portable_check_scope()), and the views and metrics() show
-- nothing of other scopes.  Only the owner writes the table; pg_dump keeps
-- its rows.  A role is stored as regrole, so a dump names it and a restore
-- finds it by name; rows of roles that were dropped are removed by the
-- next grant_scopes() or revoke_scopes().
--
CREATE TABLE idempotency.scope_grants (
    role      regrole NOT NULL,
    scope     text    NOT NULL,
    is_prefix boolean NOT NULL DEFAULT false,
    PRIMARY KEY (role, scope, is_prefix),
    CONSTRAINT scope_grants_scope_check CHECK (pg_catalog.char_length(scope) OPERATOR(pg_catalog.<=) 255)
);
COMMENT ON TABLE idempotency.scope_grants IS 'scopes a role is restricted to (grant_scopes, revoke_scopes); a role without rows, through itself or the roles it inherits from, may use every scope';
COMMENT ON COLUMN idempotency.scope_grants.is_prefix IS 'true: every scope that starts with scope (granted as ''scope*'')';
REVOKE ALL ON idempotency.scope_grants FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idempotency.scope_grants', '');

-- The C library caches each role's scopes per backend: every write of the
-- table tells the other sessions to read it again (a relcache
-- invalidation, sent at commit).  ALWAYS, so that a subscription's apply
-- worker that writes it tells them too.
CREATE FUNCTION idempotency.scope_grants_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idempotency_scope_grants_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.scope_grants_changed() IS 'trigger: the sessions read scope_grants again';
REVOKE ALL ON FUNCTION idempotency.scope_grants_changed() FROM PUBLIC;
CREATE TRIGGER scope_grants_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency.scope_grants
    FOR EACH STATEMENT EXECUTE FUNCTION idempotency.scope_grants_changed();
ALTER TABLE idempotency.scope_grants ENABLE ALWAYS TRIGGER scope_grants_changed;

-- Owner only, like grant_usage(): SECURITY INVOKER, so that only a role
-- that may write scope_grants (its owner) gets anywhere.  An entry ending
-- in '*' is a prefix (the '*' is not part of it); others are exact scopes,
-- '' the default scope.
CREATE FUNCTION idempotency.grant_scopes(role regrole, scopes text[])
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_role CONSTANT pg_catalog.oid := role;
    entry text;
    prefix boolean;
    name text;
BEGIN
    IF p_role IS NULL OR p_role OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'role must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) p_role) THEN
        RAISE EXCEPTION 'role % is a superuser', role
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Superusers are never restricted to scopes.';
    END IF;
    IF scopes IS NULL THEN
        RAISE EXCEPTION 'scopes must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(scopes) OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'scopes must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name the scopes the role may use; a name ending in * is a prefix.';
    END IF;
    IF pg_catalog.array_ndims(scopes) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'scopes must be a one-dimensional text array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH entry IN ARRAY scopes LOOP
        IF entry IS NULL THEN
            RAISE EXCEPTION 'scopes must not contain null'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        prefix := pg_catalog.right(entry, 1) OPERATOR(pg_catalog.=) '*';
        name := CASE WHEN prefix THEN pg_catalog.left(entry, -1) ELSE entry END;
        IF pg_catalog.char_length(name) OPERATOR(pg_catalog.>) 255 THEN
            RAISE EXCEPTION 'scope is too long'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('It has %s characters; at most %s are allowed.',
                                                 pg_catalog.char_length(name), 255);
        END IF;
        INSERT INTO idempotency.scope_grants AS g (role, scope, is_prefix)
        VALUES (p_role::pg_catalog.regrole, name, prefix)
        ON CONFLICT DO NOTHING;
    END LOOP;
    DELETE FROM idempotency.scope_grants g
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);
END
$$;
COMMENT ON FUNCTION idempotency.grant_scopes(regrole, text[]) IS 'restrict a role (and the roles that inherit from it) to these scopes; an entry ending in * is a prefix';
REVOKE ALL ON FUNCTION idempotency.grant_scopes(regrole, text[]) FROM PUBLIC;

-- NULL scopes: lift the role's restriction.  Revoking the last of its
-- scopes by name would lift it too, silently widening what the role may
-- do, so that is refused (55000).
CREATE FUNCTION idempotency.revoke_scopes(role regrole, scopes text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_role CONSTANT pg_catalog.oid := role;
    had boolean;
BEGIN
    IF p_role IS NULL OR p_role OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'role must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF scopes IS NULL THEN
        DELETE FROM idempotency.scope_grants g
         WHERE g.role::pg_catalog.oid OPERATOR(pg_catalog.=) p_role;
    ELSE
        IF pg_catalog.array_ndims(scopes) OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'scopes must be a one-dimensional text array'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF pg_catalog.array_position(scopes, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'scopes must not contain null'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        had := EXISTS (SELECT FROM idempotency.scope_grants g
                        WHERE g.role::pg_catalog.oid OPERATOR(pg_catalog.=) p_role);
        DELETE FROM idempotency.scope_grants g
         WHERE g.role::pg_catalog.oid OPERATOR(pg_catalog.=) p_role
           AND (CASE WHEN g.is_prefix THEN g.scope OPERATOR(pg_catalog.||) '*' ELSE g.scope END)
               OPERATOR(pg_catalog.=) ANY (scopes);
        IF had AND NOT EXISTS (SELECT FROM idempotency.scope_grants g
                                WHERE g.role::pg_catalog.oid OPERATOR(pg_catalog.=) p_role) THEN
            RAISE EXCEPTION 'revoking these scopes would leave role % unrestricted', role
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'A role without scopes may use every scope.',
                      HINT = 'Grant its new scopes first, or lift its restriction with idempotency.revoke_scopes(role).';
        END IF;
    END IF;
    DELETE FROM idempotency.scope_grants g
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);
END
$$;
COMMENT ON FUNCTION idempotency.revoke_scopes(regrole, text[]) IS 'take scopes from a role (an entry ending in * names a prefix); without scopes, lift its restriction';
REVOKE ALL ON FUNCTION idempotency.revoke_scopes(regrole, text[]) FROM PUBLIC;

-- The views show the scopes the querying role may use (current_user:
-- a view's functions and expressions run as the role that reads it), by
-- the rule above, written out in SQL so that reading them needs no
-- EXECUTE on a function of the extension.  stats filters its groups,
-- not its rows, so that it costs one test per scope and status; with no
-- group left it keeps its one row of scope NULL, the backlog.  Both are
-- security barriers: a condition of the reader's is not run on rows of
-- other scopes before the filter.
CREATE OR REPLACE VIEW idempotency.stats AS
SELECT k.scope,
       k.status,
       COALESCE(k.keys, 0) AS keys,
       k.oldest_created_at,
       COALESCE(k.expired, 0) AS expired,
       o.outbox_unpublished,
       pg_catalog.now() OPERATOR(pg_catalog.-) o.oldest_unpublished AS outbox_oldest_unpublished_age,
       o.outbox_dead,
       i.inbox_size,
       o.outbox_taken_over
  FROM (SELECT pg_catalog.count(*) FILTER (WHERE e.dead_at IS NULL) AS outbox_unpublished,
               pg_catalog.min(e.created_at) FILTER (WHERE e.dead_at IS NULL) AS oldest_unpublished,
               pg_catalog.count(*) FILTER (WHERE e.dead_at IS NOT NULL) AS outbox_dead,
               pg_catalog.count(*) FILTER (WHERE e.dead_at IS NULL
                                           AND e.takeovers OPERATOR(pg_catalog.>) 0) AS outbox_taken_over
          FROM idempotency.outbox_events e
         WHERE e.published_at IS NULL) o
 CROSS JOIN
       (SELECT pg_catalog.count(*) AS inbox_size
          FROM idempotency.processed_events) i
  LEFT JOIN
       (SELECT s.scope, s.status,
               pg_catalog.count(*) AS keys,
               pg_catalog.min(s.created_at) AS oldest_created_at,
               pg_catalog.count(*) FILTER (WHERE s.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS expired
          FROM idempotency.idempotency_keys s
         GROUP BY s.scope, s.status
        HAVING COALESCE((SELECT pg_catalog.bool_or(CASE WHEN g.is_prefix
                                                        THEN pg_catalog.starts_with(s.scope, g.scope)
                                                        ELSE g.scope OPERATOR(pg_catalog.=) s.scope END)
                           FROM idempotency.scope_grants g
                          WHERE pg_catalog.pg_has_role(CURRENT_USER, g.role::pg_catalog.oid, 'USAGE')
                            AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                                      WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)),
                        true)) k ON true;
ALTER VIEW idempotency.stats SET (security_barrier = true);

CREATE OR REPLACE VIEW idempotency.stalled_keys AS
SELECT k.scope,
       k.idempotency_key,
       CASE WHEN pg_catalog.has_table_privilege('idempotency.idempotency_keys'::pg_catalog.regclass,
                                                'SELECT')
            THEN k.fence END AS fence,
       k.attempts,
       k.recovery_point,
       k.locked_until,
       pg_catalog.now() OPERATOR(pg_catalog.-) k.locked_until AS stalled_for,
       k.created_at,
       k.updated_at,
       k.expires_at
  FROM idempotency.idempotency_keys k
 WHERE k.status OPERATOR(pg_catalog.=) 'processing'::idempotency.key_status
   AND k.locked_until OPERATOR(pg_catalog.<=) pg_catalog.now()
   AND COALESCE((SELECT pg_catalog.bool_or(CASE WHEN g.is_prefix
                                                THEN pg_catalog.starts_with(k.scope, g.scope)
                                                ELSE g.scope OPERATOR(pg_catalog.=) k.scope END)
                   FROM idempotency.scope_grants g
                  WHERE pg_catalog.pg_has_role(CURRENT_USER, g.role::pg_catalog.oid, 'USAGE')
                    AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                              WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)),
                true)
 ORDER BY k.locked_until, k.scope, k.idempotency_key;
ALTER VIEW idempotency.stalled_keys SET (security_barrier = true);

-- [section: relays that never pass lease_token] ----------------------------

--
-- A relay that never passes lease_token cannot mark an event whose lease
-- was taken over, not even failed (issue 44, item 10).  From 1.7:
-- claim_events makes dead, before it picks candidates, every pending
-- event whose lease ran out unmarked and whose failures and takeovers,
-- with the takeover it would now count, reach
-- idempotency.outbox_max_attempts (as a dead event made by mark_failed,
-- it no longer holds back the later events of its aggregate); a mark
-- without a token that leaves such events alone warns, with the fix; and
-- stats counts them (outbox_taken_over, in the view above).  claim_events,
-- mark_published and mark_failed bind the symbols of 1.7 above (section
-- "only the holder acts as the holder"), which do this too.
--
COMMENT ON COLUMN idempotency.outbox_events.takeovers IS 'times claim_events() leased the event after a lease of it ran out unmarked; marks without a lease_token leave it alone once above 0; failures and takeovers together reach idempotency.outbox_max_attempts, and the event is dead';
