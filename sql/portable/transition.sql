-- sql/portable/transition.sql: the portable body of src/transition.c,
-- transition(), the guarded state update.
--
-- As in the C it runs, with the caller's rights,
--
--   UPDATE tbl AS t SET state = $3::type [, col = s.col ...]
--   [FROM pg_catalog.jsonb_to_record($4) AS s(col type, ...)]
--   WHERE t.key OPERATOR(eq) $1::keytype AND t.state OPERATOR(eq) $2::type
--
-- and only when that hits no row reads the row's state to tell "already"
-- from "rejected" and "not_found", trying the UPDATE again (at most 100
-- times) when the read finds the row in from_state after all.  The key is
-- compared with the default equality operator of the key column's type
-- (that of its default B-tree operator class), schema-qualified.
--
-- Edition difference (doc/portable.md): the statements are built and
-- planned at each call (EXECUTE), where the C prepares them once per table,
-- columns and role.

-- portable: idempotency_transition
CREATE FUNCTION idempotency.transition(
    tbl          regclass,
    key_column   name,
    key          text,
    state_column name,
    from_state   text,
    to_state     text,
    set_columns  jsonb DEFAULT NULL)
RETURNS idempotency.transition_result
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    state_attnum smallint;
    set_name text;
    set_attnum smallint;
    sets text;
    record_def text;
    key_type oid;
    state_type oid;
    key_eq text;
    relname name;
    column_name name;
    column_type oid;
    typid oid;
    base oid;
    result text;
    state_eq text;
    update_sql text;
    read_sql text;
    rows bigint;
    attempt integer;
    r record;
    current_state text;
    in_from boolean;
    in_to boolean;
BEGIN
    -- The types of both columns, in one statement whose scans return one
    -- column each (1.9: three statements before, and a join would scan
    -- the catalog's whole rows); any argument amiss is told below, in the
    -- C's order.  (Inline, not through the helpers: the caller may not
    -- execute them.)
    SELECT (SELECT a.atttypid FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attname OPERATOR(pg_catalog.=) $2
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped),
           (SELECT a.atttypid FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attname OPERATOR(pg_catalog.=) $4
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped)
      INTO key_type, state_type;
    IF key_type IS NULL OR state_type IS NULL OR $3 IS NULL OR $5 IS NULL OR $6 IS NULL THEN
        IF $1 IS NULL THEN
            RAISE EXCEPTION 'tbl must not be null' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        relname := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1);
        IF relname IS NULL THEN
            RAISE EXCEPTION 'relation with OID % does not exist', $1::pg_catalog.oid
                USING ERRCODE = 'undefined_table';
        END IF;
        FOR i IN 1 .. 2 LOOP
            column_name := CASE i WHEN 1 THEN $2 ELSE $4 END;
            IF column_name IS NULL THEN
                RAISE EXCEPTION '% must not be null', CASE i WHEN 1 THEN 'key_column' ELSE 'state_column' END
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF (CASE i WHEN 1 THEN key_type ELSE state_type END) IS NULL THEN
                RAISE EXCEPTION 'column "%" of relation "%" does not exist', column_name, relname
                    USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
        IF $3 IS NULL THEN
            RAISE EXCEPTION 'key must not be null' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF $5 IS NULL THEN
            RAISE EXCEPTION 'from_state must not be null' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RAISE EXCEPTION 'to_state must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF $7 IS NOT NULL THEN
        IF pg_catalog.jsonb_typeof($7) OPERATOR(pg_catalog.<>) 'object' THEN
            RAISE EXCEPTION 'set_columns must be a JSON object'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Its keys are column names and its values their new values, as in {"paid_at": "2024-01-01T00:00:00Z"}.';
        END IF;
        relname := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1);
        state_attnum := (SELECT a.attnum FROM pg_catalog.pg_attribute a
                          WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attname OPERATOR(pg_catalog.=) $4);
        FOR set_name IN SELECT k FROM pg_catalog.jsonb_object_keys($7) AS k LOOP
            SELECT a.attnum INTO set_attnum FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attname OPERATOR(pg_catalog.=) set_name
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'column "%" of relation "%" does not exist', set_name, relname
                    USING ERRCODE = 'undefined_column';
            END IF;
            IF set_attnum OPERATOR(pg_catalog.=) state_attnum THEN
                RAISE EXCEPTION 'set_columns must not set the state column'
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'The state column is set to to_state.';
            END IF;
        END LOOP;
        -- the columns in attnum order, with their types and typmods
        SELECT pg_catalog.string_agg(pg_catalog.format(', %1$I = s.%1$I', a.attname), '' ORDER BY a.attnum),
               pg_catalog.string_agg(pg_catalog.format('%I %s', a.attname,
                                                       pg_catalog.format_type(a.atttypid, a.atttypmod)),
                                     ', ' ORDER BY a.attnum)
          INTO sets, record_def
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0
           AND NOT a.attisdropped
           AND a.attname OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT pg_catalog.jsonb_object_keys($7)));
    END IF;

    -- the equality operators: of the default B-tree operator class of the
    -- type (or its base type), as lookup_type_cache() finds it: the class
    -- of the type itself, else of a type it is binary coercible to, else
    -- of the polymorphic type it belongs to.  The built-in types that keys
    -- and states usually have, none of them a domain, are known without
    -- reading the catalog (1.9: the query costs more than the rest of the
    -- call): their class's operator is pg_catalog.=, which the query finds
    -- for each of them (test/sql/transition_types.sql), and which key_eq
    -- and state_eq left NULL stand for.
    IF NOT ARRAY[key_type, state_type] OPERATOR(pg_catalog.<@) ARRAY[
           'pg_catalog.int2'::pg_catalog.regtype, 'pg_catalog.int4'::pg_catalog.regtype,
           'pg_catalog.int8'::pg_catalog.regtype, 'pg_catalog.numeric'::pg_catalog.regtype,
           'pg_catalog.text'::pg_catalog.regtype, 'pg_catalog.varchar'::pg_catalog.regtype,
           'pg_catalog.bpchar'::pg_catalog.regtype, 'pg_catalog.name'::pg_catalog.regtype,
           'pg_catalog."char"'::pg_catalog.regtype, 'pg_catalog.uuid'::pg_catalog.regtype,
           'pg_catalog.bool'::pg_catalog.regtype, 'pg_catalog.oid'::pg_catalog.regtype,
           'pg_catalog.bytea'::pg_catalog.regtype, 'pg_catalog.date'::pg_catalog.regtype,
           'pg_catalog.timestamp'::pg_catalog.regtype, 'pg_catalog.timestamptz'::pg_catalog.regtype]::pg_catalog.oid[] THEN
        FOR i IN 1 .. 2 LOOP
            typid := CASE i WHEN 1 THEN key_type ELSE state_type END;
            base := typid;
            WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid OPERATOR(pg_catalog.=) base)
                  OPERATOR(pg_catalog.=) 'd' LOOP
                base := (SELECT t.typbasetype FROM pg_catalog.pg_type t WHERE t.oid OPERATOR(pg_catalog.=) base);
            END LOOP;
            result := NULL;
            SELECT pg_catalog.format('OPERATOR(%I.%s)', n.nspname, o.oprname) INTO result
              FROM pg_catalog.pg_type ty
              JOIN pg_catalog.pg_opclass c ON c.opcdefault
              JOIN pg_catalog.pg_am a ON a.oid OPERATOR(pg_catalog.=) c.opcmethod
                                      AND a.amname OPERATOR(pg_catalog.=) 'btree'
              JOIN pg_catalog.pg_amop ao ON ao.amopfamily OPERATOR(pg_catalog.=) c.opcfamily
                                         AND ao.amoplefttype OPERATOR(pg_catalog.=) c.opcintype
                                         AND ao.amoprighttype OPERATOR(pg_catalog.=) c.opcintype
                                         AND ao.amopstrategy OPERATOR(pg_catalog.=) 3
              JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) ao.amopopr
              JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace
             WHERE ty.oid OPERATOR(pg_catalog.=) base
               AND (c.opcintype OPERATOR(pg_catalog.=) base
                    OR EXISTS (SELECT FROM pg_catalog.pg_cast k
                                WHERE k.castsource OPERATOR(pg_catalog.=) base
                                  AND k.casttarget OPERATOR(pg_catalog.=) c.opcintype
                                  AND k.castmethod OPERATOR(pg_catalog.=) 'b')
                    OR (ty.typtype OPERATOR(pg_catalog.=) 'e'
                        AND c.opcintype OPERATOR(pg_catalog.=) 'pg_catalog.anyenum'::pg_catalog.regtype)
                    OR (ty.typcategory OPERATOR(pg_catalog.=) 'A' AND ty.typelem OPERATOR(pg_catalog.<>) 0
                        AND c.opcintype OPERATOR(pg_catalog.=) 'pg_catalog.anyarray'::pg_catalog.regtype)
                    OR (ty.typtype OPERATOR(pg_catalog.=) 'r'
                        AND c.opcintype OPERATOR(pg_catalog.=) 'pg_catalog.anyrange'::pg_catalog.regtype)
                    OR (ty.typtype OPERATOR(pg_catalog.=) 'c'
                        AND c.opcintype OPERATOR(pg_catalog.=) 'pg_catalog.record'::pg_catalog.regtype))
             ORDER BY c.opcintype OPERATOR(pg_catalog.<>) base
             LIMIT 1;
            IF result IS NULL THEN
                RAISE EXCEPTION 'could not identify an equality operator for type %',
                                pg_catalog.format_type(typid, NULL)
                    USING ERRCODE = 'undefined_function';
            END IF;
            IF i OPERATOR(pg_catalog.=) 1 THEN
                key_eq := result;
            ELSE
                state_eq := result;
            END IF;
        END LOOP;
    END IF;
    -- one expression (each costs its set-up at every transaction)
    update_sql := pg_catalog.format('UPDATE %1$s AS t SET %2$I = $3::%3$s%4$s%5$s WHERE t.%6$I %7$s $1::%8$s AND t.%2$I %9$s $2::%3$s',
                                    $1, $4, pg_catalog.format_type(state_type, -1), sets,
                                    ' FROM pg_catalog.jsonb_to_record($4) AS s(' OPERATOR(pg_catalog.||)
                                    NULLIF(record_def, '') OPERATOR(pg_catalog.||) ')',
                                    $2, COALESCE(key_eq, 'OPERATOR(pg_catalog.=)'),
                                    pg_catalog.format_type(key_type, -1), COALESCE(state_eq, 'OPERATOR(pg_catalog.=)'));

    LOOP
        -- from_state = to_state moves nothing: only read the row
        IF $5 COLLATE "C" OPERATOR(pg_catalog.<>) $6 THEN
            EXECUTE update_sql USING $3, $5, $6, $7;
            GET DIAGNOSTICS rows = ROW_COUNT;
            IF rows OPERATOR(pg_catalog.=) 1 THEN
                RETURN ROW('applied', $6)::idempotency.transition_result;
            END IF;
            IF rows OPERATOR(pg_catalog.>) 1 THEN
                RAISE EXCEPTION 'key of transition() matches more than one row of "%"',
                                (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1)
                    USING ERRCODE = 'cardinality_violation',
                          HINT = pg_catalog.format('Give a key column that is unique, such as the primary key ("%s" is not).', $2);
            END IF;
        END IF;

        -- (built once, when first needed)
        read_sql := COALESCE(read_sql,
            pg_catalog.format('SELECT t.%1$I::pg_catalog.text AS state, t.%1$I %2$s $2::%3$s AS in_from,'
                              ' t.%1$I %2$s $3::%3$s AS in_to'
                              ' FROM %4$s AS t WHERE t.%5$I %6$s $1::%7$s LIMIT 2',
                              $4, COALESCE(state_eq, 'OPERATOR(pg_catalog.=)'),
                              pg_catalog.format_type(state_type, -1), $1,
                              $2, COALESCE(key_eq, 'OPERATOR(pg_catalog.=)'),
                              pg_catalog.format_type(key_type, -1)));
        rows := 0;
        FOR r IN EXECUTE read_sql USING $3, $5, $6 LOOP
            rows := rows OPERATOR(pg_catalog.+) 1;
            IF rows OPERATOR(pg_catalog.=) 1 THEN
                current_state := r.state;
                in_from := COALESCE(r.in_from, false);
                in_to := COALESCE(r.in_to, false);
            END IF;
        END LOOP;
        IF rows OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'key of transition() matches more than one row of "%"',
                            (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1)
                USING ERRCODE = 'cardinality_violation',
                      HINT = pg_catalog.format('Give a key column that is unique, such as the primary key ("%s" is not).', $2);
        END IF;
        IF rows OPERATOR(pg_catalog.=) 0 THEN
            RETURN ROW('not_found', NULL)::idempotency.transition_result;
        END IF;
        IF in_to THEN
            RETURN ROW('already', current_state)::idempotency.transition_result;
        END IF;
        -- in from_state after all: a concurrent commit came in between
        IF NOT in_from THEN
            RETURN ROW('rejected', current_state)::idempotency.transition_result;
        END IF;
        attempt := COALESCE(attempt, 0) OPERATOR(pg_catalog.+) 1;
        IF attempt OPERATOR(pg_catalog.>) 100 THEN
            RAISE EXCEPTION 'could not apply transition() due to concurrent updates'
                USING ERRCODE = 'serialization_failure';
        END IF;
    END LOOP;
END
$$;
