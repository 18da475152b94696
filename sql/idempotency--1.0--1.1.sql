-- idempotency 1.0 -> 1.1 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and then this one, so a fresh 1.1 and an updated one are
-- the same.  A function whose signature changes is dropped and created
-- again; the roles that could execute the old one are granted the new one.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.1'" to load this file. \quit

-- Grant EXECUTE on routine "to" to every role that holds it on "from"
-- (the old signature, before it is dropped).  Dropped at the end.  A
-- regrole's text is its name quoted where needed ("svc-api"): quoted
-- again with quote_ident(), as this script did until 1.7, it named a
-- role that does not exist and the update failed, so nobody has run this
-- script to its end with such a role.
CREATE FUNCTION idempotency.copy_execute_grants(from_routine regprocedure, to_routine regprocedure)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee oid;
BEGIN
    FOR grantee IN
        SELECT a.grantee
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid OPERATOR(pg_catalog.=) from_routine
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', to_routine,
            CASE WHEN grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;

--
-- Request keys: complete() and a final fail() take the replay window, ttl.
--
CREATE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer  DEFAULT 200,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_complete_1_1'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval) IS 'store the answer of a held key; later claims replay it, for ttl from now when given';
REVOKE ALL ON FUNCTION idempotency.complete(text, bigint, jsonb, integer, text, interval) FROM PUBLIC;
SELECT idempotency.copy_execute_grants('idempotency.complete(text,bigint,jsonb,integer,text)',
                                       'idempotency.complete(text,bigint,jsonb,integer,text,interval)');
DROP FUNCTION idempotency.complete(text, bigint, jsonb, integer, text);

CREATE FUNCTION idempotency.fail(
    key           text,
    fence         bigint,
    error         jsonb    DEFAULT NULL,
    response_code integer  DEFAULT 500,
    retryable     boolean  DEFAULT true,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_fail_1_1'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval) IS 'record a failure of a held key: retryable ones are resumed, final ones replayed (for ttl from now when given)';
REVOKE ALL ON FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text, interval) FROM PUBLIC;
SELECT idempotency.copy_execute_grants('idempotency.fail(text,bigint,jsonb,integer,boolean,text)',
                                       'idempotency.fail(text,bigint,jsonb,integer,boolean,text,interval)');
DROP FUNCTION idempotency.fail(text, bigint, jsonb, integer, boolean, text);

--
-- Outbox: every claim_events() call leases its events under a new token,
-- and mark_published() / mark_failed() leave alone an event whose lease
-- another relay has taken over since.
--
CREATE SEQUENCE idempotency.outbox_lease_seq AS bigint;
COMMENT ON SEQUENCE idempotency.outbox_lease_seq IS 'lease tokens of claim_events()';
SELECT pg_catalog.pg_extension_config_dump('idempotency.outbox_lease_seq', '');
REVOKE ALL ON SEQUENCE idempotency.outbox_lease_seq FROM PUBLIC;
ALTER TABLE idempotency.outbox_events ADD COLUMN lease_token bigint;
COMMENT ON COLUMN idempotency.outbox_events.lease_token IS 'token of the claim_events() call that leased the event last; marks with another token change nothing';

CREATE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_published_1_1'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.mark_published(bigint[], bigint) IS 'mark claimed events published; returns how many were pending and still leased to the caller';
REVOKE ALL ON FUNCTION idempotency.mark_published(bigint[], bigint) FROM PUBLIC;
SELECT idempotency.copy_execute_grants('idempotency.mark_published(bigint[])',
                                       'idempotency.mark_published(bigint[],bigint)');
DROP FUNCTION idempotency.mark_published(bigint[]);

CREATE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'idempotency_mark_failed_1_1'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.mark_failed(bigint[], text, bigint) IS 'put claimed events back after an exponential backoff, or make them dead after idempotency.outbox_max_attempts failures; only events still leased to the caller';
REVOKE ALL ON FUNCTION idempotency.mark_failed(bigint[], text, bigint) FROM PUBLIC;
SELECT idempotency.copy_execute_grants('idempotency.mark_failed(bigint[],text)',
                                       'idempotency.mark_failed(bigint[],text,bigint)');
DROP FUNCTION idempotency.mark_failed(bigint[], text);

--
-- Batches: many events in one call, for producers and consumers that work
-- in batches (a Kafka poll, a bulk import).
--
CREATE FUNCTION idempotency.enqueue_events(
    aggregate_types text[],
    aggregate_ids   text[],
    event_types     text[],
    payloads        jsonb[],
    headers         jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'idempotency_enqueue_events'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;
COMMENT ON FUNCTION idempotency.enqueue_events(text[], text[], text[], jsonb[], jsonb[]) IS 'enqueue_event for many events at once, one per array element, in array order; returns their ids in that order';
REVOKE ALL ON FUNCTION idempotency.enqueue_events(text[], text[], text[], jsonb[], jsonb[]) FROM PUBLIC;
-- whoever may enqueue one event may enqueue many
SELECT idempotency.copy_execute_grants('idempotency.enqueue_event(text,text,text,jsonb,jsonb)',
                                       'idempotency.enqueue_events(text[],text[],text[],jsonb[],jsonb[])');

CREATE FUNCTION idempotency.process_once(consumer text, event_ids text[])
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'idempotency_process_once_batch'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;
COMMENT ON FUNCTION idempotency.process_once(text, text[]) IS 'inbox dedup for a batch: the event ids seen for the first time, in the order given';
REVOKE ALL ON FUNCTION idempotency.process_once(text, text[]) FROM PUBLIC;
SELECT idempotency.copy_execute_grants('idempotency.process_once(text,text)',
                                       'idempotency.process_once(text,text[])');

--
-- Privileges: grant_usage() picks the application's functions by name, so
-- a new signature needs no new list.
--
CREATE OR REPLACE FUNCTION idempotency.grant_usage(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    routine regprocedure;
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION 'role must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA idempotency TO %s', role);
    FOR routine IN
        SELECT p.oid::pg_catalog.regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'idempotency'::pg_catalog.regnamespace
           AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY[
                   'fingerprint', 'claim', 'complete', 'fail', 'checkpoint', 'release',
                   'lookup', 'execute', 'issue_token', 'consume_token', 'transition',
                   'enqueue_event', 'enqueue_events', 'emit_event', 'claim_events', 'mark_published',
                   'mark_failed', 'process_once', 'lock_key', 'try_lock']::pg_catalog.name[])
         ORDER BY 1
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', routine, role);
    END LOOP;
    EXECUTE pg_catalog.format(
        'GRANT SELECT ON idempotency.stats, idempotency.stalled_keys TO %s', role);
END
$$;

DROP FUNCTION idempotency.copy_execute_grants(regprocedure, regprocedure);
