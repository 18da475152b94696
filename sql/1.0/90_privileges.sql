--
-- Section 8: privileges.  Nothing is usable by PUBLIC; grant_usage() hands
-- an application role what it needs.  The functions of sections 1, 2, 4
-- and 5 run their bookkeeping as the extension owner (see
-- src/bookkeeping.c), so the role needs no access to the tables.  A
-- function that has to be SECURITY DEFINER pins search_path.  Defining
-- state machines, cleanup and granting stay with the owner.
--

-- The allow-list is by signature; an entry missing from this version is
-- skipped.  Not SECURITY DEFINER: GRANT runs with the caller's rights.
CREATE FUNCTION idempotency.grant_usage(role regrole)
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
        SELECT r.r
          FROM pg_catalog.unnest(ARRAY[
                   'idempotency.fingerprint(jsonb)',
                   'idempotency.claim(text,jsonb,text,interval,interval)',
                   'idempotency.complete(text,bigint,jsonb,integer,text)',
                   'idempotency.fail(text,bigint,jsonb,integer,boolean,text)',
                   'idempotency.checkpoint(text,bigint,text,interval,text)',
                   'idempotency.release(text,bigint,text)',
                   'idempotency.lookup(text,text)',
                   'idempotency.execute(text,jsonb,text,text[],text,interval)',
                   'idempotency.issue_token(text,interval)',
                   'idempotency.consume_token(uuid,text)',
                   'idempotency.transition(regclass,name,text,name,text,text,jsonb)',
                   'idempotency.enqueue_event(text,text,text,jsonb,jsonb)',
                   'idempotency.claim_events(integer,interval)',
                   'idempotency.mark_published(bigint[])',
                   'idempotency.mark_failed(bigint[],text)',
                   'idempotency.emit_event(text,text,text,jsonb,jsonb)',
                   'idempotency.process_once(text,text)',
                   'idempotency.lock_key(text)',
                   'idempotency.try_lock(text)']) AS s(signature),
               LATERAL pg_catalog.to_regprocedure(s.signature) AS r(r)
         WHERE r.r IS NOT NULL
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', routine, role);
    END LOOP;
    EXECUTE pg_catalog.format(
        'GRANT SELECT ON idempotency.stats, idempotency.stalled_keys TO %s', role);
END
$$;
COMMENT ON FUNCTION idempotency.grant_usage(regrole) IS 'give a role what an application needs: the request-key, token, outbox, inbox and lock functions, transition and the views; no access to the tables';

-- pg_dump keeps the rows of these (and the fence sequence, so that fences
-- keep growing after a restore); other sections register their own tables.
SELECT pg_catalog.pg_extension_config_dump('idempotency.idempotency_keys', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.tokens', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.fence_seq', '');

REVOKE ALL ON ALL ROUTINES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON SCHEMA idempotency FROM PUBLIC;
