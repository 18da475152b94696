--
-- Section 3: state machines.  The trigger and transition() are in
-- src/state_machine.c and src/transition.c.
--
CREATE TABLE idempotency.state_machines (
    name        text COLLATE "C" PRIMARY KEY,
    transitions jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE idempotency.state_machines IS 'named state machines: {"from": ["to", ...], ...}; enforced by the trigger of enforce_state_machine()';
SELECT pg_catalog.pg_extension_config_dump('idempotency.state_machines', '');

CREATE TYPE idempotency.transition_result AS (
    outcome       text,
    current_state text
);
COMMENT ON TYPE idempotency.transition_result IS 'outcome of transition(): applied, already, rejected or not_found, and the state the row is in';

CREATE FUNCTION idempotency.define_state_machine(name text, transitions jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_define_state_machine'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.define_state_machine(text, jsonb) IS 'define a state machine, or replace the transitions of the one of that name';

CREATE FUNCTION idempotency.state_machine_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idempotency_state_machine_trigger'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.state_machine_trigger() IS 'trigger of enforce_state_machine(): refuses (23514) a state change the machine lacks';

CREATE FUNCTION idempotency.enforce_state_machine(tbl regclass, state_column name, machine text)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_enforce_state_machine'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.enforce_state_machine(regclass, name, text) IS 'install (or replace) the trigger that keeps state_column of tbl on the transitions of machine';

CREATE FUNCTION idempotency.drop_state_machine_enforcement(tbl regclass, state_column name)
RETURNS void
AS 'MODULE_PATHNAME', 'idempotency_drop_state_machine_enforcement'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.drop_state_machine_enforcement(regclass, name) IS 'remove the trigger of enforce_state_machine() from state_column of tbl, if any';

CREATE FUNCTION idempotency.transition(
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
COMMENT ON FUNCTION idempotency.transition(regclass, name, text, name, text, text, jsonb) IS 'guarded update of one row from from_state to to_state: applied, already, rejected or not_found';
