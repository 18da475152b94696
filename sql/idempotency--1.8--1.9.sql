-- idempotency 1.8 -> 1.9 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.9 and an
-- updated one are the same.
--
-- 1.9 keeps exactly-once behind transaction poolers and makes the portable
-- edition's hot paths cheaper.  Each section says what it changes and why.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.9'" to load this file. \quit

-- [section: the portable edition's hot paths] ------------------------------

--
-- The portable edition (sql/portable/, doc/portable.md) does each call's
-- work in fewer PL/pgSQL calls and statements: the usual arguments pass
-- one inlined test, the key's hash and the request's fingerprint are
-- inlined SQL, a replay is read by the statement that finds the row, the
-- scope check looks at scope_grants' size first, the holder check
-- compares the caller's own name first, one reader of pg_db_role_setting
-- serves every stored setting, execute() reads a plain statement without
-- its character loop and transition() knows the usual types' equality
-- without a catalog query and reads its columns' types in one statement.
-- Helpers are called in expressions, not by PERFORM (a statement each),
-- and the usual call evaluates few expressions, each being set up again
-- at every transaction: enqueue_event() takes its transaction's first
-- bucket and decides its notification without a statement of its own
-- (portable_outbox_notify() replaces portable_outbox_wake()), and
-- execute() sets up its character lexer only for a text that needs it.
-- No promise changes; doc/performance.md has the figures.  The helpers
-- that change are replaced by this version's script (sql/portable/,
-- blocks "again in 1.9"); the functions below, whose portable bodies
-- changed and whose C symbols did not, are stated again so that an
-- installation of the portable edition updated to 1.9 gets their bodies.  In the C edition each statement binds the symbol it
-- bound before, and nothing changes.
--
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

CREATE OR REPLACE FUNCTION idempotency.check_key_hash()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idempotency_check_key_hash'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.transition(
    tbl          regclass,
    key_column   name,
    key          text,
    state_column name,
    from_state   text,
    to_state     text,
    set_columns  jsonb DEFAULT NULL)
RETURNS idempotency.transition_result
AS 'MODULE_PATHNAME', 'idempotency_transition'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.enqueue_event(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idempotency_enqueue_event'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION idempotency.enqueue_events(
    aggregate_types text[],
    aggregate_ids   text[],
    event_types     text[],
    payloads        jsonb[],
    headers         jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'idempotency_enqueue_events'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE OR REPLACE FUNCTION idempotency.process_once(consumer text, event_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idempotency_process_once'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- [section: grants repair] -------------------------------------------------

--
-- Last, after every grant of this script: through pg_tle, grants made by
-- an update script are recorded as initial privileges and pg_dump would
-- leave them out; queue_pending_grants() (1.8) makes them ordinary grants
-- at the commit.  Keep it the script's final statement.
SELECT idempotency.queue_pending_grants();
