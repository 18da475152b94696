-- sql/portable/cleanup.sql: the portable body of src/cleanup.c,
-- purge_expired_batch() (the procedure purge_expired() is SQL in both
-- editions).
--
-- Each walk is, as in the C, one statement run as the extension owner,
--
--   DELETE FROM rel WHERE ctid = ANY (ARRAY(SELECT p.ctid FROM rel p
--     WHERE <may go> AND <not referenced> ORDER BY <time column> LIMIT n
--     FOR UPDATE OF p SKIP LOCKED))
--
-- and, since 1.6, a last walk that drops the answers past
-- response_expires_at of keys that live on: an UPDATE of the same shape
-- (SET response_body = NULL, response_expires_at = '-infinity', without
-- <not referenced>: the row stays),
--
-- where <not referenced> leaves out the rows that an application's NO
-- ACTION or RESTRICT foreign key references (those whose DELETE trigger
-- fires in this session, on tables the owner may read without row
-- security), with the key's equality operators and the referenced
-- column's collation.  A batch that fails on one row with an integrity,
-- trigger or PL/pgSQL error is rolled back and done again row by row,
-- each write in a subtransaction of its own; the rows that fail stay and
-- are counted in a WARNING.  One clock reading per call.
--
-- Edition differences (doc/portable.md): the statements are built at
-- each call (the C keeps them until the foreign keys change); the
-- function is SECURITY DEFINER with SET search_path = pg_catalog, pg_temp
-- (since 1.7; the C switches to the owner inside the call), so the
-- triggers and rules of the purged tables run with that search_path
-- where the C's run with the caller's; a batch that deletes nothing emits
-- an empty transactional logical message, so that its commit is flushed
-- and makes the earlier batches of purge_expired() durable (the C flushes
-- the WAL itself).

-- portable helper: since 1.0

-- The condition <not referenced> of the rows "p" of a relation.
CREATE FUNCTION idempotency.portable_unreferenced(rel regclass)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    silent pg_catalog."char" := CASE WHEN pg_catalog.current_setting('session_replication_role')
                               OPERATOR(pg_catalog.=) 'replica' THEN 'O' ELSE 'R' END;
    con record;
    result pg_catalog.text := '';
    conds pg_catalog.text;
BEGIN
    FOR con IN
        SELECT c.oid, c.conrelid, c.contype, c.confrelid, c.conkey, c.confkey, c.conpfeqop,
               k.relkind, k.relnamespace
          FROM pg_catalog.pg_constraint c
          JOIN pg_catalog.pg_class k ON k.oid OPERATOR(pg_catalog.=) c.conrelid
         WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY(
                   SELECT t.tgconstraint FROM pg_catalog.pg_trigger t
                    WHERE t.tgrelid OPERATOR(pg_catalog.=) rel
                      AND t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[
                              'pg_catalog."RI_FKey_noaction_del"'::pg_catalog.regproc,
                              'pg_catalog."RI_FKey_restrict_del"'::pg_catalog.regproc]::pg_catalog.oid[])
                      AND t.tgenabled OPERATOR(pg_catalog.<>) 'D'
                      AND t.tgenabled OPERATOR(pg_catalog.<>) silent))
         ORDER BY c.oid
    LOOP
        -- a key the owner may not read is left to its check
        CONTINUE WHEN con.contype OPERATOR(pg_catalog.<>) 'f'
                   OR con.confrelid OPERATOR(pg_catalog.<>) rel
                   OR NOT pg_catalog.has_schema_privilege(con.relnamespace, 'USAGE')
                   OR NOT pg_catalog.has_table_privilege(con.conrelid, 'SELECT')
                   OR pg_catalog.row_security_active(con.conrelid);
        SELECT pg_catalog.string_agg(pg_catalog.format('p.%I OPERATOR(%I.%s) x.%I%s',
                   pa.attname, ns.nspname, o.oprname, fa.attname,
                   CASE WHEN pa.attcollation OPERATOR(pg_catalog.<>) 0
                             AND pa.attcollation OPERATOR(pg_catalog.<>) fa.attcollation
                        THEN (SELECT pg_catalog.format(' COLLATE %I.%I', cn.nspname, co.collname)
                                FROM pg_catalog.pg_collation co
                                JOIN pg_catalog.pg_namespace cn ON cn.oid OPERATOR(pg_catalog.=) co.collnamespace
                               WHERE co.oid OPERATOR(pg_catalog.=) pa.attcollation)
                        ELSE '' END), ' AND ' ORDER BY u.n)
          INTO conds
          FROM ROWS FROM (pg_catalog.unnest(con.conkey), pg_catalog.unnest(con.confkey),
                         pg_catalog.unnest(con.conpfeqop)) WITH ORDINALITY AS u(fk, pk, op, n)
          JOIN pg_catalog.pg_attribute fa ON fa.attrelid OPERATOR(pg_catalog.=) con.conrelid
                                          AND fa.attnum OPERATOR(pg_catalog.=) u.fk
          JOIN pg_catalog.pg_attribute pa ON pa.attrelid OPERATOR(pg_catalog.=) rel
                                          AND pa.attnum OPERATOR(pg_catalog.=) u.pk
          JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) u.op
          JOIN pg_catalog.pg_namespace ns ON ns.oid OPERATOR(pg_catalog.=) o.oprnamespace;
        result := result OPERATOR(pg_catalog.||)
                  pg_catalog.format(' AND NOT EXISTS (SELECT 1 FROM %s%s x WHERE %s)',
                                    CASE WHEN con.relkind OPERATOR(pg_catalog.=) 'p' THEN '' ELSE 'ONLY ' END,
                                    con.conrelid::pg_catalog.regclass, conds);
    END LOOP;
    RETURN result;
END
$$;

-- portable helper: since 1.0, again in 1.6, 1.7

-- Delete at most "room" rows of one walk, or, with "change" (a SET list,
-- 1.6; NULL: delete), update them; returns how many went.  It runs under
-- purge_expired_batch()'s pinned search_path, and so do the triggers and
-- rules of the table.  (The 1.6 and 1.7 scripts replace the walks of
-- older editions: 1.6's deletes only, and both take the caller's
-- search_path to set it around each write.  "change" comes second so
-- that the argument types are neither older walk's, which the 1.6 and
-- 1.7 scripts drop by them.)
CREATE FUNCTION idempotency.portable_purge_walk(rel text, change text, cond text,
                                                unreferenced text, order_column text,
                                                cutoff timestamptz, room bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    candidates pg_catalog.text := pg_catalog.format(
        'SELECT p.ctid FROM idempotency.%I p WHERE %s%s ORDER BY %s LIMIT $2 FOR UPDATE OF p SKIP LOCKED',
        rel, cond, unreferenced, order_column);
    write pg_catalog.text := CASE WHEN change IS NULL
                                  THEN pg_catalog.format('DELETE FROM idempotency.%I', rel)
                                  ELSE pg_catalog.format('UPDATE idempotency.%I SET %s', rel, change) END;
    deleted pg_catalog.int8 := 0;
    skipped pg_catalog.int8 := 0;
    first_error pg_catalog.text;
    row_ctid pg_catalog.tid;
BEGIN
    BEGIN
        EXECUTE pg_catalog.format('%s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(%s))',
                                  write, candidates)
           USING cutoff, room;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        RETURN deleted;
    EXCEPTION WHEN OTHERS THEN
        IF pg_catalog.left(SQLSTATE, 2) OPERATOR(pg_catalog.<>) ALL (ARRAY['23', '09', '27', 'P0']) THEN
            RAISE;
        END IF;
    END;
    -- row by row: every row that may go, the limit counting deletes
    FOR row_ctid IN EXECUTE candidates USING cutoff, 9223372036854775807::pg_catalog.int8 LOOP
        EXIT WHEN deleted OPERATOR(pg_catalog.>=) room;
        BEGIN
            EXECUTE write OPERATOR(pg_catalog.||) ' WHERE ctid OPERATOR(pg_catalog.=) $1'
               USING row_ctid;
            deleted := deleted OPERATOR(pg_catalog.+) 1;
        EXCEPTION WHEN OTHERS THEN
            IF pg_catalog.left(SQLSTATE, 2) OPERATOR(pg_catalog.<>) ALL (ARRAY['23', '09', '27', 'P0']) THEN
                RAISE;
            END IF;
            skipped := skipped OPERATOR(pg_catalog.+) 1;
            first_error := COALESCE(first_error, SQLERRM);
        END;
    END LOOP;
    IF skipped OPERATOR(pg_catalog.>) 0 AND change IS NOT NULL THEN
        RAISE WARNING '%', pg_catalog.format(
                CASE WHEN skipped OPERATOR(pg_catalog.=) 1
                     THEN 'purge kept %s answer past its response_expires_at that could not be dropped'
                     ELSE 'purge kept %s answers past their response_expires_at that could not be dropped' END,
                skipped)
            USING DETAIL = 'The first row failed with: ' OPERATOR(pg_catalog.||) first_error,
                  HINT = pg_catalog.format('A trigger on "idempotency.%s" that raises an error keeps them; every later purge tries them again.', rel);
    ELSIF skipped OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING '%', pg_catalog.format(
                CASE WHEN skipped OPERATOR(pg_catalog.=) 1
                     THEN 'purge kept %s row of "idempotency.%s" that could not be deleted'
                     ELSE 'purge kept %s rows of "idempotency.%s" that could not be deleted' END,
                skipped, rel)
            USING DETAIL = 'The first row failed with: ' OPERATOR(pg_catalog.||) first_error,
                  HINT = 'A trigger that raises an error, or a foreign key whose ON DELETE action fails, keeps them; every later purge tries them again.';
    END IF;
    RETURN deleted;
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_purge_walk(text, text, text, text, text, timestamptz, bigint) FROM PUBLIC;

-- portable helper: since 1.6

-- An installation of an older edition has the walk without "change".
DO $portable$
BEGIN
    IF pg_catalog.to_regprocedure('idempotency.portable_purge_walk(text, text, text, text, timestamptz, bigint, text)') IS NOT NULL THEN
        DROP FUNCTION idempotency.portable_purge_walk(text, text, text, text, timestamptz, bigint, text);
    END IF;
END
$portable$;

-- portable helper: since 1.7

-- An installation of an older edition has 1.6's walk, which takes the
-- caller's search_path.
DO $portable$
BEGIN
    IF pg_catalog.to_regprocedure('idempotency.portable_purge_walk(text, text, text, text, timestamptz, bigint, text, text)') IS NOT NULL THEN
        DROP FUNCTION idempotency.portable_purge_walk(text, text, text, text, timestamptz, bigint, text, text);
    END IF;
END
$portable$;

-- portable: idempotency_purge_expired_batch_1_6, idempotency_purge_expired_batch
CREATE OR REPLACE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 5
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now pg_catalog.timestamptz;
    processed_retention pg_catalog.interval;
    outbox_retention pg_catalog.interval;
    keys_unref pg_catalog.text;
    tokens_unref pg_catalog.text;
    processed_unref pg_catalog.text;
    outbox_unref pg_catalog.text;
    n_keys pg_catalog.int8 := 0;
    n_tokens pg_catalog.int8 := 0;
    n_processed pg_catalog.int8 := 0;
    n_outbox pg_catalog.int8 := 0;
    n_answers pg_catalog.int8 := 0;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'batch_size must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF $1 OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'batch_size must be positive'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The batch_size given is %s.', $1);
    END IF;
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.purge_expired_batch()');
    now := pg_catalog.clock_timestamp();
    processed_retention := idempotency.portable_arg_interval(NULL, 'processed_retention',
                                                             'idempotency.processed_retention', '7 days');
    outbox_retention := idempotency.portable_arg_interval(NULL, 'outbox_retention',
                                                          'idempotency.outbox_retention', '7 days');
    keys_unref := idempotency.portable_unreferenced('idempotency.idempotency_keys'::pg_catalog.regclass);
    tokens_unref := idempotency.portable_unreferenced('idempotency.tokens'::pg_catalog.regclass);
    processed_unref := idempotency.portable_unreferenced('idempotency.processed_events'::pg_catalog.regclass);
    outbox_unref := idempotency.portable_unreferenced('idempotency.outbox_events'::pg_catalog.regclass);

    n_keys := idempotency.portable_purge_walk('idempotency_keys', NULL,
        'p.expires_at OPERATOR(pg_catalog.<=) $1 AND (p.locked_until IS NULL OR p.locked_until OPERATOR(pg_catalog.<=) $1)',
        keys_unref, 'p.expires_at', now, $1);
    n_tokens := idempotency.portable_purge_walk('tokens', NULL, 'p.expires_at OPERATOR(pg_catalog.<=) $1',
        tokens_unref, 'p.expires_at', now, $1);
    IF n_tokens OPERATOR(pg_catalog.<) $1 THEN
        n_tokens := n_tokens OPERATOR(pg_catalog.+) idempotency.portable_purge_walk('tokens', NULL,
            'p.consumed_at IS NOT NULL AND p.consumed_at OPERATOR(pg_catalog.<=) $1',
            tokens_unref, 'p.consumed_at', now, $1 OPERATOR(pg_catalog.-) n_tokens);
    END IF;
    n_processed := idempotency.portable_purge_walk('processed_events', NULL,
        'p.processed_at OPERATOR(pg_catalog.<=) $1',
        processed_unref, 'p.processed_at', now OPERATOR(pg_catalog.-) processed_retention, $1);
    n_outbox := idempotency.portable_purge_walk('outbox_events', NULL,
        'p.published_at IS NOT NULL AND p.published_at OPERATOR(pg_catalog.<=) $1',
        outbox_unref, 'p.published_at', now OPERATOR(pg_catalog.-) outbox_retention, $1);
    IF idempotency.portable_answers_expire() THEN
        -- 1.6: the answers past response_expires_at of keys that live on
        n_answers := idempotency.portable_purge_walk('idempotency_keys',
            'response_body = NULL, response_expires_at = ''-infinity''',
            'p.response_expires_at OPERATOR(pg_catalog.>) ''-infinity'' AND p.response_expires_at OPERATOR(pg_catalog.<=) $1'
            ' AND p.expires_at OPERATOR(pg_catalog.>) $1',
            '', 'p.response_expires_at', now, $1);
    END IF;

    -- Nothing to delete: purge_expired() is done, and it committed its
    -- earlier batches without waiting for their WAL flush.  This
    -- transaction's commit must then flush, with all the WAL before it,
    -- under the caller's synchronous_commit.  A transaction id alone is not
    -- enough: PostgreSQL commits a transaction that wrote no WAL of its own
    -- asynchronously.  A transactional logical message (empty, prefix
    -- "idempotency.purge") is WAL of this transaction and takes its id.
    IF n_keys OPERATOR(pg_catalog.=) 0 AND n_tokens OPERATOR(pg_catalog.=) 0
       AND n_processed OPERATOR(pg_catalog.=) 0 AND n_outbox OPERATOR(pg_catalog.=) 0
       AND n_answers OPERATOR(pg_catalog.=) 0 THEN
        PERFORM pg_catalog.pg_logical_emit_message(true, 'idempotency.purge', '');
    END IF;

    RETURN QUERY VALUES ('idempotency_keys'::pg_catalog.text, n_keys), ('tokens', n_tokens),
                        ('processed_events', n_processed), ('outbox_events', n_outbox);
    IF idempotency.portable_answers_expire() THEN
        RETURN QUERY VALUES ('idempotency_keys.response_body'::pg_catalog.text, n_answers);
    END IF;
END
$$;
