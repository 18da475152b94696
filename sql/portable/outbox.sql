-- sql/portable/outbox.sql: the portable bodies of src/outbox.c, the
-- transactional outbox (enqueue_event, enqueue_events, emit_event,
-- claim_events, mark_published, mark_failed, outbox_quiet_commits) and the
-- inbox (process_once).
--
-- They follow the locking rules of src/outbox.c's header: writers hold the
-- buckets of the aggregates they write in share mode until their
-- transaction ends (beyond 64 buckets, "all buckets" instead); claim_events
-- takes "all buckets" and then its candidates' buckets without waiting,
-- drops what it could not lock, and decides and leases with new snapshots
-- (PL/pgSQL takes one per statement in READ COMMITTED).  Bucket numbers
-- are the C's (hashtextextended of the aggregate type, then of its id).
--
-- Edition differences (doc/portable.md):
-- - the locks are pg_advisory_xact_lock(int4, int4) locks, objsubid 2 in
--   pg_locks (SQL cannot take the C's objsubid 4), classid 1330992194 as
--   in the C: objid 0-1023 the buckets, 1024-1039 "all buckets", 1040-1055
--   the quiet commits;
-- - "all buckets" is 16 stripes: claim_events takes the first of them it
--   can in exclusive mode (SQL has no row exclusive advisory lock, which
--   lets claims share it in the C), a writer takes all 16 in share mode;
--   claim_events hands out nothing when it gets none of them;
-- - the notification is decided at each enqueue, not at the transaction's
--   pre-commit (PL/pgSQL has no commit callback): pg_notify() then, or a
--   quiet commit's lock from then until the transaction ends; the payload
--   is the aggregate type of the enqueue that notified, so a transaction
--   that notified notifies once per aggregate type it enqueued after (the
--   C: once, its first event's); the last notification is this session's
--   currval() of two sequences only the owner may use (1.8; a session
--   setting before), counted once its transaction committed;
-- - nothing rests on a session setting that a caller may set (1.8): the
--   buckets held so far are counted in idempotency_portable.outbox_buckets,
--   a hint for the 64 that names its transaction, and every lock is taken
--   again whatever it says;
-- - a transaction that notified cannot be prepared (PostgreSQL refuses
--   PREPARE TRANSACTION after NOTIFY);
-- - emit_event calls pg_logical_emit_message(), which the function's owner
--   needs EXECUTE on;
-- - 1.7: the role recorded as an event's lease_role, and checked by the
--   marks, is the session's (portable_caller(), sql/portable/keys.sql);
--   1.8 records its name too (lease_role_name), the one the marks check.
-- - 1.8: the bounds of claim_events are the database's settings; a
--   session's SET counts only when lower (portable_outbox_claim_bounds).

-- portable helper: since 1.0

-- The lock bucket of an aggregate, as the C computes it (idem_hash_pair()
-- modulo 1024).
CREATE FUNCTION idempotency.portable_outbox_bucket(aggregate_type text, aggregate_id text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT (pg_catalog.hashtextextended(aggregate_id COLLATE "C",
                                    pg_catalog.hashtextextended(aggregate_type COLLATE "C", 0))
        OPERATOR(pg_catalog.&) 1023)::pg_catalog.int4
$$;

-- portable helper: since 1.0, again in 1.8, 1.9

-- Before this transaction writes events, or retry waits, of the aggregates
-- in buckets "buckets": hold each bucket in share mode until the
-- transaction ends, or "all buckets" once the transaction would hold more
-- than 64.
--
-- 1.8: no lock rests on a value a caller can set.  Every call takes every
-- lock it needs again: taking an advisory lock that the transaction holds
-- already is only counted again in the backend's local lock table.  The
-- setting idempotency_portable.outbox_buckets only counts the buckets held
-- so far, for the 64, as src/outbox.c's xact_bucket_locks does, and names
-- the transaction it counts for (by its start; by its id from 1.9): a
-- value set before the transaction began (for the session, or copied from
-- another transaction) counts nothing.  One set within the transaction can only move the point
-- where it takes "all buckets" instead of more buckets: never a lock left
-- out, nor one the caller could not take itself with
-- pg_advisory_xact_lock_shared().  (pg_locks would count the held buckets
-- exactly, but reading it costs more than the rest of enqueue_event; a
-- digest with a key of the session's, which a caller could not forge,
-- costs almost as much.)
--
-- 1.9: the transaction's first bucket, enqueue_event()'s at each
-- transaction, takes no statement: portable_outbox_lock_first() takes a
-- lock that no relay holds without waiting, and starts the count with it;
-- a lock held against it is waited for here, as before.  The count names
-- its transaction by its id (pg_current_xact_id(): the write that follows
-- would assign it anyway), unique where a start time is not.
CREATE FUNCTION idempotency.portable_outbox_lock_for_write(buckets integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    lock_class CONSTANT integer := 1330992194;
    xact CONSTANT text := pg_catalog.pg_current_xact_id()::pg_catalog.text OPERATOR(pg_catalog.||) ':';
    held text := pg_catalog.current_setting('idempotency_portable.outbox_buckets', true);
    nheld integer;
    wanted integer[] := COALESCE(buckets, ARRAY[]::integer[]);
    bucket integer;
BEGIN
    IF pg_catalog.cardinality(wanted) OPERATOR(pg_catalog.=) 1
       AND idempotency.portable_outbox_lock_first(wanted[1]) THEN
        RETURN;
    END IF;
    -- this transaction's ",b1,b2,...," or "all"
    IF held IS NULL OR NOT pg_catalog.starts_with(held, xact) THEN
        held := ',';
    ELSE
        held := pg_catalog.substr(held, pg_catalog.length(xact) OPERATOR(pg_catalog.+) 1);
    END IF;
    IF held OPERATOR(pg_catalog.<>) 'all' THEN
        IF pg_catalog.cardinality(wanted) OPERATOR(pg_catalog.>) 1 THEN
            wanted := ARRAY(SELECT DISTINCT b FROM pg_catalog.unnest(wanted) AS b ORDER BY b);
        END IF;
        nheld := pg_catalog.length(held) OPERATOR(pg_catalog.-)
                 pg_catalog.length(pg_catalog.replace(held, ',', '')) OPERATOR(pg_catalog.-) 1;
        IF nheld OPERATOR(pg_catalog.+) pg_catalog.cardinality(wanted) OPERATOR(pg_catalog.<=) 64 THEN
            nheld := 0;
            FOREACH bucket IN ARRAY wanted LOOP
                PERFORM pg_catalog.pg_advisory_xact_lock_shared(lock_class, bucket);
                IF pg_catalog.strpos(held, ',' OPERATOR(pg_catalog.||) bucket OPERATOR(pg_catalog.||) ',')
                   OPERATOR(pg_catalog.=) 0 THEN
                    held := held OPERATOR(pg_catalog.||) bucket OPERATOR(pg_catalog.||) ',';
                    nheld := nheld OPERATOR(pg_catalog.+) 1;
                END IF;
            END LOOP;
            IF nheld OPERATOR(pg_catalog.>) 0 THEN
                PERFORM pg_catalog.set_config('idempotency_portable.outbox_buckets',
                                              xact OPERATOR(pg_catalog.||) held, true);
            END IF;
            RETURN;
        END IF;
        PERFORM pg_catalog.set_config('idempotency_portable.outbox_buckets',
                                      xact OPERATOR(pg_catalog.||) 'all', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lock_class, stripe)
       FROM pg_catalog.generate_series(1024, 1039) AS stripe;
END
$$;

-- The transaction's first bucket (1.9), for enqueue_event() without a
-- call of portable_outbox_lock_for_write(): when the count names no
-- bucket of this transaction and no relay holds "bucket", hold it in
-- share mode and count it, and say true; else false, and nothing is
-- done.  Plain SQL, inlined into the caller's expression (its CASE keeps
-- the order: the lock only once the count is found empty, the count only
-- once the lock is held).
CREATE FUNCTION idempotency.portable_outbox_lock_first(bucket integer)
RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
SELECT CASE
       WHEN pg_catalog.starts_with(COALESCE(pg_catalog.current_setting('idempotency_portable.outbox_buckets', true), ''),
                                   pg_catalog.pg_current_xact_id()::pg_catalog.text OPERATOR(pg_catalog.||) ':')
       THEN false
       WHEN pg_catalog.pg_try_advisory_xact_lock_shared(1330992194, bucket)
       THEN pg_catalog.set_config('idempotency_portable.outbox_buckets',
                                  pg_catalog.pg_current_xact_id()::pg_catalog.text OPERATOR(pg_catalog.||) ':,'
                                  OPERATOR(pg_catalog.||) bucket::pg_catalog.text OPERATOR(pg_catalog.||) ',',
                                  true) IS NOT NULL
       ELSE false END
$$;

-- The event arguments of enqueue_event and emit_event (event_args).
CREATE FUNCTION idempotency.portable_outbox_event_args(aggregate_type text, aggregate_id text,
                                                      event_type text, payload jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    PERFORM idempotency.portable_arg_name(aggregate_type, 'aggregate_type', 1, 255);
    PERFORM idempotency.portable_arg_name(aggregate_id, 'aggregate_id', 1, 255);
    PERFORM idempotency.portable_arg_name(event_type, 'event_type', 1, 255);
    IF payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- An array argument (idem_arg_array): one-dimensional, "expected" elements
-- when that is not negative, and no NULLs unless nulls_allowed.  Returns
-- its number of elements.
CREATE FUNCTION idempotency.portable_arg_array(value anyarray, argname text, expected integer,
                                               nulls_allowed boolean)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    n integer;
    i integer;
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION '% must not be null', argname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.array_ndims(value) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION '% must be a one-dimensional array', argname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := pg_catalog.cardinality(value);
    IF expected OPERATOR(pg_catalog.>=) 0 AND n OPERATOR(pg_catalog.<>) expected THEN
        RAISE EXCEPTION '% has % elements, the other arrays %', argname, n, expected
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass one element per event in every array.';
    END IF;
    IF NOT nulls_allowed AND pg_catalog.array_position(value, NULL) IS NOT NULL THEN
        i := pg_catalog.array_position(value, NULL) OPERATOR(pg_catalog.-)
             pg_catalog.array_lower(value, 1) OPERATOR(pg_catalog.+) 1;
        RAISE EXCEPTION '% must not contain nulls', argname
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('Element %s is null.', i);
    END IF;
    RETURN n;
END
$$;

-- A text[] argument whose every element has min_chars..max_chars
-- characters (idem_arg_name_array).
CREATE FUNCTION idempotency.portable_arg_name_array(value text[], argname text, min_chars integer,
                                                    max_chars integer, expected integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    n integer := idempotency.portable_arg_array(value, argname, expected, false);
    element text;
BEGIN
    FOREACH element IN ARRAY value LOOP
        PERFORM idempotency.portable_arg_name(element, argname, min_chars, max_chars);
    END LOOP;
    RETURN n;
END
$$;

-- portable helper: since 1.0, again in 1.7, 1.8

-- (Replaced by the 1.7 script, which checks the role of the lease, and by
-- the 1.8 script, which checks it by name: portable_lease_allows().)
-- mark_published (failed false) and mark_failed (failed true).
-- since_1_3: a mark without a token changes only events never taken over;
-- before, it was not checked.
CREATE FUNCTION idempotency.portable_mark_events(p_ids bigint[], p_error text, p_token bigint,
                                                 failed boolean, since_1_3 boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    now timestamptz;
    max_attempts integer;
    backoff interval;
    backoff_secs float8;
    months integer;
    days integer;
    updated integer;
    recorded CONSTANT boolean := idempotency.portable_holders_recorded();
    caller regrole;
BEGIN
    PERFORM idempotency.portable_prevent_if_read_only(
        CASE WHEN failed THEN 'idempotency.mark_failed()' ELSE 'idempotency.mark_published()' END);
    IF p_ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF failed AND p_error IS NULL THEN
        RAISE EXCEPTION 'error must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    now := pg_catalog.clock_timestamp();
    IF recorded THEN
        caller := idempotency.portable_caller();
    END IF;

    IF NOT failed THEN
        IF recorded THEN
            -- 1.7: never an event that another role leased
            UPDATE idempotency.outbox_events e
               SET published_at = now, locked_until = NULL
             WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
               AND e.published_at IS NULL AND e.dead_at IS NULL
               AND (p_token IS NULL AND e.takeovers OPERATOR(pg_catalog.=) 0
                    OR e.lease_token OPERATOR(pg_catalog.=) p_token)
               AND idempotency.portable_lease_allows(e, caller);
            GET DIAGNOSTICS updated = ROW_COUNT;
            PERFORM idempotency.portable_refuse_other_lease(p_ids, caller, updated);
            RETURN updated;
        END IF;
        UPDATE idempotency.outbox_events e
           SET published_at = now, locked_until = NULL
         WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
           AND e.published_at IS NULL AND e.dead_at IS NULL
           AND CASE WHEN since_1_3
                    THEN (p_token IS NULL AND e.takeovers OPERATOR(pg_catalog.=) 0
                          OR e.lease_token OPERATOR(pg_catalog.=) p_token)
                    ELSE (p_token IS NULL OR e.lease_token OPERATOR(pg_catalog.=) p_token) END;
        GET DIAGNOSTICS updated = ROW_COUNT;
        RETURN updated;
    END IF;

    max_attempts := idempotency.portable_setting_int('idempotency.outbox_max_attempts', 10, 1, 1000);
    backoff := idempotency.portable_arg_interval(NULL, 'outbox_retry_backoff',
                                                 'idempotency.outbox_retry_backoff', '1 second');
    -- seconds, with months of 30 days and days of 24 hours
    months := EXTRACT(year FROM backoff)::pg_catalog.int4 OPERATOR(pg_catalog.*) 12
              OPERATOR(pg_catalog.+) EXTRACT(month FROM backoff)::pg_catalog.int4;
    days := EXTRACT(day FROM backoff)::pg_catalog.int4;
    backoff_secs := ((months OPERATOR(pg_catalog.*) 30 OPERATOR(pg_catalog.+) days)
                     OPERATOR(pg_catalog.*) 86400)::pg_catalog.float8
                    OPERATOR(pg_catalog.+)
                    EXTRACT(epoch FROM backoff OPERATOR(pg_catalog.-)
                                       pg_catalog.make_interval(months => months, days => days))::pg_catalog.float8;

    -- a retry wait blocks the aggregate: no claim may run on it meanwhile
    PERFORM idempotency.portable_outbox_lock_for_write(ARRAY(
        SELECT idempotency.portable_outbox_bucket(e.aggregate_type, e.aggregate_id)
          FROM idempotency.outbox_events e
         WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
           AND e.published_at IS NULL AND e.dead_at IS NULL));

    IF recorded THEN
        -- 1.7: never an event that another role leased
        UPDATE idempotency.outbox_events e
           SET attempts = e.attempts OPERATOR(pg_catalog.+) 1, last_error = p_error, locked_until = NULL,
               next_attempt_at = CASE WHEN e.attempts OPERATOR(pg_catalog.+) 1 OPERATOR(pg_catalog.>=) max_attempts
                                      THEN NULL
                                      ELSE now OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => LEAST(
                                          backoff_secs OPERATOR(pg_catalog.*)
                                          pg_catalog.power(2::pg_catalog.float8,
                                                           LEAST(e.attempts, 30)::pg_catalog.float8),
                                          3600::pg_catalog.float8)) END,
               dead_at = CASE WHEN e.attempts OPERATOR(pg_catalog.+) 1 OPERATOR(pg_catalog.>=) max_attempts
                              THEN now END
         WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
           AND e.published_at IS NULL AND e.dead_at IS NULL
           AND (p_token IS NULL AND e.takeovers OPERATOR(pg_catalog.=) 0
                OR e.lease_token OPERATOR(pg_catalog.=) p_token)
           AND idempotency.portable_lease_allows(e, caller);
        GET DIAGNOSTICS updated = ROW_COUNT;
        PERFORM idempotency.portable_refuse_other_lease(p_ids, caller, updated);
        RETURN updated;
    END IF;
    UPDATE idempotency.outbox_events e
       SET attempts = e.attempts OPERATOR(pg_catalog.+) 1, last_error = p_error, locked_until = NULL,
           next_attempt_at = CASE WHEN e.attempts OPERATOR(pg_catalog.+) 1 OPERATOR(pg_catalog.>=) max_attempts
                                  THEN NULL
                                  ELSE now OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => LEAST(
                                      backoff_secs OPERATOR(pg_catalog.*)
                                      pg_catalog.power(2::pg_catalog.float8,
                                                       LEAST(e.attempts, 30)::pg_catalog.float8),
                                      3600::pg_catalog.float8)) END,
           dead_at = CASE WHEN e.attempts OPERATOR(pg_catalog.+) 1 OPERATOR(pg_catalog.>=) max_attempts
                          THEN now END
     WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
       AND e.published_at IS NULL AND e.dead_at IS NULL
       AND CASE WHEN since_1_3
                THEN (p_token IS NULL AND e.takeovers OPERATOR(pg_catalog.=) 0
                      OR e.lease_token OPERATOR(pg_catalog.=) p_token)
                ELSE (p_token IS NULL OR e.lease_token OPERATOR(pg_catalog.=) p_token) END;
    GET DIAGNOSTICS updated = ROW_COUNT;
    RETURN updated;
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_mark_events(bigint[], text, bigint, boolean, boolean) FROM PUBLIC;

-- portable helper: since 1.1, again in 1.7, 1.8

-- (Since 1.1: its result type, the table's row type, must exist first.
-- The portable functions serve the tables of 1.3 only.)
-- claim_events: "takeovers" counts a takeover on an event whose previous
-- lease ran out unmarked (1.3).
CREATE FUNCTION idempotency.portable_claim_events(p_batch integer, p_lease interval,
                                                  takeovers boolean)
RETURNS SETOF idempotency.outbox_events
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    lock_class CONSTANT integer := 1330992194;
    now timestamptz;
    stripe integer;
    got boolean := false;
    cand_ids bigint[];
    cand_buckets integer[];
    locked integer[] := '{}';
    bucket integer;
    ids bigint[];
    chosen bigint[] := '{}';
    r record;
    aggregate bigint;
    blocked boolean := false;
    first_row boolean := true;
    token bigint;
    holder regrole;
BEGIN
    IF p_batch IS NULL THEN
        RAISE EXCEPTION 'batch must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_batch OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'batch must be positive'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The batch given is %s.', p_batch);
    END IF;
    p_lease := idempotency.portable_arg_interval(p_lease, 'lease', NULL, NULL);
    now := pg_catalog.clock_timestamp();
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION 'claim_events requires the READ COMMITTED isolation level'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'It needs a new snapshot after it has locked the aggregates it hands out.',
                  HINT = 'Call claim_events in its own READ COMMITTED transaction.';
    END IF;
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.claim_events()');

    -- a writer holding every bucket: nothing can be handed out safely
    FOR i IN 0 .. 15 LOOP
        stripe := 1024 OPERATOR(pg_catalog.+)
                  ((pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.+) i) OPERATOR(pg_catalog.%) 16);
        IF pg_catalog.pg_try_advisory_xact_lock(lock_class, stripe) THEN
            got := true;
            EXIT;
        END IF;
    END LOOP;
    IF NOT got THEN
        RETURN;
    END IF;

    -- 1. candidates, oldest first; keep those whose bucket could be locked
    SELECT pg_catalog.array_agg(c.id ORDER BY c.id),
           pg_catalog.array_agg(idempotency.portable_outbox_bucket(c.aggregate_type, c.aggregate_id)
                                ORDER BY c.id)
      INTO cand_ids, cand_buckets
      FROM (SELECT e.id, e.aggregate_type, e.aggregate_id
              FROM idempotency.outbox_events e
             WHERE e.published_at IS NULL AND e.dead_at IS NULL
               AND (e.locked_until IS NULL OR e.locked_until OPERATOR(pg_catalog.<=) now)
               AND (e.next_attempt_at IS NULL OR e.next_attempt_at OPERATOR(pg_catalog.<=) now)
               AND NOT (ROW(e.aggregate_type, e.aggregate_id) OPERATOR(pg_catalog.=) ANY (
                   SELECT h.aggregate_type, h.aggregate_id FROM idempotency.outbox_events h
                    WHERE h.published_at IS NULL AND h.dead_at IS NULL
                      AND (h.locked_until IS NOT NULL OR h.next_attempt_at IS NOT NULL)
                      AND NOT ((h.locked_until IS NULL OR h.locked_until OPERATOR(pg_catalog.<=) now)
                               AND (h.next_attempt_at IS NULL
                                    OR h.next_attempt_at OPERATOR(pg_catalog.<=) now))))
             ORDER BY e.id LIMIT p_batch) c;
    IF cand_ids IS NULL THEN
        RETURN;
    END IF;
    FOR bucket IN SELECT b FROM pg_catalog.unnest(cand_buckets) WITH ORDINALITY AS u(b, n)
                   GROUP BY b ORDER BY pg_catalog.min(n) LOOP
        IF pg_catalog.pg_try_advisory_xact_lock(lock_class, bucket) THEN
            locked := locked OPERATOR(pg_catalog.||) bucket;
        END IF;
    END LOOP;
    ids := ARRAY(SELECT u.i FROM ROWS FROM (pg_catalog.unnest(cand_ids), pg_catalog.unnest(cand_buckets)) AS u(i, b)
                  WHERE u.b OPERATOR(pg_catalog.=) ANY (locked) ORDER BY u.i);
    IF pg_catalog.cardinality(ids) OPERATOR(pg_catalog.=) 0 THEN
        RETURN;
    END IF;

    -- 2. with a new snapshot: keep the candidates preceded in their
    -- aggregate only by free locked candidates (a join tells which rows
    -- are candidates: "= ANY (ids)" per row would be quadratic in the batch)
    FOR r IN
        SELECT e.id, e.free, a.last, u.id IS NOT NULL AS candidate
          FROM (SELECT c.aggregate_type, c.aggregate_id,
                       pg_catalog.max(c.id) AS last, pg_catalog.count(*) AS n
                  FROM idempotency.outbox_events c WHERE c.id OPERATOR(pg_catalog.=) ANY (ids)
                 GROUP BY c.aggregate_type, c.aggregate_id) a
               CROSS JOIN LATERAL (SELECT e.id,
                               (e.locked_until IS NULL OR e.locked_until OPERATOR(pg_catalog.<=) now)
                               AND (e.next_attempt_at IS NULL
                                    OR e.next_attempt_at OPERATOR(pg_catalog.<=) now) AS free
                          FROM idempotency.outbox_events e
                         WHERE e.aggregate_type OPERATOR(pg_catalog.=) a.aggregate_type
                           AND e.aggregate_id OPERATOR(pg_catalog.=) a.aggregate_id
                           AND e.id OPERATOR(pg_catalog.<=) a.last
                           AND e.published_at IS NULL AND e.dead_at IS NULL
                         ORDER BY e.id LIMIT a.n OPERATOR(pg_catalog.+) 1) e
               LEFT JOIN pg_catalog.unnest(ids) AS u(id) ON u.id OPERATOR(pg_catalog.=) e.id
         ORDER BY a.last, e.id
    LOOP
        IF first_row OR r.last OPERATOR(pg_catalog.<>) aggregate THEN
            aggregate := r.last;
            blocked := false;
            first_row := false;
        END IF;
        IF NOT blocked AND r.free AND r.candidate THEN
            chosen := chosen OPERATOR(pg_catalog.||) r.id;
        ELSE
            blocked := true;
        END IF;
    END LOOP;
    IF pg_catalog.cardinality(chosen) OPERATOR(pg_catalog.=) 0 THEN
        RETURN;
    END IF;

    -- 3. the lease, under a new token, re-checking each row
    token := pg_catalog.nextval('idempotency.outbox_lease_seq'::pg_catalog.regclass);
    IF takeovers AND idempotency.portable_holders_by_name() THEN
        -- 1.8: and its name, which the marks check
        holder := idempotency.portable_caller();
        RETURN QUERY
        WITH claimed AS (
            UPDATE idempotency.outbox_events e
               SET locked_until = now OPERATOR(pg_catalog.+) p_lease, lease_token = token,
                   takeovers = e.takeovers OPERATOR(pg_catalog.+)
                               (e.locked_until IS NOT NULL)::pg_catalog.int4,
                   lease_role = holder, lease_role_name = idempotency.portable_caller_name()
             WHERE e.id OPERATOR(pg_catalog.=) ANY (chosen)
               AND e.published_at IS NULL AND e.dead_at IS NULL
               AND (e.locked_until IS NULL OR e.locked_until OPERATOR(pg_catalog.<=) now)
               AND (e.next_attempt_at IS NULL OR e.next_attempt_at OPERATOR(pg_catalog.<=) now)
            RETURNING e.*)
        SELECT * FROM claimed ORDER BY claimed.id;
    ELSIF takeovers AND idempotency.portable_holders_recorded() THEN
        -- 1.7: the lease's role, which alone may mark the events
        holder := idempotency.portable_caller();
        RETURN QUERY
        WITH claimed AS (
            UPDATE idempotency.outbox_events e
               SET locked_until = now OPERATOR(pg_catalog.+) p_lease, lease_token = token,
                   takeovers = e.takeovers OPERATOR(pg_catalog.+)
                               (e.locked_until IS NOT NULL)::pg_catalog.int4,
                   lease_role = holder
             WHERE e.id OPERATOR(pg_catalog.=) ANY (chosen)
               AND e.published_at IS NULL AND e.dead_at IS NULL
               AND (e.locked_until IS NULL OR e.locked_until OPERATOR(pg_catalog.<=) now)
               AND (e.next_attempt_at IS NULL OR e.next_attempt_at OPERATOR(pg_catalog.<=) now)
            RETURNING e.*)
        SELECT * FROM claimed ORDER BY claimed.id;
    ELSIF takeovers THEN
        RETURN QUERY
        WITH claimed AS (
            UPDATE idempotency.outbox_events e
               SET locked_until = now OPERATOR(pg_catalog.+) p_lease, lease_token = token,
                   takeovers = e.takeovers OPERATOR(pg_catalog.+)
                               (e.locked_until IS NOT NULL)::pg_catalog.int4
             WHERE e.id OPERATOR(pg_catalog.=) ANY (chosen)
               AND e.published_at IS NULL AND e.dead_at IS NULL
               AND (e.locked_until IS NULL OR e.locked_until OPERATOR(pg_catalog.<=) now)
               AND (e.next_attempt_at IS NULL OR e.next_attempt_at OPERATOR(pg_catalog.<=) now)
            RETURNING e.*)
        SELECT * FROM claimed ORDER BY claimed.id;
    ELSE
        RETURN QUERY
        WITH claimed AS (
            UPDATE idempotency.outbox_events e
               SET locked_until = now OPERATOR(pg_catalog.+) p_lease, lease_token = token
             WHERE e.id OPERATOR(pg_catalog.=) ANY (chosen)
               AND e.published_at IS NULL AND e.dead_at IS NULL
               AND (e.locked_until IS NULL OR e.locked_until OPERATOR(pg_catalog.<=) now)
               AND (e.next_attempt_at IS NULL OR e.next_attempt_at OPERATOR(pg_catalog.<=) now)
            RETURNING e.*)
        SELECT * FROM claimed ORDER BY claimed.id;
    END IF;
END
$$;

-- the 1.0 script's REVOKE ALL ON ALL ROUTINES came before it: only the
-- owner may run it, as every helper
REVOKE ALL ON FUNCTION idempotency.portable_claim_events(integer, interval, boolean) FROM PUBLIC;

-- portable helper: since 1.7, again in 1.8

-- Whether the session's role "caller" may mark the event "e"
-- (LEASE_ROLE_ALLOWS): 1.7 by its lease_role, 1.8 by the role its
-- lease_role_name names (portable_binding_allows(), sql/portable/keys.sql).
CREATE FUNCTION idempotency.portable_lease_allows(e idempotency.outbox_events, caller regrole)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF idempotency.portable_holders_by_name() THEN
        RETURN idempotency.portable_binding_allows(e.lease_role, e.lease_role_name, caller);
    END IF;
    RETURN e.lease_role IS NULL
        OR e.lease_role::pg_catalog.oid OPERATOR(pg_catalog.=) caller::pg_catalog.oid
        OR pg_catalog.pg_has_role(caller::pg_catalog.oid, e.lease_role::pg_catalog.oid, 'MEMBER');
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_lease_allows(idempotency.outbox_events, regrole) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_lease_allows(idempotency.outbox_events, regrole) IS 'portable edition: whether the session''s role may mark an event';

-- After a mark of 1.7 by "caller" changed "updated" events: when the ids
-- name more, refuse the call (42501) if one of them is a pending event
-- that another role leased (refuse_other_lease); the error rolls back
-- what the mark changed.
CREATE FUNCTION idempotency.portable_refuse_other_lease(p_ids bigint[], caller regrole,
                                                        updated integer)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    refused idempotency.outbox_events;
    holder name;
BEGIN
    IF updated OPERATOR(pg_catalog.>=) COALESCE(pg_catalog.cardinality(p_ids), 0) THEN
        RETURN;
    END IF;
    SELECT e.* INTO refused
      FROM idempotency.outbox_events e
     WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
       AND e.published_at IS NULL AND e.dead_at IS NULL
       AND NOT idempotency.portable_lease_allows(e, caller)
     ORDER BY e.id LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT idempotency.portable_holders_by_name() THEN
        RAISE EXCEPTION 'permission denied to mark outbox event %', refused.id
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Another role leased the event (claim_events); only that role and its members may mark it.',
                  HINT = 'Mark events as the role that claimed them.';
    END IF;
    -- 1.8: the message names the lease's role
    holder := refused.lease_role_name;
    IF holder IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                                      WHERE r.rolname OPERATOR(pg_catalog.=) holder) THEN
        RAISE EXCEPTION 'permission denied to mark outbox event %', refused.id
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = CASE WHEN holder IS NULL
                                THEN 'The role that leased the event (claim_events) is not recorded by name.'
                                ELSE pg_catalog.format('Role "%s", which leased the event (claim_events), does not exist.', holder) END,
                  HINT = 'Only the extension''s owner or a superuser may mark the event; once its lease runs out, claim_events hands it out again.';
    END IF;
    RAISE EXCEPTION 'permission denied to mark outbox event %', refused.id
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = pg_catalog.format('Role "%s" leased the event (claim_events); only that role and its members may mark it.', holder),
              HINT = pg_catalog.format('Mark events as role "%s"; the extension''s owner or a superuser may also mark them.', holder);
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_refuse_other_lease(bigint[], regrole, integer) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_refuse_other_lease(bigint[], regrole, integer) IS 'portable edition: refuse a mark of another role''s leased event';

-- portable: idempotency_enqueue_event
CREATE FUNCTION idempotency.enqueue_event(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
    bucket integer;
    notified boolean;
BEGIN
    -- the usual arguments pass one test (GREATEST and ALL: fewer calls to
    -- set up at each transaction than two comparisons per argument);
    -- others go to the helpers, which raise the C's errors in its order
    IF (GREATEST(pg_catalog.char_length($1), pg_catalog.char_length($2), pg_catalog.char_length($3))
            OPERATOR(pg_catalog.<=) 255
        AND '' COLLATE "C" OPERATOR(pg_catalog.<>) ALL (ARRAY[$1, $2, $3])
        AND $4 IS NOT NULL
        AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off') IS NOT TRUE THEN
        PERFORM idempotency.portable_outbox_event_args($1, $2, $3, $4);
        PERFORM idempotency.portable_prevent_if_read_only('idempotency.enqueue_event()');
    END IF;
    -- before the id is drawn: see the locking rules of src/outbox.c (the
    -- transaction's first bucket in this expression, others by the helper)
    bucket := idempotency.portable_outbox_bucket($1, $2);
    IF NOT idempotency.portable_outbox_lock_first(bucket) THEN
        PERFORM idempotency.portable_outbox_lock_for_write(ARRAY[bucket]);
    END IF;
    INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
    VALUES ($1, $2, $3, $4, $5) RETURNING id INTO new_id;
    notified := idempotency.portable_outbox_notify($1);
    RETURN new_id;
END
$$;

-- portable: idempotency_enqueue_events
CREATE FUNCTION idempotency.enqueue_events(
    aggregate_types text[],
    aggregate_ids   text[],
    event_types     text[],
    payloads        jsonb[],
    headers         jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 100
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer;
BEGIN
    n := idempotency.portable_arg_name_array($1, 'aggregate_types', 1, 255, -1);
    PERFORM idempotency.portable_arg_name_array($2, 'aggregate_ids', 1, 255, n);
    PERFORM idempotency.portable_arg_name_array($3, 'event_types', 1, 255, n);
    PERFORM idempotency.portable_arg_array($4, 'payloads', n, false);
    IF $5 IS NOT NULL THEN
        PERFORM idempotency.portable_arg_array($5, 'headers', n, true);
    END IF;
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.enqueue_events()');
    -- before the ids are drawn; each bucket once
    PERFORM idempotency.portable_outbox_lock_for_write(ARRAY(
        SELECT idempotency.portable_outbox_bucket(u.t, u.a)
          FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(t, a)));
    RETURN QUERY
    INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
    SELECT u.t, u.a, u.e, u.p, u.h FROM ROWS FROM (
        pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),
        pg_catalog.unnest($4), pg_catalog.unnest($5)) WITH ORDINALITY AS u(t, a, e, p, h, n)
     ORDER BY u.n
    RETURNING id;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        PERFORM idempotency.portable_outbox_notify($1[pg_catalog.array_lower($1, 1)]);
    END IF;
END
$$;

-- The owner needs EXECUTE on pg_logical_emit_message() (doc/portable.md).
-- portable: idempotency_emit_event
CREATE FUNCTION idempotency.emit_event(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT NULL)
RETURNS pg_catalog.pg_lsn
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency.portable_outbox_event_args($1, $2, $3, $4);
    -- the message is WAL: a read-only transaction may not write it
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.emit_event()');
    RETURN pg_catalog.pg_logical_emit_message(true, 'idempotency_outbox',
        '{"aggregate_type": ' OPERATOR(pg_catalog.||) pg_catalog.to_json($1)::pg_catalog.text
        OPERATOR(pg_catalog.||) ', "aggregate_id": ' OPERATOR(pg_catalog.||) pg_catalog.to_json($2)::pg_catalog.text
        OPERATOR(pg_catalog.||) ', "event_type": ' OPERATOR(pg_catalog.||) pg_catalog.to_json($3)::pg_catalog.text
        OPERATOR(pg_catalog.||) ', "payload": ' OPERATOR(pg_catalog.||) $4::pg_catalog.text
        OPERATOR(pg_catalog.||) ', "headers": ' OPERATOR(pg_catalog.||) COALESCE($5::pg_catalog.text, 'null')
        OPERATOR(pg_catalog.||) '}');
END
$$;

-- portable: idempotency_claim_events
CREATE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 100
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- dynamic: a plan kept from before a change of the table's columns
    -- would return rows of the old row type
    RETURN QUERY EXECUTE 'SELECT * FROM idempotency.portable_claim_events($1, $2, false)'
        USING $1, $2;
END
$$;

-- portable: idempotency_claim_events_1_7, idempotency_claim_events_1_3
CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 100
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF idempotency.portable_holders_recorded() THEN
        -- 1.7: events taken over too often go dead first (the C's
        -- claim_events of 1.7; the one of 1.3 does not)
        PERFORM idempotency.portable_outbox_retire_taken_over();
    END IF;
    -- dynamic: a plan kept from before a change of the table's columns
    -- would return rows of the old row type
    RETURN QUERY EXECUTE 'SELECT * FROM idempotency.portable_claim_events($1, $2, true)'
        USING $1, $2;
END
$$;

-- portable helper: since 1.8, again in 1.9

-- The bounds of claim_events (check_claim_bounds() in src/outbox.c):
-- refuse (22023) a batch above idempotency.outbox_max_batch or a lease
-- above idempotency.outbox_max_lease.  The C defines them PGC_SUSET; a
-- placeholder cannot be so defined, and a relay's session could SET it
-- to anything, so a bound is the database's (portable_stored_setting()),
-- else the C's default, and a session's own value counts only when it is
-- lower: a session may tighten its bounds, never lift them.  Arguments
-- that are bad anyway are left to portable_claim_events, which refuses
-- them first, as the C does.
CREATE FUNCTION idempotency.portable_outbox_claim_bounds(p_batch integer, p_lease interval)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    db_batch text := idempotency.portable_stored_setting('idempotency.outbox_max_batch', NULL);
    db_lease text := idempotency.portable_stored_setting('idempotency.outbox_max_lease', NULL);
    max_batch integer := 10000;
    max_lease interval := '1 hour';
BEGIN
    IF p_batch IS NULL OR p_batch OPERATOR(pg_catalog.<=) 0 OR p_lease IS NULL
       OR p_lease OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval
       OR p_lease OPERATOR(pg_catalog.>) '1200 mons'::pg_catalog.interval THEN
        RETURN;
    END IF;
    IF db_batch IS NOT NULL THEN
        BEGIN
            max_batch := db_batch::pg_catalog.int4;
        EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
            max_batch := NULL;
        END;
        IF max_batch IS NULL OR max_batch OPERATOR(pg_catalog.<) 1 THEN
            RAISE EXCEPTION 'invalid value for parameter "%": "%"', 'idempotency.outbox_max_batch', db_batch
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF db_lease IS NOT NULL THEN
        BEGIN
            max_lease := db_lease::pg_catalog.interval;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
                       OR interval_field_overflow THEN
            max_lease := NULL;
        END;
        IF max_lease IS NULL OR max_lease OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval
           OR max_lease OPERATOR(pg_catalog.>) '1200 mons'::pg_catalog.interval THEN
            RAISE EXCEPTION 'invalid value for parameter "%": "%"', 'idempotency.outbox_max_lease', db_lease
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'The value must be a positive interval of at most 100 years.';
        END IF;
    END IF;
    max_batch := LEAST(max_batch, idempotency.portable_setting_int('idempotency.outbox_max_batch',
                                                                   max_batch, 1, 2147483647));
    max_lease := LEAST(max_lease, idempotency.portable_arg_interval(NULL, 'lease',
                                                                    'idempotency.outbox_max_lease', max_lease));
    IF p_batch OPERATOR(pg_catalog.>) max_batch THEN
        RAISE EXCEPTION 'batch exceeds idempotency.outbox_max_batch'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The batch given is %s; idempotency.outbox_max_batch is %s.',
                                             p_batch, max_batch),
                  HINT = 'Claim smaller batches; only a superuser may raise the setting.';
    END IF;
    IF p_lease OPERATOR(pg_catalog.>) max_lease THEN
        RAISE EXCEPTION 'lease exceeds idempotency.outbox_max_lease'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The lease given is %s; idempotency.outbox_max_lease is %s.',
                                             p_lease, max_lease),
                  HINT = 'Claim with a shorter lease; only a superuser may raise the setting.';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_outbox_claim_bounds(integer, interval) FROM PUBLIC;

-- portable helper: since 1.9

-- One reader of pg_db_role_setting serves every setting stored for the
-- database or a role (portable_stored_setting(), sql/portable/settings.sql)
-- from 1.9: an installation updated from an older edition has the
-- database's own.
DO $portable$
BEGIN
    IF pg_catalog.to_regprocedure('idempotency.portable_database_setting(text)') IS NOT NULL THEN
        DROP FUNCTION idempotency.portable_database_setting(text);
    END IF;
END
$portable$;

-- portable: idempotency_claim_events_1_8
CREATE OR REPLACE FUNCTION idempotency.claim_events(
    batch integer  DEFAULT 100,
    lease interval DEFAULT '30 seconds')
RETURNS SETOF idempotency.outbox_events
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 100
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- 1.8: within the bounds, before anything is written; then as 1.7
    -- (portable_claim_events records the lease's role by name)
    PERFORM idempotency.portable_outbox_claim_bounds($1, $2);
    PERFORM idempotency.portable_outbox_retire_taken_over();
    -- dynamic: a plan kept from before a change of the table's columns
    -- would return rows of the old row type
    RETURN QUERY EXECUTE 'SELECT * FROM idempotency.portable_claim_events($1, $2, true)'
        USING $1, $2;
END
$$;

-- portable helper: since 1.0, again in 1.8, 1.9

-- This session's last notification (1.8): the transaction that sent it
-- and when, in microseconds since 1970, as this session's currval() of
-- these two sequences, which portable_outbox_notify() sets with setval().
-- Only the extension's owner may read or set them, so no caller can
-- forge them, as it could the session setting that held the time before
-- 1.8 (idempotency_portable.outbox_last_notify).  setval() is not undone
-- by a rollback: the transaction's status tells whether the notification
-- was sent (src/outbox.c counts only committed ones).  currval() is the
-- session's own, whatever other sessions set.
CREATE SEQUENCE IF NOT EXISTS idempotency.portable_outbox_notified_xact AS bigint;
CREATE SEQUENCE IF NOT EXISTS idempotency.portable_outbox_notified_at AS bigint;
REVOKE ALL ON SEQUENCE idempotency.portable_outbox_notified_xact FROM PUBLIC;
REVOKE ALL ON SEQUENCE idempotency.portable_outbox_notified_at FROM PUBLIC;

-- Now, in microseconds since 1970 (1.9: in float8, a tenth of the cost
-- of numeric, and exact to the microsecond for some 280 years).
CREATE FUNCTION idempotency.portable_outbox_usecs()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
SELECT (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8
$$;

REVOKE ALL ON FUNCTION idempotency.portable_outbox_usecs() FROM PUBLIC;

-- portable helper: since 1.0, again in 1.7, 1.8, 1.9

-- Wake the relays when this transaction commits (the payload: the
-- aggregate type of the event), or commit quietly holding a quiet
-- commit's lock (see "Waking the relays" in src/outbox.c).
--
-- 1.8: decided again at every enqueue, from nothing a caller can set
-- (session settings idempotency_portable.* decided before).  Once this
-- transaction notified, perhaps in a savepoint rolled back since, which
-- drops that notification, it notifies again: PostgreSQL sends one
-- notification per channel and payload however often a transaction asks.
-- A quiet commit's lock taken again is only counted again in the
-- backend's local lock table.
--
-- 1.9: true when the transaction notifies, false when it commits quietly
-- or notifications are off, so that the writers call it in an
-- expression, without a statement of its own (portable_outbox_wake(),
-- which returned nothing, before).
CREATE FUNCTION idempotency.portable_outbox_notify(aggregate_type text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    this_xact pg_catalog.xid8;
    last_xact pg_catalog.xid8;
    last_at bigint;
    session_value text;
    db_value text;
    within bigint;
    now_us bigint;
    sent text;
BEGIN
    session_value := pg_catalog.current_setting('idempotency.outbox_notify_interval', true);
    IF COALESCE(session_value, '10ms') OPERATOR(pg_catalog.=) '10ms'
       AND COALESCE(pg_catalog.current_setting('idempotency.outbox_notify', true), 'on')
           OPERATOR(pg_catalog.=) 'on' THEN
        -- both unset, or the C library's defaults as it shows them (1.9:
        -- no reader's expression; a bigint constant, not cast at each call)
        within := 10000::pg_catalog.int8;
    ELSE
        IF NOT idempotency.portable_setting_bool('idempotency.outbox_notify', true) THEN
            RETURN false;
        END IF;
        -- the session's value is checked at every enqueue, before anything
        -- depends on it, as the C checks it at its SET
        within := idempotency.portable_ms_value('idempotency.outbox_notify_interval', session_value,
                                                10, 0, 60000)::pg_catalog.int8 OPERATOR(pg_catalog.*) 1000;
    END IF;
    this_xact := pg_catalog.pg_current_xact_id();
    BEGIN
        last_xact := pg_catalog.currval('idempotency.portable_outbox_notified_xact'::pg_catalog.regclass)
                     ::pg_catalog.text::pg_catalog.xid8;
        last_at := pg_catalog.currval('idempotency.portable_outbox_notified_at'::pg_catalog.regclass);
    EXCEPTION WHEN object_not_in_prerequisite_state THEN
        -- none yet in this session
        last_xact := NULL;
    END;
    -- (1.7) the interval is the session's only when it is shorter than the
    -- database's: ALTER DATABASE ... SET, else ALTER ROLE ALL ... SET, else
    -- 10 ms.  A longer one would keep a commit quiet beyond the relays'
    -- second look (doc/reference.md, "Waking relays"), and the C edition
    -- lets only superusers set it (PGC_SUSET), which a placeholder cannot.
    -- The database's is read only for a commit that the session's would
    -- keep quiet, and parsed only when the session's differs; a session
    -- without one (none set for the database when it began) has the
    -- default, as in the C edition, which takes the database's when a
    -- session begins.
    now_us := idempotency.portable_outbox_usecs();
    IF last_xact OPERATOR(pg_catalog.<>) this_xact
       AND pg_catalog.pg_xact_status(last_xact) OPERATOR(pg_catalog.=) 'committed'
       AND (now_us OPERATOR(pg_catalog.-) last_at) OPERATOR(pg_catalog.<) within THEN
        IF session_value IS NOT NULL THEN
            db_value := idempotency.portable_stored_setting('idempotency.outbox_notify_interval', NULL);
            IF db_value IS DISTINCT FROM session_value THEN
                within := LEAST(within, idempotency.portable_ms_value('idempotency.outbox_notify_interval',
                                                                      db_value, 10, 0, 60000)::pg_catalog.int8
                                        OPERATOR(pg_catalog.*) 1000);
            END IF;
            now_us := idempotency.portable_outbox_usecs();
        END IF;
        -- counted first, then decided: never quiet and uncounted
        IF (now_us OPERATOR(pg_catalog.-) last_at) OPERATOR(pg_catalog.<) within THEN
            -- (no statement: nobody holds these locks but in share mode)
            IF NOT pg_catalog.pg_try_advisory_xact_lock_shared(1330992194,
                       1040 OPERATOR(pg_catalog.+) (pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.%) 16)) THEN
                PERFORM pg_catalog.pg_advisory_xact_lock_shared(1330992194,
                    1040 OPERATOR(pg_catalog.+) (pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.%) 16));
            END IF;
            IF (idempotency.portable_outbox_usecs() OPERATOR(pg_catalog.-) last_at)
               OPERATOR(pg_catalog.<) within THEN
                RETURN false;
            END IF;
        END IF;
    END IF;
    -- (an assignment: no statement)
    sent := pg_catalog.pg_notify('idempotency_outbox', aggregate_type)::pg_catalog.text;
    IF last_xact IS DISTINCT FROM this_xact THEN
        -- the transaction first: a time is never paired with a transaction
        -- that did not notify at it (assignments: no statement each)
        last_at := pg_catalog.setval('idempotency.portable_outbox_notified_xact'::pg_catalog.regclass,
                                     this_xact::pg_catalog.text::pg_catalog.int8);
        last_at := pg_catalog.setval('idempotency.portable_outbox_notified_at'::pg_catalog.regclass,
                                     idempotency.portable_outbox_usecs());
    END IF;
    RETURN true;
END
$$;

REVOKE ALL ON FUNCTION idempotency.portable_outbox_notify(text) FROM PUBLIC;

-- portable helper: since 1.9

-- portable_outbox_notify() replaces portable_outbox_wake(): an
-- installation updated from an older edition has it.
DO $portable$
BEGIN
    IF pg_catalog.to_regprocedure('idempotency.portable_outbox_wake(text)') IS NOT NULL THEN
        DROP FUNCTION idempotency.portable_outbox_wake(text);
    END IF;
END
$portable$;

-- portable helper: since 1.3, again in 1.7

-- After a mark without a lease token (1.3) changed fewer events than it
-- was given: warn, with the fix, when some of them were left alone because
-- their lease was taken over (warn_taken_over() in src/outbox.c).
CREATE FUNCTION idempotency.portable_warn_taken_over(p_ids bigint[], call text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    n bigint;
BEGIN
    SELECT pg_catalog.count(*) INTO n
      FROM idempotency.outbox_events e
     WHERE e.id OPERATOR(pg_catalog.=) ANY (p_ids)
       AND e.published_at IS NULL AND e.dead_at IS NULL
       AND e.takeovers OPERATOR(pg_catalog.>) 0;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING '% without lease_token left alone % event(s) whose lease was taken over', call, n
            USING DETAIL = 'They were leased again after a lease of them ran out unmarked; a mark without a token cannot tell the relay that leased an event first from the one that took it over.',
                  HINT = 'Pass the lease_token that claim_events() returned with the event.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION idempotency.portable_warn_taken_over(bigint[], text) FROM PUBLIC;

-- portable helper: since 1.7

-- Before a claim picks candidates: every pending event whose lease ran out
-- unmarked and whose failures and takeovers, with the takeover the claim
-- would now count, reach outbox_max_attempts is made dead
-- (retire_taken_over in src/outbox.c).
CREATE FUNCTION idempotency.portable_outbox_retire_taken_over()
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    now timestamptz := pg_catalog.clock_timestamp();
    max_attempts integer := idempotency.portable_setting_int('idempotency.outbox_max_attempts', 10, 1, 1000);
BEGIN
    -- the claim refuses these transactions next, with its own errors
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
       OR pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
        RETURN;
    END IF;
    UPDATE idempotency.outbox_events e
       SET dead_at = now, locked_until = NULL, next_attempt_at = NULL,
           takeovers = e.takeovers OPERATOR(pg_catalog.+) 1,
           last_error = pg_catalog.format('lease taken over %s times without a mark',
                                          e.takeovers OPERATOR(pg_catalog.+) 1)
     WHERE e.published_at IS NULL AND e.dead_at IS NULL
       AND e.locked_until OPERATOR(pg_catalog.<=) now
       AND (e.next_attempt_at IS NULL OR e.next_attempt_at OPERATOR(pg_catalog.<=) now)
       AND e.attempts OPERATOR(pg_catalog.+) e.takeovers OPERATOR(pg_catalog.+) 1
           OPERATOR(pg_catalog.>=) max_attempts;
END
$$;

REVOKE ALL ON FUNCTION idempotency.portable_outbox_retire_taken_over() FROM PUBLIC;

-- portable: idempotency_mark_published
CREATE FUNCTION idempotency.mark_published(ids bigint[])
RETURNS integer
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency.portable_mark_events($1, NULL, NULL, false, false) $$;

-- portable: idempotency_mark_published_1_1
CREATE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency.portable_mark_events($1, NULL, $2, false, false) $$;

-- portable: idempotency_mark_published_1_8, idempotency_mark_published_1_7, idempotency_mark_published_1_3
CREATE OR REPLACE FUNCTION idempotency.mark_published(ids bigint[], lease_token bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    updated integer := idempotency.portable_mark_events($1, NULL, $2, false, true);
BEGIN
    IF $2 IS NULL AND updated OPERATOR(pg_catalog.<) pg_catalog.cardinality($1) THEN
        PERFORM idempotency.portable_warn_taken_over($1, 'idempotency.mark_published()');
    END IF;
    RETURN updated;
END
$$;

-- portable: idempotency_mark_failed
CREATE FUNCTION idempotency.mark_failed(ids bigint[], error text)
RETURNS integer
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency.portable_mark_events($1, $2, NULL, true, false) $$;

-- portable: idempotency_mark_failed_1_1
CREATE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency.portable_mark_events($1, $2, $3, true, false) $$;

-- portable: idempotency_mark_failed_1_8, idempotency_mark_failed_1_7, idempotency_mark_failed_1_3
CREATE OR REPLACE FUNCTION idempotency.mark_failed(ids bigint[], error text, lease_token bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    updated integer := idempotency.portable_mark_events($1, $2, $3, true, true);
BEGIN
    IF $3 IS NULL AND updated OPERATOR(pg_catalog.<) pg_catalog.cardinality($1) THEN
        PERFORM idempotency.portable_warn_taken_over($1, 'idempotency.mark_failed()');
    END IF;
    RETURN updated;
END
$$;

-- The holders of the quiet commits' locks, but this session (as
-- GetLockConflicts() counts them).
-- portable: idempotency_outbox_quiet_commits
CREATE FUNCTION idempotency.outbox_quiet_commits()
RETURNS integer
LANGUAGE sql VOLATILE PARALLEL SAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.count(*)::pg_catalog.int4
  FROM pg_catalog.pg_locks l
 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND l.classid OPERATOR(pg_catalog.=) '1330992194'::pg_catalog.oid
   AND l.objsubid OPERATOR(pg_catalog.=) 2
   AND l.objid OPERATOR(pg_catalog.>=) '1040'::pg_catalog.oid
   AND l.objid OPERATOR(pg_catalog.<=) '1055'::pg_catalog.oid
   AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
$$;

-- portable: idempotency_process_once
CREATE FUNCTION idempotency.process_once(consumer text, event_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- the usual arguments pass one test (as enqueue_event's); others go
    -- to the helpers, which raise the C's errors in its order
    IF (GREATEST(pg_catalog.char_length($1), pg_catalog.char_length($2)) OPERATOR(pg_catalog.<=) 255
        AND '' COLLATE "C" OPERATOR(pg_catalog.<>) ALL (ARRAY[$1, $2])
        AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off') IS NOT TRUE THEN
        PERFORM idempotency.portable_arg_name($1, 'consumer', 1, 255);
        PERFORM idempotency.portable_arg_name($2, 'event_id', 1, 255);
        PERFORM idempotency.portable_prevent_if_read_only('idempotency.process_once()');
    END IF;
    -- A duplicate that this transaction sees writes nothing: the mark is
    -- looked for first, as in the C, by the statement that writes it.
    INSERT INTO idempotency.processed_events (consumer, event_id)
    SELECT $1, $2
     WHERE NOT EXISTS (SELECT FROM idempotency.processed_events p
                        WHERE p.consumer OPERATOR(pg_catalog.=) $1
                          AND p.event_id OPERATOR(pg_catalog.=) $2)
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END
$$;

-- portable: idempotency_process_once_batch
CREATE FUNCTION idempotency.process_once(consumer text, event_ids text[])
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ROWS 100
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sorted text[];
BEGIN
    PERFORM idempotency.portable_arg_name($1, 'consumer', 1, 255);
    PERFORM idempotency.portable_arg_name_array($2, 'event_ids', 1, 255, -1);
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.process_once()');
    -- the ids in byte order, each once, marked in that order, so that
    -- batches sharing ids wait for each other instead of deadlocking
    sorted := ARRAY(SELECT DISTINCT u.e COLLATE "C" FROM pg_catalog.unnest($2) AS u(e)
                     ORDER BY 1);
    -- the ids marked now, in the order of their first occurrence
    RETURN QUERY
    WITH marked AS (
        INSERT INTO idempotency.processed_events (consumer, event_id)
        SELECT $1, u.e FROM pg_catalog.unnest(sorted) WITH ORDINALITY AS u(e, n) ORDER BY u.n
        ON CONFLICT DO NOTHING RETURNING event_id)
    SELECT m.event_id::pg_catalog.text
      FROM marked m
      JOIN (SELECT u.e, pg_catalog.min(u.n) AS n
              FROM pg_catalog.unnest($2) WITH ORDINALITY AS u(e, n) GROUP BY u.e) g
        ON g.e COLLATE "C" OPERATOR(pg_catalog.=) m.event_id
     ORDER BY g.n;
END
$$;
