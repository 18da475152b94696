-- sql/portable/state_machine.sql: the portable bodies of
-- src/state_machine.c: define_state_machine, enforce_state_machine,
-- drop_state_machine_enforcement and state_machine_trigger.
--
-- enforce_state_machine installs, with the caller's rights, the same
-- BEFORE UPDATE row trigger as the C,
--
--   zz_idempotency_state_machine_<attnum> ... WHEN (OLD.col IS DISTINCT FROM NEW.col)
--   EXECUTE FUNCTION idempotency.state_machine_trigger('col', 'machine')
--
-- on the table and, unless it is partitioned, on its inheritance
-- children, and drops the AFTER trigger of versions up to 1.2.
--
-- Edition differences (doc/portable.md): the trigger reads the machine
-- at each firing (the C keeps it per backend until it is redefined); it is
-- SECURITY DEFINER, where the C switches to the extension owner to read
-- the machine; called other than as a trigger it raises PL/pgSQL's own
-- error (0A000) before its protocol check; the state is compared as the
-- column's text output, as the C's SPI_getvalue() does.

-- portable helper: since 1.0

-- The transitions of a machine, or NULL; read as the owner.
CREATE FUNCTION idempotency.portable_machine(machine text)
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL: the helpers come before the table in the 1.0 script
    RETURN (SELECT m.transitions FROM idempotency.state_machines m
             WHERE m.name OPERATOR(pg_catalog.=) machine);
END
$$;

-- Check the shape of a transitions object (parse_transitions): 22023 with
-- a detail that names the bad part.
CREATE FUNCTION idempotency.portable_check_transitions(transitions jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    from_state text;
    targets jsonb;
    element jsonb;
    position bigint;
BEGIN
    IF pg_catalog.jsonb_typeof(transitions) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'transitions must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The transitions given are a JSON %s; the form is {"PENDING": ["PAID", "CANCELLED"], "PAID": ["SHIPPED"]}.',
                                             CASE WHEN pg_catalog.jsonb_typeof(transitions) OPERATOR(pg_catalog.=) 'array'
                                                  THEN 'array' ELSE 'scalar' END);
    END IF;
    FOR from_state, targets IN SELECT e.key, e.value FROM pg_catalog.jsonb_each(transitions) AS e LOOP
        IF pg_catalog.jsonb_typeof(targets) OPERATOR(pg_catalog.<>) 'array' THEN
            RAISE EXCEPTION 'invalid transitions of state "%"', from_state
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('The value of "%s" is a JSON %s, not an array of state names.',
                                                 from_state, pg_catalog.jsonb_typeof(targets));
        END IF;
        FOR element, position IN
            SELECT a.value, a.n FROM pg_catalog.jsonb_array_elements(targets) WITH ORDINALITY AS a(value, n)
        LOOP
            IF pg_catalog.jsonb_typeof(element) OPERATOR(pg_catalog.<>) 'string' THEN
                RAISE EXCEPTION 'invalid transitions of state "%"', from_state
                    USING ERRCODE = 'invalid_parameter_value',
                          DETAIL = pg_catalog.format('Element %s of "%s" is a JSON %s, not a state name.',
                                                     position, from_state, pg_catalog.jsonb_typeof(element));
            END IF;
        END LOOP;
    END LOOP;
END
$$;

-- A regclass argument naming an existing relation (idem_arg_table).
CREATE FUNCTION idempotency.portable_arg_table(tbl regclass)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'tbl must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tbl::pg_catalog.oid
            USING ERRCODE = 'undefined_table';
    END IF;
END
$$;

-- The attribute number of a user column (idem_column_attnum), or 42703.
CREATE FUNCTION idempotency.portable_column_attnum(tbl regclass, colname text)
RETURNS smallint
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    result smallint;
BEGIN
    SELECT a.attnum INTO result FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) tbl AND a.attname OPERATOR(pg_catalog.=) colname
       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF result IS NULL THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', colname,
                        (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) tbl)
            USING ERRCODE = 'undefined_column';
    END IF;
    RETURN result;
END
$$;

-- A name argument naming a user column (idem_arg_column).
CREATE FUNCTION idempotency.portable_arg_column(tbl regclass, colname name, argname text)
RETURNS smallint
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF colname IS NULL THEN
        RAISE EXCEPTION '% must not be null', argname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN idempotency.portable_column_attnum(tbl, colname);
END
$$;

-- The tables whose triggers guard the rows that an UPDATE of tbl reaches,
-- tbl first (guarded_tables): a partitioned table alone, any other table
-- with its inheritance children and theirs.
CREATE FUNCTION idempotency.portable_guarded_tables(tbl regclass)
RETURNS SETOF regclass
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
WITH RECURSIVE tree(relid, level) AS (
    SELECT tbl::pg_catalog.oid, 0
    UNION
    SELECT i.inhrelid, t.level OPERATOR(pg_catalog.+) 1
      FROM tree t JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.relid
     WHERE (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) tbl)
           OPERATOR(pg_catalog.<>) 'p')
SELECT relid::pg_catalog.regclass FROM tree
 GROUP BY relid ORDER BY pg_catalog.min(level), relid
$$;

-- Drop a trigger of a table if it has one.
CREATE FUNCTION idempotency.portable_drop_trigger(tbl regclass, trigger_name text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
    PERFORM FROM pg_catalog.pg_trigger g
     WHERE g.tgrelid OPERATOR(pg_catalog.=) tbl AND g.tgname OPERATOR(pg_catalog.=) trigger_name;
    IF FOUND THEN
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', trigger_name, tbl);
    END IF;
END
$$;

-- Install (or replace) the trigger on one table, and drop the AFTER
-- trigger of an older version (enforce_on).
CREATE FUNCTION idempotency.portable_enforce_on(tbl regclass, state_column text, machine text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    attnum smallint := idempotency.portable_column_attnum(tbl, state_column);
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE TRIGGER %I BEFORE UPDATE ON %s FOR EACH ROW'
        ' WHEN (OLD.%I IS DISTINCT FROM NEW.%I)'
        ' EXECUTE FUNCTION idempotency.state_machine_trigger(%L, %L)',
        'zz_idempotency_state_machine_' OPERATOR(pg_catalog.||) attnum, tbl,
        state_column, state_column, state_column, machine);
    PERFORM idempotency.portable_drop_trigger(tbl, 'idempotency_state_machine_' OPERATOR(pg_catalog.||) attnum);
END
$$;

-- portable: idempotency_define_state_machine
CREATE FUNCTION idempotency.define_state_machine(name text, transitions jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency.portable_arg_name($1, 'name', 1, 255);
    IF $2 IS NULL THEN
        RAISE EXCEPTION 'transitions must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM idempotency.portable_check_transitions($2);
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.define_state_machine()');
    INSERT INTO idempotency.state_machines AS m (name, transitions) VALUES ($1, $2)
    ON CONFLICT ON CONSTRAINT state_machines_pkey
    DO UPDATE SET transitions = excluded.transitions, updated_at = pg_catalog.now();
END
$$;

-- portable: idempotency_state_machine_trigger
CREATE FUNCTION idempotency.state_machine_trigger()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state_column text;
    machine_name text;
    from_state text;
    to_state text;
    transitions jsonb;
    allowed text;
    result record;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.<>) 'UPDATE' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW'
       OR TG_NARGS OPERATOR(pg_catalog.<>) 2 THEN
        RAISE EXCEPTION 'state_machine_trigger() must be an UPDATE row trigger with two arguments'
            USING ERRCODE = 'trigger_protocol_violated',
                  HINT = 'Install it with idempotency.enforce_state_machine().';
    END IF;
    -- a BEFORE trigger lets the new row through as it is
    IF TG_WHEN OPERATOR(pg_catalog.=) 'BEFORE' THEN
        result := NEW;
    END IF;
    state_column := TG_ARGV[0];
    machine_name := TG_ARGV[1];
    PERFORM FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) TG_RELID AND a.attname OPERATOR(pg_catalog.=) state_column
       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', state_column, TG_TABLE_NAME
            USING ERRCODE = 'undefined_column',
                  HINT = 'After renaming the state column, call idempotency.enforce_state_machine() again.';
    END IF;
    EXECUTE pg_catalog.format('SELECT ($1).%1$I::pg_catalog.text, ($2).%1$I::pg_catalog.text', state_column)
       INTO from_state, to_state USING OLD, NEW;
    IF from_state OPERATOR(pg_catalog.=) to_state THEN
        RETURN result;
    END IF;

    transitions := idempotency.portable_machine(machine_name);
    IF transitions IS NULL THEN
        RAISE EXCEPTION 'state machine "%" does not exist', machine_name
            USING ERRCODE = 'undefined_object',
                  DETAIL = pg_catalog.format('It is enforced on column "%s" of table "%s".',
                                             state_column, TG_TABLE_NAME);
    END IF;
    IF pg_catalog.jsonb_typeof(transitions OPERATOR(pg_catalog.->) from_state) OPERATOR(pg_catalog.=) 'array'
       AND (transitions OPERATOR(pg_catalog.->) from_state) OPERATOR(pg_catalog.?) to_state THEN
        RETURN result;
    END IF;

    IF from_state IS NOT NULL
       AND pg_catalog.jsonb_typeof(transitions OPERATOR(pg_catalog.->) from_state) OPERATOR(pg_catalog.=) 'array' THEN
        SELECT pg_catalog.string_agg(pg_catalog.quote_literal(t), ', ' ORDER BY t COLLATE "C")
          INTO allowed
          FROM pg_catalog.jsonb_array_elements_text(transitions OPERATOR(pg_catalog.->) from_state) AS t;
    END IF;
    RAISE EXCEPTION 'update of "%" violates state machine "%"', TG_TABLE_NAME, machine_name
        USING ERRCODE = 'check_violation',
              DETAIL = pg_catalog.format('Table "%s" cannot change "%s" from %s to %s: state machine "%s" has no such transition.',
                                         TG_TABLE_NAME, state_column,
                                         COALESCE(pg_catalog.quote_literal(from_state), 'NULL'),
                                         COALESCE(pg_catalog.quote_literal(to_state), 'NULL'),
                                         machine_name),
              HINT = CASE WHEN allowed IS NOT NULL
                          THEN pg_catalog.format('From %s the machine allows %s.',
                                                 pg_catalog.quote_literal(from_state), allowed)
                          ELSE pg_catalog.format('The machine allows no transition from %s.',
                                                 COALESCE(pg_catalog.quote_literal(from_state), 'NULL')) END,
              SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = state_column;
END
$$;

-- portable: idempotency_enforce_state_machine
CREATE FUNCTION idempotency.enforce_state_machine(tbl regclass, state_column name, machine text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    child regclass;
BEGIN
    PERFORM idempotency.portable_arg_table($1);
    PERFORM idempotency.portable_arg_column($1, $2, 'state_column');
    PERFORM idempotency.portable_arg_name($3, 'machine', 1, 255);
    PERFORM idempotency.portable_prevent_if_read_only('idempotency.enforce_state_machine()');
    IF idempotency.portable_machine($3) IS NULL THEN
        RAISE EXCEPTION 'state machine "%" does not exist', $3
            USING ERRCODE = 'undefined_object',
                  HINT = 'Define it first with idempotency.define_state_machine().';
    END IF;
    -- the table's own trigger first: it checks the caller's rights and
    -- locks the table, which keeps new inheritance children away
    PERFORM idempotency.portable_enforce_on($1, $2, $3);
    FOR child IN SELECT g FROM idempotency.portable_guarded_tables($1) AS g LOOP
        IF child OPERATOR(pg_catalog.<>) $1 THEN
            PERFORM idempotency.portable_enforce_on(child, $2, $3);
        END IF;
    END LOOP;
END
$$;

-- portable: idempotency_drop_state_machine_enforcement
CREATE FUNCTION idempotency.drop_state_machine_enforcement(tbl regclass, state_column name)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    child regclass;
    attnum smallint;
BEGIN
    PERFORM idempotency.portable_arg_table($1);
    PERFORM idempotency.portable_arg_column($1, $2, 'state_column');
    FOR child IN SELECT g FROM idempotency.portable_guarded_tables($1) AS g LOOP
        attnum := idempotency.portable_column_attnum(child, $2);
        PERFORM idempotency.portable_drop_trigger(child, 'zz_idempotency_state_machine_' OPERATOR(pg_catalog.||) attnum);
        PERFORM idempotency.portable_drop_trigger(child, 'idempotency_state_machine_' OPERATOR(pg_catalog.||) attnum);
    END LOOP;
END
$$;
