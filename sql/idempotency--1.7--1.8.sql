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
-- its bindings (grant its scopes again under the new name); a row whose
-- name is no role's restricts the role of its OID meanwhile, so that a
-- renamed role is not let out of its scopes.
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
                        WHERE r.rolname OPERATOR(pg_catalog.=) g.role_name
                           OR r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);
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
                        WHERE r.rolname OPERATOR(pg_catalog.=) g.role_name
                           OR r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);
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
                           JOIN pg_catalog.pg_roles gr ON gr.oid OPERATOR(pg_catalog.=) COALESCE(
                                (SELECT n.oid FROM pg_catalog.pg_roles n WHERE n.rolname OPERATOR(pg_catalog.=) g.role_name),
                                g.role::pg_catalog.oid)
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
                   JOIN pg_catalog.pg_roles gr ON gr.oid OPERATOR(pg_catalog.=) COALESCE(
                                (SELECT n.oid FROM pg_catalog.pg_roles n WHERE n.rolname OPERATOR(pg_catalog.=) g.role_name),
                                g.role::pg_catalog.oid)
                  WHERE pg_catalog.pg_has_role(CURRENT_USER, gr.oid, 'USAGE')
                    AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                              WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)),
                true)
 ORDER BY k.locked_until, k.scope, k.idempotency_key;
ALTER VIEW idempotency.stalled_keys SET (security_barrier = true);

-- [section: a bounded number of claims sleep for a key] ---------------------

--
-- A claim given a wait keeps its connection while it sleeps, and the
-- key's holder usually needs one from the same pool or transaction pooler
-- to finish: duplicates that took every connection starved the holder
-- until its lease ran out, and the request ran again.  From 1.8 at most
-- idempotency.max_waiters_per_key claims (superuser-set, default 1) sleep
-- for a key at a time; the others answer in_progress at once, with the
-- time to retry.  In the C edition the library does it for every symbol;
-- the portable edition's claim() body, which changed, lands with the
-- statement of 1.8's symbol above (role bindings by name).

-- [section: settings refused alike in both editions] ------------------------

--
-- The C refuses a bad idempotency.* value at SET (22023); the portable
-- edition reads every setting through one reader per type
-- (sql/portable/settings.sql, replaced by this version's script), which
-- refuses it with the same error at the first call that reads it.
-- execute()'s portable body, which reads idempotency.max_response_bytes
-- itself (it runs with the caller's rights, who may not call the owner's
-- readers), lands with the statement of 1.8's symbol above.

-- [section: bounded outbox leases] ------------------------------------------

--
-- One relay could lease every pending event for a century
-- (claim_events(2147483647, '100 years')) and the others got nothing.
-- claim_events binds 1.8's symbol (stated in the section of role
-- bindings above), which refuses (22023), before it
-- writes anything, a batch above idempotency.outbox_max_batch or a lease
-- above idempotency.outbox_max_lease: settings that only superusers (and
-- roles granted SET on them) change in the C edition; the portable
-- edition takes a session's value only when it is lower than the
-- database's (doc/portable.md).  The library's older symbols keep serving
-- databases not yet updated, unbounded.

--
-- An operator takes leases back: the pending events leased by relay_role
-- (NULL: by any role) whose lease still has more than longer_than to run
-- (NULL: any live lease) become claimable again.  The lease is ended, not
-- erased (the relay is matched by the name its leases record, as the
-- marks match it): locked_until becomes now, so the next claim counts a takeover
-- and hands out a new lease_token, and the relay that held the event can
-- no longer mark it once another relay has leased it (as after a lease
-- that ran out).  attempts, lease_role and the order of each aggregate
-- are kept: claim_events hands an aggregate's events out only after or
-- together with its earlier pending events whatever their leases, so
-- taking some leases back never lets a later event out first.  Plain
-- SQL, the same text in both editions, run with the caller's rights: it
-- needs UPDATE on outbox_events, which only the owner and superusers
-- have, and grant_usage does not grant it.
--
CREATE FUNCTION idempotency.release_event_leases(
    relay_role  regrole  DEFAULT NULL,
    longer_than interval DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
WITH now AS (SELECT pg_catalog.clock_timestamp() AS t),
released AS (
    UPDATE idempotency.outbox_events e
       SET locked_until = now.t
      FROM now
     WHERE e.published_at IS NULL AND e.dead_at IS NULL
       AND e.locked_until OPERATOR(pg_catalog.>) now.t
       AND ($1 IS NULL OR e.lease_role_name OPERATOR(pg_catalog.=)
                          (SELECT r.rolname FROM pg_catalog.pg_roles r
                            WHERE r.oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid))
       AND ($2 IS NULL OR e.locked_until OPERATOR(pg_catalog.>) (now.t OPERATOR(pg_catalog.+) $2))
    RETURNING e.id)
SELECT pg_catalog.count(*) FROM released
$$;
REVOKE ALL ON FUNCTION idempotency.release_event_leases(regrole, interval) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.release_event_leases(regrole, interval) IS 'for operators: end the live leases of pending events (of relay_role, with more than longer_than to run), so that other relays claim them, in order; returns how many';

-- [section: execute() runs the one statement it reads] ----------------------

--
-- The portable body of execute() (sql/portable/execute.sql) changed in 1.8:
-- its lexer reads a statement as the server does under the session's
-- standard_conforming_strings, and it prepares nothing under a name (a
-- statement planted under one ran in the caller's place).  It lands with
-- the statement of 1.8's symbol above (role bindings by name).  The
-- portable edition's settings readers, replaced by this script
-- (settings), no longer depend on that setting either.

-- [section: no outbox promise rests on a session setting] -------------------

--
-- The portable edition kept what a transaction did so far in settings
-- idempotency_portable.*, which any session may set: a preset 'all' left
-- out the buckets' locks, so a relay could be handed a later event of an
-- aggregate while an earlier one was uncommitted, and a preset time or
-- flag kept a commit from notifying and from being counted quiet.  From
-- 1.8 its helpers take every lock again, decide the notification at each
-- enqueue and keep the session's last notification in two sequences that
-- only the extension's owner may use.  Only helpers change
-- (sql/portable/outbox.sql, blocks "again in 1.8", which the edition's
-- build of this script creates or replaces), no function bound to a C
-- symbol: the C edition reads no such setting and changes nothing here.
--

-- [section: grants an update hands on survive a dump] -----------------------

--
-- Within an extension script every GRANT and REVOKE records the object's
-- whole ACL in pg_init_privs as its initial privileges, and pg_dump leaves
-- those out of a dump: a restore's CREATE EXTENSION gives only a fresh
-- install's.  So a grant an update hands on to a new signature (1.5 to 1.6,
-- move_execute_grants), and any grant of a user's on an object that an
-- update script grants or revokes on, is lost by pg_dump and pg_restore.
-- The C edition set pg_init_privs back by hand (1.2 to 1.3,
-- reset_init_privs), which needs a superuser; through pg_tle the updating
-- role is none, and such grants stayed initial privileges.
--
-- queue_pending_grants() does it with GRANT and REVOKE alone, which the
-- owner may run.  For each object of the extension (routine, relation,
-- type, and its schema) whose initial privileges hold an item of another
-- role than its grantor (a fresh install's hold the owner's own only), it
-- revokes every other role's privileges (CASCADE, for the grants made
-- with a grant option), which records the owner's alone as initial, and
-- queues each of them, as they were, in pending_grants.  A deferred
-- constraint trigger there makes the queued grants again at the commit
-- of the update, outside the script, where they are ordinary grants that
-- pg_dump keeps.  The grants are queued in the order of their chains from
-- the owner, and one made by another role than the owner is made as that
-- role (SET LOCAL ROLE) where the committing role may, else as the
-- committing role (the grantee keeps the privilege and grant option), as
-- move_execute_grants does.  Until that commit the roles concerned lack
-- those privileges (a statement after the update in its own transaction
-- sees them revoked; a session that set the constraints IMMEDIATE before
-- the update has them made within the script, initial again, as before
-- 1.8).  It repairs as well the databases that older
-- updates left with such initial privileges.  It runs last in this
-- script, after every section that grants, and a later update script that
-- grants in its course calls it at its end too.  In the plain script of
-- the portable edition there is no extension and nothing to do.
-- (Column privileges are left as they are: no script grants any.)
--
CREATE TABLE idempotency.pending_grants (
    ord bigint NOT NULL,
    statement text NOT NULL,
    grantor name
);
COMMENT ON TABLE idempotency.pending_grants IS 'grants an update makes again at its commit, so that they are not initial privileges (empty outside an update''s transaction)';
REVOKE ALL ON idempotency.pending_grants FROM PUBLIC;

-- Every queued grant in order, by the first of the trigger's calls; the
-- others find the queue empty.
CREATE FUNCTION idempotency.pending_grants_run()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    item record;
    saved_role text := pg_catalog.current_setting('role');
BEGIN
    FOR item IN SELECT g.statement, g.grantor FROM idempotency.pending_grants g ORDER BY g.ord LOOP
        IF item.grantor IS NULL THEN
            EXECUTE item.statement;
            CONTINUE;
        END IF;
        BEGIN
            PERFORM pg_catalog.set_config('role', item.grantor, true);
            EXECUTE item.statement;
            PERFORM pg_catalog.set_config('role', saved_role, true);
        EXCEPTION WHEN OTHERS THEN
            -- the role could not be set, or may not grant (the block's
            -- SET is undone with it): granted by the committing role
            EXECUTE item.statement;
        END;
    END LOOP;
    DELETE FROM idempotency.pending_grants;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION idempotency.pending_grants_run() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER pending_grants_at_commit
AFTER INSERT ON idempotency.pending_grants
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION idempotency.pending_grants_run();

CREATE FUNCTION idempotency.queue_pending_grants()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    obj record;
    revoked text;
BEGIN
    FOR obj IN
        SELECT t.target, t.owner, t.acl, i.initprivs
          FROM pg_catalog.pg_extension e, pg_catalog.pg_init_privs i,
               LATERAL (SELECT 'ROUTINE ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure, p.proowner, p.proacl
                          FROM pg_catalog.pg_proc p
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                           AND p.oid OPERATOR(pg_catalog.=) i.objoid
                        UNION ALL
                        SELECT CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END
                                 OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass, c.relowner, c.relacl
                          FROM pg_catalog.pg_class c
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                           AND c.oid OPERATOR(pg_catalog.=) i.objoid
                        UNION ALL
                        SELECT 'TYPE ' OPERATOR(pg_catalog.||) y.oid::pg_catalog.regtype, y.typowner, y.typacl
                          FROM pg_catalog.pg_type y
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                           AND y.oid OPERATOR(pg_catalog.=) i.objoid
                        UNION ALL
                        SELECT 'SCHEMA ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(n.nspname), n.nspowner, n.nspacl
                          FROM pg_catalog.pg_namespace n
                         WHERE i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                           AND n.oid OPERATOR(pg_catalog.=) i.objoid) AS t(target, owner, acl)
         WHERE e.extname OPERATOR(pg_catalog.=) 'idempotency'
           AND i.privtype OPERATOR(pg_catalog.=) 'e'
           AND i.objsubid OPERATOR(pg_catalog.=) 0
           AND ((i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                 AND i.objoid OPERATOR(pg_catalog.=) e.extnamespace)
                OR EXISTS (SELECT
                             FROM pg_catalog.pg_depend d
                            WHERE d.classid OPERATOR(pg_catalog.=) i.classoid
                              AND d.objid OPERATOR(pg_catalog.=) i.objoid
                              AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                              AND d.refobjid OPERATOR(pg_catalog.=) e.oid
                              AND d.deptype OPERATOR(pg_catalog.=) 'e'))
           AND EXISTS (SELECT FROM pg_catalog.aclexplode(i.initprivs) x
                        WHERE x.grantee OPERATOR(pg_catalog.<>) x.grantor)
    LOOP
        -- the grants as they are now, in the order of their chains
        INSERT INTO idempotency.pending_grants (ord, statement, grantor)
        WITH RECURSIVE acl AS (
            SELECT a.grantee, a.grantor, a.privilege_type, a.is_grantable
              FROM pg_catalog.aclexplode(obj.acl) a
             WHERE a.grantee OPERATOR(pg_catalog.<>) obj.owner
        ), chain AS (
            SELECT acl.grantee, acl.privilege_type, 0 AS depth
              FROM acl WHERE acl.grantor OPERATOR(pg_catalog.=) obj.owner
            UNION
            SELECT acl.grantee, acl.privilege_type, chain.depth OPERATOR(pg_catalog.+) 1
              FROM acl, chain
             WHERE acl.grantor OPERATOR(pg_catalog.=) chain.grantee
               AND acl.privilege_type OPERATOR(pg_catalog.=) chain.privilege_type
               AND chain.depth OPERATOR(pg_catalog.<) 100
        )
        SELECT (SELECT coalesce(pg_catalog.max(g.ord), 0) FROM idempotency.pending_grants g)
                 OPERATOR(pg_catalog.+) pg_catalog.row_number() OVER (
                   ORDER BY (SELECT pg_catalog.min(chain.depth) FROM chain
                              WHERE chain.grantee OPERATOR(pg_catalog.=) acl.grantor
                                AND chain.privilege_type OPERATOR(pg_catalog.=) acl.privilege_type) NULLS FIRST,
                            acl.grantor, acl.grantee, acl.privilege_type),
               pg_catalog.format('GRANT %s ON %s TO %s%s', acl.privilege_type, obj.target,
                   CASE WHEN acl.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE acl.grantee::pg_catalog.regrole::pg_catalog.text END,
                   CASE WHEN acl.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END),
               CASE WHEN acl.grantor OPERATOR(pg_catalog.<>) obj.owner
                    THEN (SELECT r.rolname FROM pg_catalog.pg_roles r
                           WHERE r.oid OPERATOR(pg_catalog.=) acl.grantor) END
          FROM acl;
        -- every other role's privileges revoked (of the roles that still
        -- exist), the grants made with theirs too: the owner's are left,
        -- and recorded as the initial ones
        SELECT pg_catalog.string_agg(DISTINCT
                   CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE x.grantee::pg_catalog.regrole::pg_catalog.text END, ', ')
          INTO revoked
          FROM (SELECT a.grantee FROM pg_catalog.aclexplode(obj.acl) a
                UNION
                SELECT a.grantee FROM pg_catalog.aclexplode(obj.initprivs) a) x
         WHERE x.grantee OPERATOR(pg_catalog.<>) obj.owner
           AND (x.grantee OPERATOR(pg_catalog.=) 0
                OR EXISTS (SELECT FROM pg_catalog.pg_roles r
                            WHERE r.oid OPERATOR(pg_catalog.=) x.grantee));
        IF revoked IS NOT NULL THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s CASCADE', obj.target, revoked);
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION idempotency.queue_pending_grants() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.queue_pending_grants() IS 'in an update script, at its end: the grants of other roles than the owner that pg_init_privs records as initial privileges are revoked, and made again at the commit (pending_grants), so that pg_dump keeps them';

-- last in the script: after the grants of every section above
SELECT idempotency.queue_pending_grants();
