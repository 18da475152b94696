-- sql/portable/cron.sql: the portable bodies of src/cron.c,
-- schedule_cleanup() and unschedule_cleanup(): the pg_cron job
-- "idempotency-cleanup" that runs purge_expired() in this database.
--
-- pg_cron keeps its jobs in the one database named by cron.database_name.
-- When that is this database the job is written with
-- cron.schedule_in_database() inside the caller's transaction, as in the
-- C.  Otherwise the C connects to that database over libpq; PL/pgSQL cannot,
-- so the portable edition goes through dblink when the dblink extension is
-- installed in this database and the caller is a superuser (dblink asks
-- anyone else for a password, which this function has not), and otherwise
-- raises 0A000 with a hint that gives the statement to run in pg_cron's
-- database.  Both run with the caller's rights (pg_cron names
-- jobs per user) and reach pg_cron through the helper
-- idempotency.portable_cron_query(), which a role other than the owner
-- needs EXECUTE on to call them (doc/portable.md).

-- portable helper: since 1.0

-- Run one statement in pg_cron's database and return the first column of
-- its first row as text: here through EXECUTE, elsewhere through dblink.
-- Raises 0A000 when pg_cron is not loaded or cannot be reached.
CREATE FUNCTION idempotency.portable_cron_query(sql text)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    cron_database pg_catalog.text;
    dblink_schema pg_catalog.name;
    superuser pg_catalog.bool;
    socket_dir pg_catalog.text;
    result pg_catalog.text;
BEGIN
    SELECT s.setting INTO cron_database FROM pg_catalog.pg_settings s
     WHERE s.name OPERATOR(pg_catalog.=) 'cron.database_name'
       AND s.context OPERATOR(pg_catalog.=) 'postmaster';
    -- cron.database_name is shown only to superusers and members of
    -- pg_read_all_settings (the C reads it regardless); any role sees the
    -- database of pg_cron's scheduler in pg_stat_activity
    IF cron_database IS NULL THEN
        SELECT a.datname INTO cron_database FROM pg_catalog.pg_stat_activity a
         WHERE a.application_name OPERATOR(pg_catalog.=) 'pg_cron scheduler'
           AND a.datname IS NOT NULL
         ORDER BY a.backend_start LIMIT 1;
    END IF;
    IF cron_database IS NULL THEN
        RAISE EXCEPTION 'pg_cron is not loaded'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Scheduling cleanup needs the pg_cron extension.',
                  HINT = 'Install pg_cron (Debian: apt-get install postgresql-15-cron), add it to shared_preload_libraries, set cron.database_name, restart the server, and run CREATE EXTENSION pg_cron in that database; or run CALL idempotency.purge_expired() from any other scheduler.';
    END IF;
    IF cron_database OPERATOR(pg_catalog.=) pg_catalog.current_database() THEN
        IF pg_catalog.left(sql, 7) OPERATOR(pg_catalog.=) 'SELECT ' THEN
            EXECUTE sql INTO result;
        ELSE
            EXECUTE sql;
        END IF;
        RETURN result;
    END IF;
    SELECT n.nspname INTO dblink_schema FROM pg_catalog.pg_extension e
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
     WHERE e.extname OPERATOR(pg_catalog.=) 'dblink';
    -- dblink connects without a password here, which it allows superusers
    -- only: anyone else is told what to run in pg_cron's database
    superuser := (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER);
    IF dblink_schema IS NULL OR NOT superuser THEN
        RAISE EXCEPTION 'pg_cron runs in database "%", which this edition reaches only through dblink', cron_database
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The portable edition cannot connect to another database by itself, and connects through dblink only for a superuser.',
                  HINT = pg_catalog.format('%s run in database "%s": SELECT cron.schedule_in_database(''idempotency-cleanup'', ''*/5 * * * *'', ''CALL idempotency.purge_expired()'', %L);',
                                           CASE WHEN superuser THEN 'Run CREATE EXTENSION dblink in this database, or'
                                                ELSE 'As this role,' END,
                                           cron_database, pg_catalog.current_database());
    END IF;
    socket_dir := pg_catalog.split_part(pg_catalog.current_setting('unix_socket_directories'), ',', 1);
    EXECUTE pg_catalog.format('SELECT t.r FROM %I.dblink($1, $2) AS t(r pg_catalog.text)', dblink_schema)
       INTO result
       USING pg_catalog.format('host=%s port=%s dbname=%s user=%s options=%s application_name=%s connect_timeout=10',
                               pg_catalog.quote_literal(CASE WHEN pg_catalog.btrim(socket_dir) OPERATOR(pg_catalog.=) ''
                                                             THEN 'localhost' ELSE pg_catalog.btrim(socket_dir) END),
                               pg_catalog.current_setting('port'),
                               pg_catalog.quote_literal(cron_database),
                               pg_catalog.quote_literal(CURRENT_USER),
                               pg_catalog.quote_literal('-c search_path=pg_catalog'),
                               pg_catalog.quote_literal('idempotency schedule_cleanup')),
             sql;
    RETURN result;
END
$$;

-- portable: idempotency_schedule_cleanup
CREATE FUNCTION idempotency.schedule_cleanup(schedule text DEFAULT '*/5 * * * *')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    here CONSTANT pg_catalog.text := pg_catalog.current_database();
    other pg_catalog.text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'schedule must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.char_length($1) OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'schedule must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.char_length($1) OPERATOR(pg_catalog.>) 255 THEN
        RAISE EXCEPTION 'schedule is too long'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('It has %s characters; at most 255 are allowed.', pg_catalog.char_length($1));
    END IF;
    -- the job may be written by another session: check this one first
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idempotency.schedule_cleanup() in a read-only transaction'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF idempotency.portable_cron_query('SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) ''pg_cron''') IS NULL THEN
        IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
            RAISE EXCEPTION 'pg_cron is not installed in database "%"', idempotency.portable_cron_query('SELECT pg_catalog.current_database()')
                USING ERRCODE = 'feature_not_supported',
                      HINT = pg_catalog.format('A superuser can run CREATE EXTENSION pg_cron in database "%s" (cron.database_name).',
                                               idempotency.portable_cron_query('SELECT pg_catalog.current_database()'));
        END IF;
        PERFORM idempotency.portable_cron_query('CREATE EXTENSION IF NOT EXISTS pg_cron');
    END IF;
    other := idempotency.portable_cron_query(pg_catalog.format(
        'SELECT database FROM cron.job WHERE jobname OPERATOR(pg_catalog.=) %L AND username OPERATOR(pg_catalog.=) CURRENT_USER',
        'idempotency-cleanup'));
    IF other IS NOT NULL AND other OPERATOR(pg_catalog.<>) here THEN
        RAISE EXCEPTION 'pg_cron job "idempotency-cleanup" of this user already runs in database "%"', other
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'pg_cron job names are unique per user.',
                  HINT = pg_catalog.format('Call idempotency.unschedule_cleanup() in database "%s" first, or schedule as another role.', other);
    END IF;
    RETURN idempotency.portable_cron_query(pg_catalog.format(
        'SELECT cron.schedule_in_database(%L, %L, %L, %L)',
        'idempotency-cleanup', $1, 'CALL idempotency.purge_expired()', here))::pg_catalog.int8;
END
$$;

-- portable: idempotency_unschedule_cleanup
CREATE FUNCTION idempotency.unschedule_cleanup()
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute idempotency.unschedule_cleanup() in a read-only transaction'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF idempotency.portable_cron_query('SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) ''pg_cron''') IS NULL THEN
        RETURN false;
    END IF;
    RETURN idempotency.portable_cron_query(pg_catalog.format(
        'SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname OPERATOR(pg_catalog.=) %L'
        ' AND database OPERATOR(pg_catalog.=) %L AND username OPERATOR(pg_catalog.=) CURRENT_USER',
        'idempotency-cleanup', pg_catalog.current_database())) IS NOT NULL;
END
$$;
