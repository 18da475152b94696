-- sql/portable/keys.sql: the portable bodies of src/keys.c (claim, the
-- holder calls complete, fail, checkpoint and release, and lookup), and
-- the helpers they share with execute (sql/portable/execute.sql).
--
-- They decide as the C does (see the header comment of src/keys.c): a read
-- of the key answers replay, gone, mismatch and in_progress; a key the read
-- found absent is created by an INSERT ... ON CONFLICT DO NOTHING; any
-- other key is taken over by the same INSERT ... ON CONFLICT DO UPDATE
-- ... WHERE <may take over> as the C's, at most three times.  The holder
-- calls are one UPDATE or DELETE guarded by the fence.  One clock reading
-- per call (clock_timestamp()), read again after waiting for another
-- creator of the key.
--
-- Edition differences (doc/portable.md):
-- - the functions that write or read the table of keys are SECURITY
--   DEFINER, where the C switches to the extension owner inside the call;
-- - no lock for creating a key (the C takes one, objsubid 3, and releases
--   it once the key's row is written, since its execute() runs the
--   statement before the row exists; the portable execute() writes the
--   row first): the unique index on key_hash makes a second creator wait
--   inside its INSERT ... ON CONFLICT DO NOTHING for the first one's
--   transaction, so a transaction holds no lock per key it creates,
--   however many.  The clock: when that INSERT inserts nothing (a creator
--   it waited for committed, or the row was there) the claim reads the
--   clock again and decides from the row as a read with a new snapshot
--   shows it (the C reads again only when it waited); when it inserts
--   after waiting for a creator that rolled back (more than 1 ms between
--   the INSERT's own first reading and RETURNING's, and its check of the
--   primary key ran again, which it does only after a wait), one UPDATE
--   writes the row's lease, expiry and times again from RETURNING's
--   reading, in that case only (an UPDATE trigger on the table sees it);
-- - lookup() shows the fence when the role of the session (SET ROLE, or
--   the session user) may read idempotency_keys: a SECURITY DEFINER
--   function cannot see the role that called it;
-- - settings are read at each call with current_setting(name, true): a
--   bad value is refused there (22023), not by SET;
-- - a claim that takes over an expired key whose answer had a
--   response_expires_at writes the row twice (the takeover, then the
--   column set back to NULL), where the C writes it once;
-- - they serve the table of the installed version, from 1.3 on: the
--   helpers that read or write a column that a version added ask
--   portable_answers_expire() (1.6: response_expires_at) whether it is
--   there, and that version's script replaces them ("again in" below:
--   an installation updated to it has the helpers of the edition that
--   installed it); the C's old symbols keep their version's behaviour;
--   1.7's script replaces them too, for the creation of a key without a
--   lock (portable_claim_key, portable_insert_key).
-- - 1.7 (portable_holders_recorded()): the role recorded as a key's
--   holder_role, and checked by the holder calls, is the session's role
--   (portable_caller(): SET ROLE, or the session user), where the C takes
--   the current user; a claim that takes a key over writes the row twice
--   (the takeover, then holder_role), where the C writes it once.
-- - 1.8 (portable_holders_by_name()): the holder's name too, in
--   holder_role_name, which the holder calls check instead of the OID
--   (portable_binding_allows(), src/roles.c's rule).

-- portable helper: since 1.0

-- A key must live at least as long as the lease that protects it.
CREATE FUNCTION idempotency.portable_check_ttl_covers_lease(ttl interval, lease interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF ttl OPERATOR(pg_catalog.<) lease THEN
        RAISE EXCEPTION 'ttl must not be shorter than the lease'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The ttl is %s and the lease is %s.', ttl, lease),
                  HINT = 'Give a longer ttl, or a shorter lease (idempotency.lease_timeout).';
    END IF;
END
$$;

-- An idempotency key: 1 to idempotency.max_key_length characters.
CREATE FUNCTION idempotency.portable_arg_key(key text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    max_chars integer;
    nchars integer;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    max_chars := idempotency.portable_setting_int('idempotency.max_key_length', 255, 1, 400);
    nchars := pg_catalog.char_length(key);
    IF nchars OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'idempotency key must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Send a client-generated unique value, such as a UUID, in the Idempotency-Key header.';
    END IF;
    IF nchars OPERATOR(pg_catalog.>) max_chars THEN
        RAISE EXCEPTION 'idempotency key is too long'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('It has %s characters; idempotency.max_key_length allows %s.',
                                             nchars, max_chars);
    END IF;
END
$$;

-- A response body (idem_arg_response): its size, uncompressed with a
-- 4-byte header as the C measures it (#> '{}' hands back the detoasted
-- value), bounded by idempotency.max_response_bytes.
CREATE FUNCTION idempotency.portable_arg_response(body jsonb, argname text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    max_bytes integer;
    size integer;
BEGIN
    IF body IS NULL THEN
        RETURN;
    END IF;
    max_bytes := idempotency.portable_setting_int('idempotency.max_response_bytes',
                                                  1048576, 1, 268435456);
    size := pg_catalog.pg_column_size(body OPERATOR(pg_catalog.#>) '{}'::pg_catalog.text[]);
    IF size OPERATOR(pg_catalog.>) max_bytes THEN
        RAISE EXCEPTION '% is too large to store', argname
            USING ERRCODE = 'program_limit_exceeded',
                  DETAIL = pg_catalog.format('It takes %s bytes; idempotency.max_response_bytes allows %s.',
                                             size, max_bytes),
                  HINT = 'Store a smaller response, or raise idempotency.max_response_bytes.';
    END IF;
END
$$;

-- PreventCommandIfReadOnly(): a write in a read-only transaction or on a
-- standby.
CREATE FUNCTION idempotency.portable_prevent_if_read_only(command text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', command
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
END
$$;

-- The error of a holder call whose fence no longer holds the key.
CREATE FUNCTION idempotency.portable_lease_lost(key text, scope text, fence bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RAISE EXCEPTION 'idempotency lease lost for key "%"', key
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = pg_catalog.format('Fence %s no longer holds the key in scope "%s": its lease ran out and another claim took the key over, or the key was completed, failed, released or purged.',
                                         fence, scope),
              HINT = 'Abandon this attempt; a retry of the request claims the key again.';
END
$$;

-- The key's row, or NULL (read_key): found by key_hash, and refused
-- (23505) when it is another key's that has the same hash.
CREATE FUNCTION idempotency.portable_read_key(p_scope text, p_key text, p_hash uuid)
RETURNS idempotency.idempotency_keys
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    found_row idempotency.idempotency_keys;
BEGIN
    SELECT k.* INTO found_row
      FROM idempotency.idempotency_keys k
     WHERE k.key_hash OPERATOR(pg_catalog.=) p_hash;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF found_row.scope OPERATOR(pg_catalog.<>) p_scope
       OR found_row.idempotency_key OPERATOR(pg_catalog.<>) p_key THEN
        RAISE EXCEPTION 'idempotency key "%" in scope "%" has the same key_hash as key "%" in scope "%"',
                        p_key, p_scope, found_row.idempotency_key, found_row.scope
            USING ERRCODE = 'unique_violation',
                  DETAIL = 'Two keys share the first 16 bytes of their SHA-256; see doc/reference.md, "Tables".',
                  HINT = 'Use another key for this request.';
    END IF;
    RETURN found_row;
END
$$;

-- Whether the table of keys has response_expires_at, and answers expire
-- (1.6 and later): false here, true from the 1.6 script on.  A helper
-- that reads or writes the column asks it first: PL/pgSQL parses a
-- statement when it first runs it, so the helpers run on the table of an
-- installation at 1.3 to 1.5 too.  Inlined, and planned again when the
-- 1.6 script replaces it.
CREATE FUNCTION idempotency.portable_answers_expire()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT false';

COMMENT ON FUNCTION idempotency.portable_check_ttl_covers_lease(interval, interval) IS 'portable edition: a key lives at least as long as its lease';
COMMENT ON FUNCTION idempotency.portable_arg_key(text) IS 'portable edition: an idempotency key argument';
COMMENT ON FUNCTION idempotency.portable_arg_response(jsonb, text) IS 'portable edition: a response body within idempotency.max_response_bytes';
COMMENT ON FUNCTION idempotency.portable_prevent_if_read_only(text) IS 'portable edition: refuse a write in a read-only transaction';
COMMENT ON FUNCTION idempotency.portable_lease_lost(text, text, bigint) IS 'portable edition: the error of a holder call that lost its key';
COMMENT ON FUNCTION idempotency.portable_read_key(text, text, uuid) IS 'portable edition: the row of a key';

COMMENT ON FUNCTION idempotency.portable_answers_expire() IS 'portable edition: whether answers expire (response_expires_at, 1.6 and later)';

-- Whether claims record the holder's role, and the holder calls check it
-- (holder_role, 1.7 and later): false here, true from the 1.7 script on,
-- asked as portable_answers_expire() is.
CREATE FUNCTION idempotency.portable_holders_recorded()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT false';
COMMENT ON FUNCTION idempotency.portable_holders_recorded() IS 'portable edition: whether claims record the holder''s role (holder_role, 1.7 and later)';

-- Whether claims record the holder's name too, and the holder calls and
-- the marks check names (holder_role_name, lease_role_name, 1.8 and
-- later): false here, true from the 1.8 script on.
CREATE FUNCTION idempotency.portable_holders_by_name()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT false';
COMMENT ON FUNCTION idempotency.portable_holders_by_name() IS 'portable edition: whether role bindings are checked by name (1.8 and later)';

-- portable helper: since 1.0, again in 1.6, 1.7, 1.8, 1.9

-- The tests of the hot paths (1.9): plain SQL, which PostgreSQL inlines
-- into the expression of the body that calls it, so a usual argument
-- costs no call of its own.  Each is true for a value that the helper it
-- names would pass without a word, the setting that helper reads being
-- unset (never SET in the session: NULL) or the C library's default as
-- the library shows it (in a cluster that loads it, as when a database
-- moves between the editions); anything else (NULL, out of bounds, any
-- other value of the setting, even '') goes to that helper, which raises
-- the C's error or passes it.  (The scripts that state the bodies that
-- call them create them: an installation updated by this edition has
-- them whatever edition installed it.)

-- An idempotency key that portable_arg_key() passes.
CREATE FUNCTION idempotency.portable_key_fits(key text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.char_length(key) OPERATOR(pg_catalog.>=) 1
   AND pg_catalog.char_length(key) OPERATOR(pg_catalog.<=) 255
   AND COALESCE(pg_catalog.current_setting('idempotency.max_key_length', true), '255') OPERATOR(pg_catalog.=) '255'
$$;
REVOKE ALL ON FUNCTION idempotency.portable_key_fits(text) FROM PUBLIC;

-- A response body that portable_arg_response() passes.
CREATE FUNCTION idempotency.portable_response_fits(body jsonb)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT body IS NULL
    OR pg_catalog.pg_column_size(body OPERATOR(pg_catalog.#>) '{}'::pg_catalog.text[])
       OPERATOR(pg_catalog.<=) 1048576
   AND COALESCE(pg_catalog.current_setting('idempotency.max_response_bytes', true), '1048576')
       OPERATOR(pg_catalog.=) '1048576'
$$;
REVOKE ALL ON FUNCTION idempotency.portable_response_fits(jsonb) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_key_fits(text) IS 'portable edition: whether portable_arg_key() passes a key at once';
COMMENT ON FUNCTION idempotency.portable_response_fits(jsonb) IS 'portable edition: whether portable_arg_response() passes a body at once';

-- portable helper: since 1.0, again in 1.7

-- A text argument of min_chars..max_chars characters (idem_arg_name).  A
-- scope (argname 'scope', idem_arg_scope) must also be one the session's
-- role may use (portable_check_scope(), sql/portable/scopes.sql: from 1.7
-- on, 42501 outside the role's scope_grants), as in the C, where it is
-- read; the 1.7 script replaces this helper, so that an installation
-- updated to 1.7 checks too.
CREATE FUNCTION idempotency.portable_arg_name(value text, argname text,
                                              min_chars integer, max_chars integer)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    nchars integer;
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION '% must not be null', argname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    nchars := pg_catalog.char_length(value);
    IF nchars OPERATOR(pg_catalog.<) min_chars THEN
        RAISE EXCEPTION '% must not be empty', argname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF nchars OPERATOR(pg_catalog.>) max_chars THEN
        RAISE EXCEPTION '% is too long', argname
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('It has %s characters; at most %s are allowed.',
                                             nchars, max_chars);
    END IF;
    IF argname OPERATOR(pg_catalog.=) 'scope' THEN
        PERFORM idempotency.portable_check_scope(value);
    END IF;
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_arg_name(text, text, integer, integer) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_arg_name(text, text, integer, integer) IS 'portable edition: a text argument of bounded length (a scope: one the session''s role may use)';

-- portable helper: since 1.0

-- The answer of a claim from the key's row when the row decides it
-- (answer_from_row): replay, gone, in_progress or mismatch; NULL when the
-- claim may take the key over.  Plain SQL, inlined into claim()'s
-- expression.  The 1.6 script replaces it, for response_expires_at.
CREATE FUNCTION idempotency.portable_answer(found_row idempotency.idempotency_keys,
                                            request_hash bytea, now timestamptz)
RETURNS idempotency.claim_result
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
SELECT CASE
       WHEN found_row.expires_at OPERATOR(pg_catalog.<=) now THEN NULL
       WHEN found_row.request_hash IS NOT NULL AND request_hash IS NOT NULL
        AND found_row.request_hash OPERATOR(pg_catalog.<>) request_hash
       THEN ROW('mismatch', NULL, found_row.status, NULL, NULL, NULL, NULL, NULL)::idempotency.claim_result
       WHEN found_row.status OPERATOR(pg_catalog.=) 'completed'::idempotency.key_status
         OR (found_row.status OPERATOR(pg_catalog.=) 'failed'::idempotency.key_status
             AND NOT found_row.retryable)
       THEN ROW('replay', NULL, found_row.status, found_row.response_code, found_row.response_body,
                found_row.recovery_point, found_row.attempts, NULL)::idempotency.claim_result
       WHEN found_row.status OPERATOR(pg_catalog.=) 'processing'::idempotency.key_status
        AND found_row.locked_until OPERATOR(pg_catalog.>) now
       -- the time left from the moment of the answer (a second reading of
       -- the clock, as in the C), never more than the lease
       THEN ROW('in_progress', NULL, found_row.status, NULL, NULL, found_row.recovery_point,
                found_row.attempts,
                found_row.locked_until OPERATOR(pg_catalog.-)
                GREATEST(now, LEAST(pg_catalog.clock_timestamp(), found_row.locked_until)))::idempotency.claim_result
       END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_answer(idempotency.idempotency_keys, bytea, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_answer(idempotency.idempotency_keys, bytea, timestamptz) IS 'portable edition: a claim answered from the key''s row';

-- Whether the key's row "k" answers a claim of request hash "request_hash"
-- at "now" with the replay of its completion (a case of portable_answer(),
-- the commonest): claim() reads such a row's answer in the statement
-- that finds it (1.9), and takes every other row to portable_answer().
-- Inlined into that statement.  The 1.6 script replaces it.
CREATE FUNCTION idempotency.portable_replays(k idempotency.idempotency_keys,
                                             request_hash bytea, now timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT k.expires_at OPERATOR(pg_catalog.>) now
   AND k.status OPERATOR(pg_catalog.=) 'completed'::idempotency.key_status
   AND (k.request_hash IS NULL OR request_hash IS NULL
        OR k.request_hash OPERATOR(pg_catalog.=) request_hash)
$$;
REVOKE ALL ON FUNCTION idempotency.portable_replays(idempotency.idempotency_keys, bytea, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_replays(idempotency.idempotency_keys, bytea, timestamptz) IS 'portable edition: whether a key''s row answers replay with its completion';

-- portable helper: since 1.0, again in 1.6, 1.7, 1.8, 1.9

-- (The helpers below read or write response_expires_at from 1.6 on, and
-- holder_role from 1.7 on; 1.7 also creates a key without a lock: the 1.6
-- and 1.7 scripts replace them.  REVOKE, since an installation updated to
-- 1.6 or 1.7 from an older edition gets the ones it lacks from that
-- script.)

-- Create the key, held (the C's INSERT_KEY): the claim, or NULL when
-- another transaction created it first.  No lock keeps other creators
-- out: the unique index on key_hash makes this INSERT wait for a creator
-- in flight.  When that creator rolled back and this one inserted, the
-- row was computed from "now", the clock before the wait, so the lease,
-- the expiry and the times are written again from the clock after it
-- (RETURNING's reading).  The INSERT waited when more than 1 ms went by
-- between the reading just before it and RETURNING's, and its check of
-- the primary key ran more than once: it checks again only after waiting
-- for another transaction (pg_stat_get_xact_numscans() counts the checks;
-- none counted when track_counts is off, and then the time alone
-- decides).  The time alone would also take the first INSERT of a
-- session, whose trigger is compiled then, for a wait.  (The readings are
-- the body's, not a CTE's of the INSERT: a plain INSERT ... VALUES starts
-- at a fraction of the cost, at each call.)
CREATE FUNCTION idempotency.portable_insert_key(p_hash uuid, p_scope text, p_key text,
                                                p_request_hash bytea, now timestamptz,
                                                ttl interval, lease interval)
RETURNS idempotency.claim_result
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    new_status idempotency.key_status;
    new_fence bigint;
    new_attempts integer;
    new_recovery_point text;
    started_at timestamptz;
    checks_before bigint;
    inserted_at timestamptz;
BEGIN
    started_at := pg_catalog.clock_timestamp();
    checks_before := pg_catalog.pg_stat_get_xact_numscans('idempotency.idempotency_keys_pkey'::pg_catalog.regclass);
    IF idempotency.portable_holders_by_name() THEN
        -- 1.8: and its name
        INSERT INTO idempotency.idempotency_keys
               (key_hash, scope, idempotency_key, request_hash, status, fence, attempts,
                recovery_point, locked_until, created_at, updated_at, expires_at, holder_role,
                holder_role_name)
        VALUES (p_hash, p_scope, p_key, p_request_hash, 'processing'::idempotency.key_status,
                pg_catalog.nextval('idempotency.fence_seq'::pg_catalog.regclass), 1,
                'started', now OPERATOR(pg_catalog.+) lease, now, now,
                now OPERATOR(pg_catalog.+) ttl, idempotency.portable_caller(),
                idempotency.portable_caller_name())
        ON CONFLICT (key_hash) DO NOTHING
        RETURNING status, fence, attempts, recovery_point, pg_catalog.clock_timestamp()
             INTO new_status, new_fence, new_attempts, new_recovery_point, inserted_at;
    ELSIF idempotency.portable_holders_recorded() THEN
        -- 1.7: the role that claims is the key's holder
        INSERT INTO idempotency.idempotency_keys
               (key_hash, scope, idempotency_key, request_hash, status, fence, attempts,
                recovery_point, locked_until, created_at, updated_at, expires_at, holder_role)
        VALUES (p_hash, p_scope, p_key, p_request_hash, 'processing'::idempotency.key_status,
                pg_catalog.nextval('idempotency.fence_seq'::pg_catalog.regclass), 1,
                'started', now OPERATOR(pg_catalog.+) lease, now, now,
                now OPERATOR(pg_catalog.+) ttl, idempotency.portable_caller())
        ON CONFLICT (key_hash) DO NOTHING
        RETURNING status, fence, attempts, recovery_point, pg_catalog.clock_timestamp()
             INTO new_status, new_fence, new_attempts, new_recovery_point, inserted_at;
    ELSE
        INSERT INTO idempotency.idempotency_keys
               (key_hash, scope, idempotency_key, request_hash, status, fence, attempts,
                recovery_point, locked_until, created_at, updated_at, expires_at)
        VALUES (p_hash, p_scope, p_key, p_request_hash, 'processing'::idempotency.key_status,
                pg_catalog.nextval('idempotency.fence_seq'::pg_catalog.regclass), 1,
                'started', now OPERATOR(pg_catalog.+) lease, now, now,
                now OPERATOR(pg_catalog.+) ttl)
        ON CONFLICT (key_hash) DO NOTHING
        RETURNING status, fence, attempts, recovery_point, pg_catalog.clock_timestamp()
             INTO new_status, new_fence, new_attempts, new_recovery_point, inserted_at;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF inserted_at OPERATOR(pg_catalog.>) (started_at OPERATOR(pg_catalog.+) '1 millisecond'::pg_catalog.interval)
       AND pg_catalog.pg_stat_get_xact_numscans('idempotency.idempotency_keys_pkey'::pg_catalog.regclass)
           OPERATOR(pg_catalog.-) checks_before OPERATOR(pg_catalog.<>) 1 THEN
        -- it waited for another creator of the key, which rolled back
        UPDATE idempotency.idempotency_keys k SET
               locked_until = inserted_at OPERATOR(pg_catalog.+) lease,
               created_at = inserted_at, updated_at = inserted_at,
               expires_at = inserted_at OPERATOR(pg_catalog.+) ttl
         WHERE k.key_hash OPERATOR(pg_catalog.=) p_hash AND k.fence OPERATOR(pg_catalog.=) new_fence;
    END IF;
    RETURN ROW(CASE WHEN new_attempts OPERATOR(pg_catalog.=) 1 THEN 'claimed' ELSE 'resumed' END,
               new_fence, new_status, NULL, NULL, new_recovery_point, new_attempts,
               NULL)::idempotency.claim_result;
END
$$;


-- The part of a claim that writes (idem_claim_key, after the read that
-- answers replay, gone, mismatch and in_progress, which claim() makes
-- itself): create the key when the read found no row ("row_read" false),
-- else take it over, or answer from the row as it is by then.  "command"
-- names the caller for the read-only error.  Runs as the extension owner.
CREATE FUNCTION idempotency.portable_claim_write(p_key text, p_scope text, hash uuid,
                                                 p_request_hash bytea, row_read boolean,
                                                 now timestamptz, ttl interval, lease interval,
                                                 command text)
RETURNS idempotency.claim_result
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    found_row idempotency.idempotency_keys;
    answer idempotency.claim_result;
    message text;
BEGIN
    -- from here on the claim writes: not in a read-only transaction
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        PERFORM idempotency.portable_prevent_if_read_only(command);
    END IF;

    IF NOT row_read THEN
        -- No lock for creating the key: the INSERT waits for a creator in
        -- flight (the unique index), so a transaction holds no lock per
        -- key it creates.
        IF pg_catalog.current_setting('transaction_isolation')
           OPERATOR(pg_catalog.=) ANY ('{repeatable read,serializable}'::pg_catalog.text[]) THEN
            BEGIN
                answer := idempotency.portable_insert_key(hash, p_scope, p_key, p_request_hash,
                                                          now, ttl, lease);
            EXCEPTION WHEN serialization_failure THEN
                -- a creator committed the key after this transaction's
                -- snapshot: the INSERT's own error, in the C's words
                GET STACKED DIAGNOSTICS message = MESSAGE_TEXT;
                IF message OPERATOR(pg_catalog.<>) 'could not serialize access due to concurrent update' THEN
                    RAISE;
                END IF;
                RAISE EXCEPTION 'could not serialize access due to concurrent claim of idempotency key "%"', p_key
                    USING ERRCODE = 'serialization_failure',
                          HINT = 'Retry the request in a new transaction; it replays or resumes the other claim.';
            END;
        ELSE
            answer := idempotency.portable_insert_key(hash, p_scope, p_key, p_request_hash,
                                                      now, ttl, lease);
        END IF;
        IF answer.outcome IS NOT NULL THEN
            RETURN answer;
        END IF;
        -- Created since the read, by a transaction that the INSERT may have
        -- waited for: read the clock again, and decide from the row as a
        -- new snapshot (READ COMMITTED) shows it.
        now := pg_catalog.clock_timestamp();
        found_row := idempotency.portable_read_key(p_scope, p_key, hash);
        IF found_row.key_hash IS NOT NULL THEN
            answer := idempotency.portable_answer(found_row, p_request_hash, now);
            IF answer.outcome IS NOT NULL THEN
                RETURN answer;
            END IF;
        END IF;
    END IF;

    -- The row read may be gone or changed by now; the upsert decides.  When
    -- it declines it has locked the row, so the read after it is final.
    FOR attempt IN 1..3 LOOP
        INSERT INTO idempotency.idempotency_keys AS k
               (key_hash, scope, idempotency_key, request_hash, status, fence, attempts,
                recovery_point, locked_until, created_at, updated_at, expires_at)
        VALUES (hash, p_scope, p_key, p_request_hash, 'processing',
                pg_catalog.nextval('idempotency.fence_seq'::pg_catalog.regclass), 1,
                'started', now OPERATOR(pg_catalog.+) lease, now, now,
                now OPERATOR(pg_catalog.+) ttl)
        ON CONFLICT (key_hash) DO UPDATE SET
            request_hash = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) now
                                THEN excluded.request_hash
                                ELSE COALESCE(k.request_hash, excluded.request_hash) END,
            status = 'processing',
            fence = excluded.fence,
            attempts = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) now THEN 1
                            ELSE k.attempts OPERATOR(pg_catalog.+) 1 END,
            recovery_point = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) now THEN 'started'
                                  ELSE k.recovery_point END,
            response_code = NULL, response_body = NULL, retryable = NULL,
            locked_until = GREATEST(excluded.locked_until,
                                    pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) lease),
            created_at = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) now
                              THEN excluded.created_at ELSE k.created_at END,
            updated_at = excluded.updated_at,
            expires_at = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) now
                              THEN GREATEST(excluded.expires_at,
                                            GREATEST(excluded.locked_until,
                                                     pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) lease))
                              ELSE GREATEST(k.expires_at,
                                            GREATEST(excluded.locked_until,
                                                     pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) lease)) END
        WHERE k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
          AND (k.expires_at OPERATOR(pg_catalog.<=) now
               OR ((k.request_hash IS NULL OR p_request_hash IS NULL
                    OR k.request_hash OPERATOR(pg_catalog.=) p_request_hash)
                   AND ((k.status OPERATOR(pg_catalog.=) 'processing'
                         AND k.locked_until OPERATOR(pg_catalog.<=) now)
                        OR (k.status OPERATOR(pg_catalog.=) 'failed' AND k.retryable))))
        RETURNING k.* INTO found_row;
        IF FOUND THEN
            IF idempotency.portable_holders_by_name() THEN
                -- 1.8: and its name
                UPDATE idempotency.idempotency_keys k
                   SET response_expires_at = NULL, holder_role = idempotency.portable_caller(),
                       holder_role_name = idempotency.portable_caller_name()
                 WHERE k.key_hash OPERATOR(pg_catalog.=) hash;
            ELSIF idempotency.portable_holders_recorded() THEN
                -- 1.7: the new holder's role, and no response_expires_at
                UPDATE idempotency.idempotency_keys k
                   SET response_expires_at = NULL, holder_role = idempotency.portable_caller()
                 WHERE k.key_hash OPERATOR(pg_catalog.=) hash;
            ELSIF idempotency.portable_answers_expire() THEN
                -- 1.6: a key taken over holds no answer, so no
                -- response_expires_at (an expired key's may be set)
                IF found_row.response_expires_at IS NOT NULL THEN
                    UPDATE idempotency.idempotency_keys k SET response_expires_at = NULL
                     WHERE k.key_hash OPERATOR(pg_catalog.=) hash;
                END IF;
            END IF;
            RETURN ROW(CASE WHEN found_row.attempts OPERATOR(pg_catalog.=) 1 THEN 'claimed' ELSE 'resumed' END,
                       found_row.fence, found_row.status, NULL, NULL, found_row.recovery_point,
                       found_row.attempts, NULL)::idempotency.claim_result;
        END IF;
        found_row := idempotency.portable_read_key(p_scope, p_key, hash);
        IF found_row.key_hash IS NOT NULL THEN
            answer := idempotency.portable_answer(found_row, p_request_hash, now);
            IF answer.outcome IS NOT NULL THEN
                RETURN answer;
            END IF;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'could not claim idempotency key "%" due to concurrent changes', p_key
        USING ERRCODE = 'serialization_failure',
              HINT = 'Retry the request; the next claim decides from the key''s current state.';
END
$$;

-- An interval argument of complete() and fail() that only a final answer
-- takes (ttl, response_ttl): NULL, or checked as portable_arg_interval().
CREATE FUNCTION idempotency.portable_arg_final_interval(value interval, argname text,
                                                        final boolean)
RETURNS interval
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF value IS NOT NULL AND NOT final THEN
        RAISE EXCEPTION '% applies only to a final answer', argname
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A retryable failure is resumed by the next claim, not replayed.',
                  HINT = pg_catalog.format('Pass retryable => false to replay the error for %s, or leave %s NULL.',
                                           argname, argname);
    END IF;
    RETURN CASE WHEN value IS NOT NULL
                THEN idempotency.portable_arg_interval(value, argname, NULL, NULL) END;
END
$$;

-- The holder calls complete() and fail() (finish_held_key): the checks in
-- the C's order, then one UPDATE guarded by the fence.  ttl and
-- response_ttl are NULL in the versions without them (before 1.1, 1.6).
CREATE FUNCTION idempotency.portable_finish_held_key(p_key text, p_fence bigint, body jsonb,
                                                     code integer, p_scope text,
                                                     completed boolean, p_retryable boolean,
                                                     ttl interval, response_ttl interval)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    now timestamptz;
    final boolean;              -- (set where it is read: one expression fewer)
    caller regrole;
BEGIN
    -- The usual call (a key, body, code and scope that pass their tests,
    -- no ttl nor response_ttl, idempotency.default_response_ttl unset or
    -- empty, writable) is one expression of this body's; any other is checked in
    -- the C's order, each argument by its test and then its helper, which
    -- raises the C's error.
    IF (ttl IS NULL AND response_ttl IS NULL AND p_fence IS NOT NULL
        AND code OPERATOR(pg_catalog.>=) 100 AND code OPERATOR(pg_catalog.<=) 599
        AND idempotency.portable_key_fits(p_key) AND idempotency.portable_response_fits(body)
        AND idempotency.portable_scope_fits(p_scope)
        AND COALESCE(pg_catalog.current_setting('idempotency.default_response_ttl', true), '')
            OPERATOR(pg_catalog.=) ''
        AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off') IS NOT TRUE THEN
        final := completed OR NOT p_retryable;
        IF idempotency.portable_key_fits(p_key) IS NOT TRUE THEN
            PERFORM idempotency.portable_arg_key(p_key);
        END IF;
        IF p_fence IS NULL THEN
            RAISE EXCEPTION 'fence must not be null'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF idempotency.portable_response_fits(body) IS NOT TRUE THEN
            PERFORM idempotency.portable_arg_response(body, CASE WHEN completed THEN 'response_body' ELSE 'error' END);
        END IF;
        IF code IS NULL THEN
            RAISE EXCEPTION 'response_code must not be null'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF code OPERATOR(pg_catalog.<) 100 OR code OPERATOR(pg_catalog.>) 599 THEN
            RAISE EXCEPTION 'response_code % is not an HTTP status code', code
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Use a code from 100 to 599.';
        END IF;
        IF idempotency.portable_scope_fits(p_scope) IS NOT TRUE THEN
            PERFORM idempotency.portable_arg_name(p_scope, 'scope', 0, 255);
        END IF;
        IF ttl IS NOT NULL THEN
            ttl := idempotency.portable_arg_final_interval(ttl, 'ttl', final);
        END IF;
        IF response_ttl IS NOT NULL THEN
            response_ttl := idempotency.portable_arg_final_interval(response_ttl, 'response_ttl', final);
        END IF;
        IF response_ttl IS NULL AND final AND idempotency.portable_answers_expire() THEN
            response_ttl := idempotency.portable_arg_interval(NULL, 'response_ttl',
                                                              'idempotency.default_response_ttl', NULL);
        END IF;
        PERFORM idempotency.portable_prevent_if_read_only(
            CASE WHEN completed THEN 'idempotency.complete()' ELSE 'idempotency.fail()' END);
    END IF;

    now := pg_catalog.clock_timestamp();
    IF idempotency.portable_holders_recorded() THEN
        -- 1.7: only the holder's role, or a member of it, acts as the
        -- holder: another role's key is refused whatever the fence (1.8:
        -- the role its name names, portable_holder_allows())
        caller := idempotency.portable_caller();
        IF response_ttl IS NULL THEN
            UPDATE idempotency.idempotency_keys k SET
                   status = CASE WHEN completed THEN 'completed'::idempotency.key_status
                                 ELSE 'failed'::idempotency.key_status END,
                   response_code = code, response_body = body,
                   retryable = CASE WHEN completed THEN NULL ELSE p_retryable END,
                   locked_until = NULL, updated_at = now,
                   expires_at = COALESCE(now OPERATOR(pg_catalog.+) ttl, k.expires_at)
             WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.portable_key_hash(p_scope, p_key)
               AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
               AND k.fence OPERATOR(pg_catalog.=) p_fence AND k.status OPERATOR(pg_catalog.=) 'processing'
               AND k.expires_at OPERATOR(pg_catalog.>) now
               AND idempotency.portable_holder_allows(k, caller);
        ELSE
            UPDATE idempotency.idempotency_keys k SET
                   status = CASE WHEN completed THEN 'completed'::idempotency.key_status
                                 ELSE 'failed'::idempotency.key_status END,
                   response_code = code, response_body = body,
                   retryable = CASE WHEN completed THEN NULL ELSE p_retryable END,
                   locked_until = NULL, updated_at = now,
                   expires_at = COALESCE(now OPERATOR(pg_catalog.+) ttl, k.expires_at),
                   response_expires_at = CASE WHEN now OPERATOR(pg_catalog.+) response_ttl OPERATOR(pg_catalog.<)
                                                   COALESCE(now OPERATOR(pg_catalog.+) ttl, k.expires_at)
                                              THEN now OPERATOR(pg_catalog.+) response_ttl END
             WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.portable_key_hash(p_scope, p_key)
               AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
               AND k.fence OPERATOR(pg_catalog.=) p_fence AND k.status OPERATOR(pg_catalog.=) 'processing'
               AND k.expires_at OPERATOR(pg_catalog.>) now
               AND idempotency.portable_holder_allows(k, caller);
        END IF;
        IF NOT FOUND THEN
            PERFORM idempotency.portable_refuse_other_holder(p_scope, p_key, caller, now);
            PERFORM idempotency.portable_lease_lost(p_key, p_scope, p_fence);
        END IF;
        RETURN;
    END IF;
    -- As in the C, the first statement leaves response_expires_at (1.6)
    -- alone: NULL in a held key, the answer lives as long as the key, and
    -- a completion without response_ttl stays a HOT update; the second
    -- sets it, to NULL too when it is not before the key's expires_at.
    IF response_ttl IS NULL THEN
        UPDATE idempotency.idempotency_keys k SET
               status = CASE WHEN completed THEN 'completed'::idempotency.key_status
                             ELSE 'failed'::idempotency.key_status END,
               response_code = code, response_body = body,
               retryable = CASE WHEN completed THEN NULL ELSE p_retryable END,
               locked_until = NULL, updated_at = now,
               expires_at = COALESCE(now OPERATOR(pg_catalog.+) ttl, k.expires_at)
         WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.portable_key_hash(p_scope, p_key)
           AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
           AND k.fence OPERATOR(pg_catalog.=) p_fence AND k.status OPERATOR(pg_catalog.=) 'processing'
           AND k.expires_at OPERATOR(pg_catalog.>) now;
    ELSE
        UPDATE idempotency.idempotency_keys k SET
               status = CASE WHEN completed THEN 'completed'::idempotency.key_status
                             ELSE 'failed'::idempotency.key_status END,
               response_code = code, response_body = body,
               retryable = CASE WHEN completed THEN NULL ELSE p_retryable END,
               locked_until = NULL, updated_at = now,
               expires_at = COALESCE(now OPERATOR(pg_catalog.+) ttl, k.expires_at),
               response_expires_at = CASE WHEN now OPERATOR(pg_catalog.+) response_ttl OPERATOR(pg_catalog.<)
                                               COALESCE(now OPERATOR(pg_catalog.+) ttl, k.expires_at)
                                          THEN now OPERATOR(pg_catalog.+) response_ttl END
         WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.portable_key_hash(p_scope, p_key)
           AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
           AND k.fence OPERATOR(pg_catalog.=) p_fence AND k.status OPERATOR(pg_catalog.=) 'processing'
           AND k.expires_at OPERATOR(pg_catalog.>) now;
    END IF;
    IF NOT FOUND THEN
        PERFORM idempotency.portable_lease_lost(p_key, p_scope, p_fence);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION idempotency.portable_insert_key(uuid, text, text, bytea, timestamptz, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION idempotency.portable_claim_write(text, text, uuid, bytea, boolean, timestamptz, interval, interval, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION idempotency.portable_arg_final_interval(interval, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION idempotency.portable_finish_held_key(text, bigint, jsonb, integer, text, boolean, boolean, interval, interval) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_insert_key(uuid, text, text, bytea, timestamptz, interval, interval) IS 'portable edition: create a key, held';
COMMENT ON FUNCTION idempotency.portable_claim_write(text, text, uuid, bytea, boolean, timestamptz, interval, interval, text) IS 'portable edition: the part of a claim that writes';
COMMENT ON FUNCTION idempotency.portable_arg_final_interval(interval, text, boolean) IS 'portable edition: an interval argument for a final answer only';
COMMENT ON FUNCTION idempotency.portable_finish_held_key(text, bigint, jsonb, integer, text, boolean, boolean, interval, interval) IS 'portable edition: complete() and fail()';

-- portable helper: since 1.6

-- 1.6: answers expire.
CREATE OR REPLACE FUNCTION idempotency.portable_answers_expire()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT true';
REVOKE ALL ON FUNCTION idempotency.portable_answers_expire() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_answers_expire() IS 'portable edition: whether answers expire (response_expires_at, 1.6 and later)';

-- An installation of an older edition has finish_held_key without
-- response_ttl (its bodies of complete() and fail() go in this script).
DO $portable$
BEGIN
    IF pg_catalog.to_regprocedure('idempotency.portable_finish_held_key(text, bigint, jsonb, integer, text, boolean, boolean, interval)') IS NOT NULL THEN
        DROP FUNCTION idempotency.portable_finish_held_key(text, bigint, jsonb, integer, text, boolean, boolean, interval);
    END IF;
END
$portable$;

-- portable helper: since 1.6, again in 1.9

-- 1.6: an answer past response_expires_at is gone.
CREATE OR REPLACE FUNCTION idempotency.portable_answer(found_row idempotency.idempotency_keys,
                                            request_hash bytea, now timestamptz)
RETURNS idempotency.claim_result
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
SELECT CASE
       WHEN found_row.expires_at OPERATOR(pg_catalog.<=) now THEN NULL
       WHEN found_row.request_hash IS NOT NULL AND request_hash IS NOT NULL
        AND found_row.request_hash OPERATOR(pg_catalog.<>) request_hash
       THEN ROW('mismatch', NULL, found_row.status, NULL, NULL, NULL, NULL, NULL)::idempotency.claim_result
       WHEN found_row.status OPERATOR(pg_catalog.=) 'completed'::idempotency.key_status
         OR (found_row.status OPERATOR(pg_catalog.=) 'failed'::idempotency.key_status
             AND NOT found_row.retryable)
       THEN CASE WHEN found_row.response_expires_at OPERATOR(pg_catalog.<=) now
            -- 1.6: past response_expires_at ('-infinity': purged) the
            -- answer is gone; its code stays
            THEN ROW('gone', NULL, found_row.status, found_row.response_code, NULL,
                     found_row.recovery_point, found_row.attempts, NULL)::idempotency.claim_result
            ELSE ROW('replay', NULL, found_row.status, found_row.response_code, found_row.response_body,
                     found_row.recovery_point, found_row.attempts, NULL)::idempotency.claim_result END
       WHEN found_row.status OPERATOR(pg_catalog.=) 'processing'::idempotency.key_status
        AND found_row.locked_until OPERATOR(pg_catalog.>) now
       -- the time left from the moment of the answer (a second reading of
       -- the clock, as in the C), never more than the lease
       THEN ROW('in_progress', NULL, found_row.status, NULL, NULL, found_row.recovery_point,
                found_row.attempts,
                found_row.locked_until OPERATOR(pg_catalog.-)
                GREATEST(now, LEAST(pg_catalog.clock_timestamp(), found_row.locked_until)))::idempotency.claim_result
       END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_answer(idempotency.idempotency_keys, bytea, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_answer(idempotency.idempotency_keys, bytea, timestamptz) IS 'portable edition: a claim answered from the key''s row';

-- portable helper: since 1.6, again in 1.7, 1.8, 1.9

-- 1.6: and its answer is not gone.
CREATE OR REPLACE FUNCTION idempotency.portable_replays(k idempotency.idempotency_keys,
                                             request_hash bytea, now timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT k.expires_at OPERATOR(pg_catalog.>) now
   AND k.status OPERATOR(pg_catalog.=) 'completed'::idempotency.key_status
   AND (k.request_hash IS NULL OR request_hash IS NULL
        OR k.request_hash OPERATOR(pg_catalog.=) request_hash)
   AND (k.response_expires_at IS NULL OR k.response_expires_at OPERATOR(pg_catalog.>) now)
$$;
REVOKE ALL ON FUNCTION idempotency.portable_replays(idempotency.idempotency_keys, bytea, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_replays(idempotency.idempotency_keys, bytea, timestamptz) IS 'portable edition: whether a key''s row answers replay with its completion';

-- portable helper: since 1.7

-- Whether the session's role "caller" may act as the holder of the key's
-- row "k" (MAY_ACT_AS_HOLDER): 1.7 by its holder_role.  (PL/pgSQL, whose
-- statements are read when they first run: the 1.7 script adds the
-- column after its helpers.)  The 1.8 script replaces it.
CREATE FUNCTION idempotency.portable_holder_allows(k idempotency.idempotency_keys, caller regrole)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN k.holder_role IS NULL
        OR k.holder_role::pg_catalog.oid OPERATOR(pg_catalog.=) caller::pg_catalog.oid
        OR pg_catalog.pg_has_role(caller::pg_catalog.oid, k.holder_role::pg_catalog.oid, 'MEMBER');
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_holder_allows(idempotency.idempotency_keys, regrole) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_holder_allows(idempotency.idempotency_keys, regrole) IS 'portable edition: whether the session''s role may act as the holder of a key';

-- portable helper: since 1.8, again in 1.9

-- 1.8: role bindings are checked by name.
CREATE OR REPLACE FUNCTION idempotency.portable_holders_by_name()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT true';
REVOKE ALL ON FUNCTION idempotency.portable_holders_by_name() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_holders_by_name() IS 'portable edition: whether role bindings are checked by name (1.8 and later)';

-- The name of the session's role (portable_caller()), which a claim and
-- claim_events record from 1.8 on.
CREATE FUNCTION idempotency.portable_caller_name()
RETURNS name
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT COALESCE(NULLIF(pg_catalog.current_setting('role'), 'none'), SESSION_USER)::pg_catalog.name
$$;
REVOKE ALL ON FUNCTION idempotency.portable_caller_name() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_caller_name() IS 'portable edition: the name of the session''s role, which claims record from 1.8 on';

-- Whether "caller" may act on every binding (idem_role_privileged): a
-- superuser, or a member of the owner of the extension's tables.
-- (PL/pgSQL, whose plans a session keeps: a SQL function with a
-- subquery is planned again at every transaction.)
CREATE FUNCTION idempotency.portable_role_privileged(caller regrole)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN COALESCE((SELECT r.rolsuper FROM pg_catalog.pg_roles r
                      WHERE r.oid OPERATOR(pg_catalog.=) caller::pg_catalog.oid), false)
        OR pg_catalog.pg_has_role(caller::pg_catalog.oid,
                                  (SELECT c.relowner FROM pg_catalog.pg_class c
                                    WHERE c.oid OPERATOR(pg_catalog.=) 'idempotency.idempotency_keys'::pg_catalog.regclass),
                                  'MEMBER');
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_role_privileged(regrole) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_role_privileged(regrole) IS 'portable edition: whether a role may act on every holder binding and lease (a superuser, the owner)';

-- portable_binding_allows() for a binding that is not the caller's own
-- name: neither recorded (before 1.7), the named role or a member of it,
-- or a privileged role.
CREATE FUNCTION idempotency.portable_binding_allows_other(bound_oid regrole, bound_name name,
                                                          caller regrole)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN (bound_oid IS NULL AND bound_name IS NULL)
        OR EXISTS (SELECT FROM pg_catalog.pg_roles r
                    WHERE r.rolname OPERATOR(pg_catalog.=) bound_name
                      AND pg_catalog.pg_has_role(caller::pg_catalog.oid, r.oid, 'MEMBER'))
        OR idempotency.portable_role_privileged(caller);
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_binding_allows_other(regrole, name, regrole) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_binding_allows_other(regrole, name, regrole) IS 'portable edition: whether a role may act on a binding recorded by another name';

-- Whether "caller" may act on a row whose binding records the OID
-- "bound_oid" and the name "bound_name" (idem_binding_allows, the rule of
-- src/roles.c): neither recorded (before 1.7), the named role or a member
-- of it, or a privileged role; an OID without a name, or a name of no
-- role here, allows the privileged roles only.  As in the C, the caller's
-- own name allows at once, without reading the catalog (inlined: the
-- holder calls and the marks pay one comparison).
CREATE FUNCTION idempotency.portable_binding_allows(bound_oid regrole, bound_name name,
                                                    caller regrole)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT COALESCE(bound_name OPERATOR(pg_catalog.=) pg_catalog.pg_get_userbyid(caller::pg_catalog.oid), false)
    OR idempotency.portable_binding_allows_other(bound_oid, bound_name, caller)
$$;
REVOKE ALL ON FUNCTION idempotency.portable_binding_allows(regrole, name, regrole) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_binding_allows(regrole, name, regrole) IS 'portable edition: whether a role may act on a holder binding or lease recorded by name';

-- 1.8: whether the session's role "caller" may act as the holder of the
-- key's row "k" (MAY_ACT_AS_HOLDER): the role its holder_role_name names.
-- Inlined into the holder calls' statements.
CREATE OR REPLACE FUNCTION idempotency.portable_holder_allows(k idempotency.idempotency_keys, caller regrole)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT idempotency.portable_binding_allows(k.holder_role, k.holder_role_name, caller)
$$;
REVOKE ALL ON FUNCTION idempotency.portable_holder_allows(idempotency.idempotency_keys, regrole) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_holder_allows(idempotency.idempotency_keys, regrole) IS 'portable edition: whether the session''s role may act as the holder of a key';

-- portable helper: since 1.7, again in 1.8

-- 1.7: claims record the holder's role, and the holder calls check it.
CREATE OR REPLACE FUNCTION idempotency.portable_holders_recorded()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT true';
REVOKE ALL ON FUNCTION idempotency.portable_holders_recorded() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_holders_recorded() IS 'portable edition: whether claims record the holder''s role (holder_role, 1.7 and later)';

-- The role that calls, as the portable edition can tell it: the session's
-- (SET ROLE, else the session user), since current_user is the owner
-- inside a SECURITY DEFINER function (doc/portable.md).
CREATE FUNCTION idempotency.portable_caller()
RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.quote_ident(COALESCE(NULLIF(pg_catalog.current_setting('role'), 'none'),
                                       SESSION_USER::pg_catalog.text))::pg_catalog.regrole
$$;
REVOKE ALL ON FUNCTION idempotency.portable_caller() FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_caller() IS 'portable edition: the role of the session, which a claim records as the holder';

-- After a holder call of "caller" found no row held by its fence: refuse
-- it (42501) when the key's live row is another role's (refuse_other_holder;
-- from 1.8 the message names the holder and who else may release the key).
CREATE FUNCTION idempotency.portable_refuse_other_holder(p_scope text, p_key text,
                                                         caller regrole, now timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    found_row idempotency.idempotency_keys;
    holder name;
BEGIN
    SELECT k.* INTO found_row
      FROM idempotency.idempotency_keys k
     WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(p_scope, p_key)
       AND k.scope OPERATOR(pg_catalog.=) p_scope
       AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
       AND k.expires_at OPERATOR(pg_catalog.>) now
       AND NOT idempotency.portable_holder_allows(k, caller);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT idempotency.portable_holders_by_name() THEN
        RAISE EXCEPTION 'permission denied to act as the holder of idempotency key "%"', p_key
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Another role claimed the key in scope "%s"; only that role and its members may complete, fail, checkpoint or release it.',
                                             p_scope),
                  HINT = 'Call the holder functions as the role that claimed the key.';
    END IF;
    holder := found_row.holder_role_name;
    IF holder IS NULL THEN
        RAISE EXCEPTION 'permission denied to act as the holder of idempotency key "%"', p_key
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('The role that claimed the key in scope "%s" is not recorded by name.',
                                             p_scope),
                  HINT = 'Only the extension''s owner or a superuser may release the key.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) holder) THEN
        RAISE EXCEPTION 'permission denied to act as the holder of idempotency key "%"', p_key
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Role "%s", which claimed the key in scope "%s", does not exist.',
                                             holder, p_scope),
                  HINT = 'Only the extension''s owner or a superuser may release the key.';
    END IF;
    RAISE EXCEPTION 'permission denied to act as the holder of idempotency key "%"', p_key
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = pg_catalog.format('Role "%s" claimed the key in scope "%s"; only that role and its members may complete, fail, checkpoint or release it.',
                                         holder, p_scope),
              HINT = pg_catalog.format('Call the holder functions as role "%s"; the extension''s owner or a superuser may also release the key.',
                                       holder);
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_refuse_other_holder(text, text, regrole, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_refuse_other_holder(text, text, regrole, timestamptz) IS 'portable edition: refuse a holder call on another role''s key';

-- portable helper: since 1.9

-- claim() reads the key itself since 1.9 and calls portable_claim_write()
-- for the rest: an installation updated from an older edition has the
-- helper that did both.
DO $portable$
BEGIN
    IF pg_catalog.to_regprocedure('idempotency.portable_claim_key(text, text, jsonb, interval, interval, text)') IS NOT NULL THEN
        DROP FUNCTION idempotency.portable_claim_key(text, text, jsonb, interval, interval, text);
    END IF;
END
$portable$;

-- portable: idempotency_claim_1_8, idempotency_claim_1_7, idempotency_claim_1_6, idempotency_claim
-- With wait, a claim answered in_progress claims again after a nap that
-- doubles from 10 ms to 200 ms, until the answer changes, the holder's
-- lease ends or wait runs out: the C edition sleeps until the holder's
-- commit instead, which needs shared memory (doc/portable.md).  As in the
-- C edition, a claim whose transaction has a transaction id (it wrote, or
-- locked a row: execute()'s statement runs after its key's row is
-- written) answers in_progress at once instead of napping: another
-- transaction may be waiting for this one, and a nap is no lock the
-- deadlock detector sees (doc/reference.md, "Waiting for the holder").
-- Nor does it nap once idempotency.max_waiters_per_key claims nap for the
-- key: each napping claim holds a waiter ticket, pg_try_advisory_xact_lock
-- (1463896404, objid) with the ticket in objid's low byte (the C: objsubid
-- 6, given back when the wait ends; here with the transaction).  The
-- setting is superuser-only in the C, since behind a transaction pooler a
-- session's value would reach other clients; the edition cannot refuse a
-- SET of its placeholder, so it honours a superuser's value, and for other
-- roles only what ALTER ROLE / DATABASE ... SET gave them.
CREATE OR REPLACE FUNCTION idempotency.claim(
    key     text,
    request jsonb    DEFAULT NULL,
    scope   text     DEFAULT '',
    ttl     interval DEFAULT NULL,
    lease   interval DEFAULT NULL,
    wait    interval DEFAULT NULL)
RETURNS idempotency.claim_result
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    answer idempotency.claim_result;
    hash uuid;
    request_fingerprint bytea;
    now timestamptz;
    replays boolean;
    found_row idempotency.idempotency_keys;
    deadline timestamptz;
    nap double precision;       -- 10 ms at first (no default: one expression fewer)
    max_waiters text;
    tickets integer;
    ticket_base integer;
    ticket integer;
BEGIN
    -- The arguments.  The usual call (a key and a scope that pass their
    -- tests, ttl and lease at their defaults with their settings unset or
    -- at the C library's defaults, no wait) is one expression of this
    -- body's, and keeps ttl and lease NULL for their defaults (below); any
    -- other is checked argument by argument in the C's order, each by its
    -- helper, which raises the C's error.
    IF (ttl IS NULL AND lease IS NULL AND wait IS NULL
        AND idempotency.portable_key_fits(key) AND idempotency.portable_scope_fits(scope)
        AND COALESCE(pg_catalog.current_setting('idempotency.default_ttl', true), '24 hours')
            OPERATOR(pg_catalog.=) '24 hours'
        AND COALESCE(pg_catalog.current_setting('idempotency.lease_timeout', true), '30 seconds')
            OPERATOR(pg_catalog.=) '30 seconds') IS NOT TRUE THEN
        IF idempotency.portable_key_fits(key) IS NOT TRUE THEN
            PERFORM idempotency.portable_arg_key(key);
        END IF;
        IF idempotency.portable_scope_fits(scope) IS NOT TRUE THEN
            PERFORM idempotency.portable_arg_name(scope, 'scope', 0, 255);
        END IF;
        ttl := idempotency.portable_arg_interval(ttl, 'ttl', 'idempotency.default_ttl', '24 hours');
        lease := idempotency.portable_arg_interval(lease, 'lease', 'idempotency.lease_timeout', '30 seconds');
        IF ttl OPERATOR(pg_catalog.<) lease THEN
            PERFORM idempotency.portable_check_ttl_covers_lease(ttl, lease);
        END IF;
        IF wait IS NOT NULL THEN
            wait := idempotency.portable_arg_interval(wait, 'wait', NULL, NULL);
        END IF;
    END IF;
    hash := idempotency.portable_key_hash(scope, key);
    -- (NULL for no request: the hash's functions are strict)
    request_fingerprint := idempotency.portable_request_hash(request);
    LOOP
        -- The read answers replay, gone, mismatch and in_progress here;
        -- only a claim that may write goes on to portable_claim_write().
        -- A replay of a completion, the commonest answer, is read by the
        -- statement that finds the row; any other row is read whole and
        -- answered by portable_answer(), and a row of another key with
        -- this key's hash is refused by portable_read_key() (23505).
        now := pg_catalog.clock_timestamp();
        SELECT k.scope OPERATOR(pg_catalog.=) claim.scope AND k.idempotency_key OPERATOR(pg_catalog.=) key
               AND idempotency.portable_replays(k, request_fingerprint, now),
               'replay', NULL, k.status, k.response_code, k.response_body, k.recovery_point,
               k.attempts, NULL
          INTO replays, answer.outcome, answer.fence, answer.status, answer.response_code,
               answer.response_body, answer.recovery_point, answer.attempts, answer.retry_after
          FROM idempotency.idempotency_keys k
         WHERE k.key_hash OPERATOR(pg_catalog.=) hash;
        IF replays THEN
            RETURN answer;
        ELSIF NOT FOUND THEN
            answer := idempotency.portable_claim_write(key, scope, hash, request_fingerprint, false, now,
                                                       COALESCE(ttl, '24 hours'), COALESCE(lease, '30 seconds'),
                                                       'idempotency.claim()');
        ELSE
            found_row := idempotency.portable_read_key(scope, key, hash);
            IF found_row.key_hash IS NULL THEN
                answer := NULL;
            ELSE
                answer := idempotency.portable_answer(found_row, request_fingerprint, now);
            END IF;
            IF answer.outcome IS NULL THEN
                answer := idempotency.portable_claim_write(key, scope, hash, request_fingerprint,
                                                           found_row.key_hash IS NOT NULL, now,
                                                           COALESCE(ttl, '24 hours'), COALESCE(lease, '30 seconds'),
                                                           'idempotency.claim()');
            END IF;
        END IF;
        IF wait IS NULL OR answer.outcome OPERATOR(pg_catalog.<>) 'in_progress' THEN
            RETURN answer;
        END IF;
        deadline := COALESCE(deadline, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) wait);
        IF pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline THEN
            RETURN answer;
        END IF;
        IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
            RAISE EXCEPTION 'idempotency claims can wait only under READ COMMITTED'
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = pg_catalog.format('Key "%s" is held by another request, and this transaction''s snapshot would not show its end.', key),
                      HINT = 'Claim with wait in a READ COMMITTED transaction, or without wait.';
        END IF;
        IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
            RETURN answer;
        END IF;
        IF ticket IS NULL THEN
            -- a superuser's own value (which the C lets it SET), else
            -- an operator's ALTER ROLE / DATABASE ... SET of it
            IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                 WHERE r.rolname OPERATOR(pg_catalog.=) SESSION_USER) THEN
                max_waiters := pg_catalog.current_setting('idempotency.max_waiters_per_key', true);
            ELSE
                max_waiters := idempotency.portable_stored_setting('idempotency.max_waiters_per_key',
                                                                   SESSION_USER);
            END IF;
            tickets := CASE WHEN COALESCE(max_waiters, '') OPERATOR(pg_catalog.=) '' THEN 1
                            ELSE idempotency.portable_setting_parse_int('idempotency.max_waiters_per_key',
                                                                        max_waiters, 0, 256, NULL) END;
            ticket_base := ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.replace(
                                hash::pg_catalog.text, '-', ''), 9, 8))::pg_catalog.bit(32)::pg_catalog.int4
                           OPERATOR(pg_catalog.&) -256;
            ticket := 0;
            WHILE ticket OPERATOR(pg_catalog.<) tickets
                  AND NOT pg_catalog.pg_try_advisory_xact_lock(1463896404, ticket_base OPERATOR(pg_catalog.|) ticket) LOOP
                ticket := ticket OPERATOR(pg_catalog.+) 1;
            END LOOP;
        END IF;
        IF ticket OPERATOR(pg_catalog.>=) tickets THEN
            RETURN answer;      -- enough claims nap for this key already
        END IF;
        nap := COALESCE(nap, 0.01);
        PERFORM pg_catalog.pg_sleep(LEAST(nap,
            pg_catalog.date_part('epoch', deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()),
            pg_catalog.date_part('epoch', answer.retry_after) OPERATOR(pg_catalog.+) 0.001));
        nap := LEAST(nap OPERATOR(pg_catalog.*) 2, 0.2);
    END LOOP;
END
$$;

-- portable: idempotency_complete_1_8, idempotency_complete_1_7, idempotency_complete_1_6, idempotency_complete_1_1, idempotency_complete
CREATE OR REPLACE FUNCTION idempotency.complete(
    key           text,
    fence         bigint,
    response_body jsonb,
    response_code integer  DEFAULT 200,
    scope         text     DEFAULT '',
    ttl           interval DEFAULT NULL,
    response_ttl  interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    done text;
BEGIN
    IF response_body IS NULL THEN
        RAISE EXCEPTION 'response_body must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (an assignment of its void, not PERFORM: no statement of its own)
    done := idempotency.portable_finish_held_key(key, fence, response_body, response_code, scope,
                                                 true, false, ttl, response_ttl)::pg_catalog.text;
END
$$;

-- portable: idempotency_fail_1_8, idempotency_fail_1_7, idempotency_fail_1_6, idempotency_fail_1_1, idempotency_fail
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
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    done text;
BEGIN
    IF retryable IS NULL THEN
        RAISE EXCEPTION 'retryable must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (as in complete())
    done := idempotency.portable_finish_held_key(key, fence, error, response_code, scope,
                                                 false, retryable, ttl, response_ttl)::pg_catalog.text;
END
$$;

-- portable: idempotency_checkpoint_1_8, idempotency_checkpoint_1_7, idempotency_checkpoint
CREATE OR REPLACE FUNCTION idempotency.checkpoint(
    key            text,
    fence          bigint,
    recovery_point text,
    lease          interval DEFAULT NULL,
    scope          text     DEFAULT '')
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz;
    p_key CONSTANT text := key;
    p_fence CONSTANT bigint := fence;
    p_recovery_point CONSTANT text := recovery_point;
    p_scope CONSTANT text := scope;
    p_lease interval;
    caller regrole;
BEGIN
    PERFORM idempotency.portable_arg_key(p_key);
    IF p_fence IS NULL THEN
        RAISE EXCEPTION 'fence must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_recovery_point IS NOT NULL THEN
        PERFORM idempotency.portable_arg_name(p_recovery_point, 'recovery_point', 1, 255);
    END IF;
    p_lease := idempotency.portable_arg_interval(lease, 'lease', 'idempotency.lease_timeout', '30 seconds');
    PERFORM idempotency.portable_arg_name(p_scope, 'scope', 0, 255);
    now := pg_catalog.clock_timestamp();
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.checkpoint()');

    IF idempotency.portable_holders_recorded() THEN
        -- 1.7: another role's key is refused whatever the fence
        caller := idempotency.portable_caller();
        UPDATE idempotency.idempotency_keys k SET
               recovery_point = COALESCE(p_recovery_point, k.recovery_point),
               locked_until = now OPERATOR(pg_catalog.+) p_lease,
               expires_at = GREATEST(k.expires_at, now OPERATOR(pg_catalog.+) p_lease),
               updated_at = now
         WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(p_scope, p_key)
           AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
           AND k.fence OPERATOR(pg_catalog.=) p_fence
           AND k.status OPERATOR(pg_catalog.=) 'processing'
           AND k.expires_at OPERATOR(pg_catalog.>) now
           AND idempotency.portable_holder_allows(k, caller);
        IF NOT FOUND THEN
            PERFORM idempotency.portable_refuse_other_holder(p_scope, p_key, caller, now);
            PERFORM idempotency.portable_lease_lost(p_key, p_scope, p_fence);
        END IF;
        RETURN;
    END IF;
    UPDATE idempotency.idempotency_keys k SET
           recovery_point = COALESCE(p_recovery_point, k.recovery_point),
           locked_until = now OPERATOR(pg_catalog.+) p_lease,
           expires_at = GREATEST(k.expires_at, now OPERATOR(pg_catalog.+) p_lease),
           updated_at = now
     WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(p_scope, p_key)
       AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
       AND k.fence OPERATOR(pg_catalog.=) p_fence
       AND k.status OPERATOR(pg_catalog.=) 'processing'
       AND k.expires_at OPERATOR(pg_catalog.>) now;
    IF NOT FOUND THEN
        PERFORM idempotency.portable_lease_lost(p_key, p_scope, p_fence);
    END IF;
END
$$;

-- portable: idempotency_release_1_8, idempotency_release_1_7, idempotency_release
CREATE OR REPLACE FUNCTION idempotency.release(
    key   text,
    fence bigint,
    scope text DEFAULT '')
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz;
    p_key CONSTANT text := key;
    p_fence CONSTANT bigint := fence;
    p_scope CONSTANT text := scope;
    caller regrole;
BEGIN
    PERFORM idempotency.portable_arg_key(p_key);
    IF p_fence IS NULL THEN
        RAISE EXCEPTION 'fence must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM idempotency.portable_arg_name(p_scope, 'scope', 0, 255);
    now := pg_catalog.clock_timestamp();
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.release()');

    IF idempotency.portable_holders_recorded() THEN
        -- 1.7: another role's key is refused whatever the fence
        caller := idempotency.portable_caller();
        DELETE FROM idempotency.idempotency_keys k
         WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(p_scope, p_key)
           AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
           AND k.fence OPERATOR(pg_catalog.=) p_fence
           AND k.status OPERATOR(pg_catalog.=) 'processing'
           AND k.expires_at OPERATOR(pg_catalog.>) now
           AND idempotency.portable_holder_allows(k, caller);
        IF NOT FOUND THEN
            PERFORM idempotency.portable_refuse_other_holder(p_scope, p_key, caller, now);
            PERFORM idempotency.portable_lease_lost(p_key, p_scope, p_fence);
        END IF;
        RETURN;
    END IF;
    DELETE FROM idempotency.idempotency_keys k
     WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(p_scope, p_key)
       AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
       AND k.fence OPERATOR(pg_catalog.=) p_fence
       AND k.status OPERATOR(pg_catalog.=) 'processing'
       AND k.expires_at OPERATOR(pg_catalog.>) now;
    IF NOT FOUND THEN
        PERFORM idempotency.portable_lease_lost(p_key, p_scope, p_fence);
    END IF;
END
$$;

-- Past response_expires_at (1.6) the row has no response_body, whoever
-- asks, from the moment claims answer gone (portable_answer()'s test).
-- The fence is shown to a role that may read the table of keys itself;
-- the role is the session's (SET ROLE, else the session user): inside a
-- SECURITY DEFINER function current_user is the owner.  The 1.7 script
-- declares the function again (idempotency_lookup_1_7), so that an
-- installation updated to 1.7 gets this body.
-- portable: idempotency_lookup_1_7, idempotency_lookup
CREATE OR REPLACE FUNCTION idempotency.lookup(key text, scope text DEFAULT '')
RETURNS idempotency.idempotency_keys
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz;
    p_key CONSTANT text := key;
    p_scope CONSTANT text := scope;
    caller text;
    found_row idempotency.idempotency_keys;
BEGIN
    PERFORM idempotency.portable_arg_key(p_key);
    PERFORM idempotency.portable_arg_name(p_scope, 'scope', 0, 255);
    now := pg_catalog.clock_timestamp();
    SELECT k.* INTO found_row
      FROM idempotency.idempotency_keys k
     WHERE k.key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(p_scope, p_key)
       AND k.scope OPERATOR(pg_catalog.=) p_scope AND k.idempotency_key OPERATOR(pg_catalog.=) p_key
       AND k.expires_at OPERATOR(pg_catalog.>) now;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF idempotency.portable_answers_expire() THEN
        -- 1.6: past response_expires_at the answer is gone; its code stays
        IF found_row.response_expires_at OPERATOR(pg_catalog.<=) now THEN
            found_row.response_body := NULL;
        END IF;
    END IF;
    caller := pg_catalog.current_setting('role');
    IF caller OPERATOR(pg_catalog.=) 'none' THEN
        caller := SESSION_USER;
    END IF;
    IF NOT pg_catalog.has_table_privilege(caller, 'idempotency.idempotency_keys', 'SELECT') THEN
        found_row.fence := NULL;
    END IF;
    RETURN found_row;
END
$$;
