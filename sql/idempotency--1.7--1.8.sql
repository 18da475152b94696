-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: role bindings by name] ------------------------------------------

--
-- A key's holder, an event's lease and a scope grant were bound to a role
-- by its OID (regrole).  An OID means another role, or none, wherever
-- roles were created in another order: after pg_dump and pg_restore of a
-- row whose role was dropped (regrole then dumps the bare number), and
-- on a logical subscriber with binary = true (which sends the publisher's
-- OIDs).  A stranger could then act as a key's holder, mark a relay's
-- events, or read the scopes of a tenant it was not.  From 1.8 a role is
-- bound by its NAME, the identity pg_dump, pg_dumpall --roles-only and a
-- text-mode subscription carry: the new columns holder_role_name,
-- lease_role_name and scope_grants.role_name are written by the same
-- statements as the regrole columns and are the only ones checked.  The
-- regrole columns stay, as they were, because they are in the row types
-- that lookup() and claim_events() return (changing their type would
-- change what every caller decodes, and rewrite both tables); their
-- OIDs are not trusted any more, and may name another role after a
-- restore or on a subscriber.
--
-- The holder calls accept the role named by holder_role_name, its
-- members, the owner of the extension's tables (and its members) and
-- superusers; a name that matches no role (its role was dropped, or
-- never created here) is refused with 42501, whose hint says that only
-- the owner or a superuser may release the key.  A key with a holder_role
-- but no holder_role_name (its role was gone when this update ran, or it
-- came from a server still at 1.7) is refused likewise: its holder is not
-- known by name, so it fails closed.  Keys and events with neither column
-- set (before 1.7) take any role's calls, as before.  Events are marked
-- by the same rule.  A role is restricted to scopes by the rows of
-- scope_grants whose role_name is the role or one it inherits from;
-- scope_grants is keyed by role_name, so that a grant made on a
-- subscriber after a failover never collides with a replicated row
-- whose OID happens to be its role's.  Renaming a role moves none of
-- its bindings (grant its scopes again under the new name).
--
-- The claiming functions, the holder calls and the outbox's bind new
-- symbols (..._1_8); the 1.7 ones keep checking by OID for databases not
-- yet updated.  The rows written before the update get the name their
-- role has now.
--
ALTER TABLE idempotency.idempotency_keys ADD COLUMN holder_role_name name;
COMMENT ON COLUMN idempotency.idempotency_keys.holder_role_name IS 'the name of the role that claimed the key (1.8), the binding the holder calls check: only that role, its members, the extension''s owner and superusers may complete, fail, checkpoint or release the key; NULL with holder_role NULL for keys claimed before 1.7, which any role may';
COMMENT ON COLUMN idempotency.idempotency_keys.holder_role IS 'the role that claimed the key (1.7), as an OID: informative only since 1.8, since an OID may name another role after a restore or on a logical subscriber; holder_role_name is the binding';
UPDATE idempotency.idempotency_keys k
   SET holder_role_name = r.rolname
  FROM pg_catalog.pg_roles r
 WHERE r.oid OPERATOR(pg_catalog.=) k.holder_role::pg_catalog.oid;

ALTER TABLE idempotency.outbox_events ADD COLUMN lease_role_name name;
COMMENT ON COLUMN idempotency.outbox_events.lease_role_name IS 'the name of the role of the relay that last leased the event (claim_events, 1.8), the binding the marks check: only that role, its members, the extension''s owner and superusers may mark the event; NULL with lease_role NULL for events never leased since 1.7';
COMMENT ON COLUMN idempotency.outbox_events.lease_role IS 'the role of the relay that last leased the event (1.7), as an OID: informative only since 1.8; lease_role_name is the binding';
UPDATE idempotency.outbox_events e
   SET lease_role_name = r.rolname
  FROM pg_catalog.pg_roles r
 WHERE r.oid OPERATOR(pg_catalog.=) e.lease_role::pg_catalog.oid;

-- The rows of roles dropped before the update restrict no one (the next
-- grant_scopes() would have removed them): they go.
ALTER TABLE idempotency.scope_grants ADD COLUMN role_name name;
DELETE FROM idempotency.scope_grants g
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                    WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);
UPDATE idempotency.scope_grants g
   SET role_name = r.rolname
  FROM pg_catalog.pg_roles r
 WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid;
ALTER TABLE idempotency.scope_grants ALTER COLUMN role_name SET NOT NULL;
ALTER TABLE idempotency.scope_grants DROP CONSTRAINT scope_grants_pkey;
ALTER TABLE idempotency.scope_grants ADD PRIMARY KEY (role_name, scope, is_prefix);
COMMENT ON COLUMN idempotency.scope_grants.role_name IS 'the name of the restricted role (1.8), the binding the checks read';
COMMENT ON COLUMN idempotency.scope_grants.role IS 'the restricted role (1.7), as an OID: informative only since 1.8; role_name is the binding';

CREATE OR REPLACE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
AS 'MODULE_PATHNAME', 'idempotency_claim_1_8'
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
AS 'MODULE_PATHNAME', 'idempotency_complete_1_8'
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
AS 'MODULE_PATHNAME', 'idempotency_fail_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.checkpoint(
    key            text,
    fence          bigint,
    recovery_point text,
    lease          interval DEFAULT NULL,
    scope          text     DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_checkpoint_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.release(
    key   text,
    fence bigint,
    scope text DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_release_1_8'
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
AS 'MODULE_PATHNAME', 'idempotency_execute_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
AS 'MODULE_PATHNAME', 'idempotency_claim_events_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE OR REPLACE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed_1_8'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- grant_scopes and revoke_scopes of 1.7, writing and reading role_name.
-- A row is the role's by name: rows whose name matches no role restrict
-- no one, and both functions remove them, as they removed the rows of
-- dropped roles before.
CREATE OR REPLACE FUNCTION idempotency.grant_scopes(role regrole, scopes text[])
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_role CONSTANT pg_catalog.oid := role;
    p_name name;
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
    p_name := (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) p_role);
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
        INSERT INTO idempotency.scope_grants AS g (role, role_name, scope, is_prefix)
        VALUES (p_role::pg_catalog.regrole, p_name, name, prefix)
        ON CONFLICT (role_name, scope, is_prefix) DO UPDATE SET role = excluded.role
        WHERE g.role OPERATOR(pg_catalog.<>) excluded.role;
    END LOOP;
    DELETE FROM idempotency.scope_grants g
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.rolname OPERATOR(pg_catalog.=) g.role_name);
END
$$;

CREATE OR REPLACE FUNCTION idempotency.revoke_scopes(role regrole, scopes text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_role CONSTANT pg_catalog.oid := role;
    p_name name;
    had boolean;
BEGIN
    IF p_role IS NULL OR p_role OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'role must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    p_name := (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) p_role);
    IF scopes IS NULL THEN
        DELETE FROM idempotency.scope_grants g
         WHERE g.role_name OPERATOR(pg_catalog.=) p_name;
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
                        WHERE g.role_name OPERATOR(pg_catalog.=) p_name);
        DELETE FROM idempotency.scope_grants g
         WHERE g.role_name OPERATOR(pg_catalog.=) p_name
           AND (CASE WHEN g.is_prefix THEN g.scope OPERATOR(pg_catalog.||) '*' ELSE g.scope END)
               OPERATOR(pg_catalog.=) ANY (scopes);
        IF had AND NOT EXISTS (SELECT FROM idempotency.scope_grants g
                                WHERE g.role_name OPERATOR(pg_catalog.=) p_name) THEN
            RAISE EXCEPTION 'revoking these scopes would leave role % unrestricted', role
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'A role without scopes may use every scope.',
                      HINT = 'Grant its new scopes first, or lift its restriction with idempotency.revoke_scopes(role).';
        END IF;
    END IF;
    DELETE FROM idempotency.scope_grants g
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.rolname OPERATOR(pg_catalog.=) g.role_name);
END
$$;

-- The views of 1.7, restricted by the rows of scope_grants whose
-- role_name is a role that the reader has the privileges of.
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
                           JOIN pg_catalog.pg_roles gr ON gr.rolname OPERATOR(pg_catalog.=) g.role_name
                          WHERE pg_catalog.pg_has_role(CURRENT_USER, gr.oid, 'USAGE')
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
                   JOIN pg_catalog.pg_roles gr ON gr.rolname OPERATOR(pg_catalog.=) g.role_name
                  WHERE pg_catalog.pg_has_role(CURRENT_USER, gr.oid, 'USAGE')
                    AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                              WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)),
                true)
 ORDER BY k.locked_until, k.scope, k.idempotency_key;
ALTER VIEW idempotency.stalled_keys SET (security_barrier = true);
