-- sql/portable/settings.sql: the readers of the settings (idempotency.*)
-- that the C library defines in src/idempotency.c.
--
-- A TLE or a plain script cannot define settings: a SET of idempotency.*
-- makes a placeholder that takes any text.  Every portable body reads a
-- setting through one of these readers, which accept what PostgreSQL's
-- GUC machinery accepts for the C's definition (parse_int: decimal, octal
-- after a 0, hexadecimal after 0x, a fraction or an exponent rounded half
-- to even, a time unit where the C has one; parse_bool; the C's check hook
-- of the interval settings) and refuse the rest with the C's SQLSTATE
-- (22023), message, detail and hint.  Unset or '' (a placeholder after
-- RESET) is the C's default.
--
-- Edition differences (doc/portable.md): the refusal comes at the first
-- call that reads the setting, where the C refuses the SET itself; '' is
-- the default, where the C refuses it for an integer; hexadecimal with a
-- fraction ('0x1.8'), which C's strtod reads, is refused.
--
-- Cost (1.9): a setting is read on the hot paths of every call, so the
-- readers that the bodies call there are plain SQL expressions, which
-- PostgreSQL inlines into the caller's expression: an unset setting costs
-- one current_setting(), and only a value that is set reaches the
-- PL/pgSQL that parses it.

-- portable helper: since 1.0, again in 1.6, 1.7, 1.8, 1.9

-- parse_int() of guc.c and the range check after it, on a value that is
-- set: the integer, or the C's 22023.  unit: NULL, or 'ms' for a setting
-- in milliseconds (GUC_UNIT_MS), which takes us, ms, s, min, h or d.
CREATE FUNCTION idempotency.portable_setting_parse_int(setting text, value text, min_value integer,
                                                       max_value integer, unit text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    head text[];
    number text;
    digits text;
    base integer;
    result float8;
    units text[];
    multiplier float8;
    next_smaller float8;
    hint text;
BEGIN
    -- strtol(value, &end, 0)
    head := pg_catalog.regexp_match(value, '^([[:space:]]*([+-]?))(0[xX][0-9a-fA-F]+|[1-9][0-9]*|0[0-7]*)');
    IF head IS NULL AND pg_catalog.left(value, 1) OPERATOR(pg_catalog.=) '.'
       OR head IS NOT NULL
          AND pg_catalog.substr(value, pg_catalog.length(head[1] OPERATOR(pg_catalog.||) head[3])
                                       OPERATOR(pg_catalog.+) 1, 1)
              OPERATOR(pg_catalog.=) ANY ('{., e, E}'::pg_catalog.text[]) THEN
        -- strtod(value, &end) where strtol stops at a point or an exponent
        number := (pg_catalog.regexp_match(value,
            '^([[:space:]]*[+-]?(?:[0-9]+[.]?[0-9]*|[.][0-9]+)(?:[eE][+-]?[0-9]+)?)'))[1];
        BEGIN
            result := number::pg_catalog.float8;
        EXCEPTION WHEN numeric_value_out_of_range THEN
            number := NULL;             -- strtod's ERANGE: no hint
        END;
    ELSIF head IS NOT NULL THEN
        number := head[1] OPERATOR(pg_catalog.||) head[3];
        base := CASE WHEN head[3] OPERATOR(pg_catalog.~) '^0[xX]' THEN 16
                     WHEN pg_catalog.left(head[3], 1) OPERATOR(pg_catalog.=) '0' THEN 8 ELSE 10 END;
        digits := pg_catalog.ltrim(CASE WHEN base OPERATOR(pg_catalog.=) 16
                                        THEN pg_catalog.substr(head[3], 3) ELSE head[3] END, '0');
        IF pg_catalog.length(digits) OPERATOR(pg_catalog.>) 16 THEN
            result := 'Infinity';       -- beyond any integer: only the hint tells
        ELSE
            result := 0;
            FOR i IN 1 .. pg_catalog.length(digits) LOOP
                result := result OPERATOR(pg_catalog.*) base OPERATOR(pg_catalog.+)
                          (pg_catalog.strpos('0123456789abcdef',
                                             pg_catalog.lower(pg_catalog.substr(digits, i, 1)))
                           OPERATOR(pg_catalog.-) 1);
            END LOOP;
        END IF;
        IF head[2] OPERATOR(pg_catalog.=) '-' THEN
            result := OPERATOR(pg_catalog.-) result;
        END IF;
    END IF;
    IF number IS NOT NULL THEN
        value := pg_catalog.substr(value, pg_catalog.length(number) OPERATOR(pg_catalog.+) 1);
        IF value OPERATOR(pg_catalog.!~) '^[[:space:]]*$' THEN
            -- a unit: convert_to_base_unit()
            units := pg_catalog.regexp_match(value, '^[[:space:]]*(us|ms|s|min|h|d)[[:space:]]*$');
            IF unit IS NULL THEN
                number := NULL;
            ELSIF units IS NULL THEN
                number := NULL;
                hint := 'Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".';
            ELSE
                SELECT m, n INTO multiplier, next_smaller
                  FROM (VALUES ('d', 86400000, 3600000), ('h', 3600000, 60000), ('min', 60000, 1000),
                               ('s', 1000, 1), ('ms', 1, 0.001), ('us', 0.001, NULL))
                       AS t(u, m, n)
                 WHERE t.u OPERATOR(pg_catalog.=) units[1];
                result := result OPERATOR(pg_catalog.*) multiplier;
                IF next_smaller IS NOT NULL THEN
                    result := pg_catalog.round(result OPERATOR(pg_catalog./) next_smaller)
                              OPERATOR(pg_catalog.*) next_smaller;
                END IF;
            END IF;
        END IF;
    END IF;
    result := pg_catalog.round(result);         -- rint(): half to even
    IF number IS NOT NULL AND (result OPERATOR(pg_catalog.>) 2147483647
                               OR result OPERATOR(pg_catalog.<) -2147483648) THEN
        number := NULL;
        hint := 'Value exceeds integer range.';
    END IF;
    IF number IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting,
                        pg_catalog.current_setting(setting, true)
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF number IS NULL THEN
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting,
                        pg_catalog.current_setting(setting, true)
            USING ERRCODE = 'invalid_parameter_value', HINT = hint;
    END IF;
    IF result OPERATOR(pg_catalog.<) min_value OR result OPERATOR(pg_catalog.>) max_value THEN
        -- the bounds carry the unit too from PostgreSQL 16 on
        unit := COALESCE(' ' OPERATOR(pg_catalog.||) unit, '');
        RAISE EXCEPTION '%', pg_catalog.format('%s%s is outside the valid range for parameter "%s" (%s%s .. %s%s)',
                                               result::pg_catalog.int4, unit, setting, min_value,
                                               CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4
                                                         OPERATOR(pg_catalog.>=) 160000 THEN unit ELSE '' END,
                                               max_value,
                                               CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4
                                                         OPERATOR(pg_catalog.>=) 160000 THEN unit ELSE '' END)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN result::pg_catalog.int4;
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_setting_parse_int(text, text, integer, integer, text) FROM PUBLIC;

-- An integer setting, or its default when unset.  Inlined into the
-- caller: a plain decimal within the bounds is read here, anything else
-- by portable_setting_parse_int().
CREATE FUNCTION idempotency.portable_setting_int(setting text, default_value integer,
                                                 min_value integer, max_value integer)
RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
       WHEN COALESCE(pg_catalog.current_setting(setting, true), '') OPERATOR(pg_catalog.=) '' THEN default_value
       WHEN pg_catalog.current_setting(setting, true) OPERATOR(pg_catalog.~) '^[1-9][0-9]{0,8}$' THEN
           CASE WHEN pg_catalog.current_setting(setting, true)::pg_catalog.int4
                     OPERATOR(pg_catalog.>=) min_value
                 AND pg_catalog.current_setting(setting, true)::pg_catalog.int4
                     OPERATOR(pg_catalog.<=) max_value
                THEN pg_catalog.current_setting(setting, true)::pg_catalog.int4
                ELSE idempotency.portable_setting_parse_int(setting, pg_catalog.current_setting(setting, true),
                                                            min_value, max_value, NULL) END
       ELSE idempotency.portable_setting_parse_int(setting, pg_catalog.current_setting(setting, true),
                                                   min_value, max_value, NULL) END
$$;

-- A value "value" of setting "setting" in milliseconds (GUC_UNIT_MS in
-- the C), or the default when it is unset or '': for a value that is no
-- session setting, such as the database's that portable_outbox_notify()
-- reads from pg_db_role_setting.
CREATE FUNCTION idempotency.portable_ms_value(setting text, value text, default_value integer,
                                             min_value integer, max_value integer)
RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
       WHEN COALESCE(value, '') OPERATOR(pg_catalog.=) '' THEN default_value
       ELSE idempotency.portable_setting_parse_int(setting, value, min_value, max_value, 'ms') END
$$;

-- An integer setting in milliseconds (GUC_UNIT_MS in the C), or its
-- default when unset.
CREATE FUNCTION idempotency.portable_setting_ms(setting text, default_value integer,
                                               min_value integer, max_value integer)
RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
       WHEN COALESCE(pg_catalog.current_setting(setting, true), '') OPERATOR(pg_catalog.=) '' THEN default_value
       ELSE idempotency.portable_setting_parse_int(setting, pg_catalog.current_setting(setting, true),
                                                   min_value, max_value, 'ms') END
$$;

-- parse_bool() of PostgreSQL on a value that is set: a prefix of true,
-- false, yes or no, on, off (of), 1 or 0, in any case, without the
-- surrounding spaces that a cast to boolean would skip.
CREATE FUNCTION idempotency.portable_setting_parse_bool(setting text, value text)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF value OPERATOR(pg_catalog.~*) '^(t|tr|tru|true|y|ye|yes|on|1)$' THEN
        RETURN true;
    ELSIF value OPERATOR(pg_catalog.~*) '^(f|fa|fal|fals|false|n|no|of|off|0)$' THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 'parameter "%" requires a Boolean value', setting
        USING ERRCODE = 'invalid_parameter_value';
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_setting_parse_bool(text, text) FROM PUBLIC;

-- A boolean setting, or its default when unset.  Inlined, as
-- portable_setting_int().
CREATE FUNCTION idempotency.portable_setting_bool(setting text, default_value boolean)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
       WHEN COALESCE(pg_catalog.current_setting(setting, true), '') OPERATOR(pg_catalog.=) '' THEN default_value
       WHEN pg_catalog.current_setting(setting, true) OPERATOR(pg_catalog.=) 'on' THEN true
       WHEN pg_catalog.current_setting(setting, true) OPERATOR(pg_catalog.=) 'off' THEN false
       ELSE idempotency.portable_setting_parse_bool(setting, pg_catalog.current_setting(setting, true)) END
$$;

-- An interval setting's value "configured" (set, not ''): what the C's
-- check hook (check_interval_setting) accepts, a positive interval of at
-- most 100 years (months of 30 days and days of 24 hours, as interval
-- comparison counts them), or its error with its details.  The usual
-- spellings ('30 seconds', '24 hours', '5min', '00:00:30') are intervals
-- for certain and are cast without the subtransaction that catches a
-- cast's error.
CREATE FUNCTION idempotency.portable_interval_value(setting text, configured text)
RETURNS interval
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    value interval;
    detail text;
BEGIN
    IF configured OPERATOR(pg_catalog.~*)
       '^[0-9]{1,9} ?(us|ms|s|secs?|seconds?|min|mins|minutes?|h|hours?|d|days?)$|^[0-9]{1,6}:[0-5][0-9](:[0-5][0-9])?$' THEN
        value := configured::pg_catalog.interval;
    ELSE
        BEGIN
            value := configured::pg_catalog.interval;
        EXCEPTION WHEN data_exception THEN
            value := NULL;
        END;
    END IF;
    -- 'infinity' (PostgreSQL 17) is no span to the C's decoder
    IF value IS NULL OR NOT pg_catalog.isfinite(value) THEN
        detail := 'The value must be an interval, such as "30 seconds" or "24 hours".';
    ELSIF value OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        detail := 'The interval must be positive.';
    ELSIF value OPERATOR(pg_catalog.>) '1200 mons'::pg_catalog.interval THEN
        detail := 'The interval must be at most 100 years.';
    ELSE
        RETURN value;
    END IF;
    RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting, configured
        USING ERRCODE = 'invalid_parameter_value', DETAIL = detail;
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_interval_value(text, text) FROM PUBLIC;

-- An interval setting, or its default when unset or '' (inlined).
CREATE FUNCTION idempotency.portable_setting_interval(setting text, default_value interval)
RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
       WHEN COALESCE(pg_catalog.current_setting(setting, true), '') OPERATOR(pg_catalog.=) '' THEN default_value
       ELSE idempotency.portable_interval_value(setting, pg_catalog.current_setting(setting, true)) END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_setting_interval(text, interval) FROM PUBLIC;

-- The error of an interval argument that portable_arg_interval() refuses.
CREATE FUNCTION idempotency.portable_arg_interval_refused(value interval, argname text)
RETURNS interval
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION '% must not be null', argname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF value OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION '% must be positive', argname
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The %s given is %s.', argname, value);
    END IF;
    RAISE EXCEPTION '% must be at most 100 years', argname
        USING ERRCODE = 'invalid_parameter_value';
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_arg_interval_refused(interval, text) FROM PUBLIC;

-- An interval argument (idem_arg_interval): NULL means the setting, or its
-- default when unset; the value must be positive and at most 100 years.
-- Inlined: a value within the bounds, or an unset setting, is one
-- expression of the caller's.
CREATE FUNCTION idempotency.portable_arg_interval(value interval, argname text,
                                                  setting text, default_value interval)
RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
       WHEN value IS NULL AND setting IS NOT NULL
       THEN idempotency.portable_setting_interval(setting, default_value)
       WHEN value OPERATOR(pg_catalog.>) '0'::pg_catalog.interval
        AND value OPERATOR(pg_catalog.<=) '1200 mons'::pg_catalog.interval THEN value
       ELSE idempotency.portable_arg_interval_refused(value, argname) END
$$;

-- The value of a setting that an operator stored for this database
-- (pg_db_role_setting): for role "role_name", ALTER ROLE ... IN DATABASE
-- ... SET, else ALTER ROLE ... SET; then ALTER DATABASE ... SET, else
-- ALTER ROLE ALL ... SET, in the order in which PostgreSQL applies them
-- at the start of a session; NULL when none.  role_name NULL: the
-- database's only.  For the settings that the C defines PGC_SUSET, which a
-- placeholder cannot be: only superusers (and roles granted SET on them)
-- may store a placeholder there, where any session may SET it.  The one
-- reader of the catalog for them all.
CREATE FUNCTION idempotency.portable_stored_setting(setting text, role_name name)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN (SELECT pg_catalog.substr(c.item, pg_catalog.length(setting) OPERATOR(pg_catalog.+) 2)
              FROM pg_catalog.pg_db_role_setting d,
                   LATERAL pg_catalog.unnest(d.setconfig) AS c(item)
             WHERE d.setrole OPERATOR(pg_catalog.=) ANY (ARRAY[0::pg_catalog.oid,
                       (SELECT r.oid FROM pg_catalog.pg_roles r
                         WHERE r.rolname OPERATOR(pg_catalog.=) role_name)])
               AND d.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0::pg_catalog.oid,
                       (SELECT b.oid FROM pg_catalog.pg_database b
                         WHERE b.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())])
               AND pg_catalog.starts_with(c.item, setting OPERATOR(pg_catalog.||) '=')
             ORDER BY d.setrole OPERATOR(pg_catalog.<>) 0::pg_catalog.oid DESC,
                      d.setdatabase OPERATOR(pg_catalog.<>) 0::pg_catalog.oid DESC
             LIMIT 1);
END
$$;
REVOKE ALL ON FUNCTION idempotency.portable_stored_setting(text, name) FROM PUBLIC;

COMMENT ON FUNCTION idempotency.portable_setting_parse_int(text, text, integer, integer, text) IS 'portable edition: an integer setting''s value read as PostgreSQL reads it, or the C''s error';
COMMENT ON FUNCTION idempotency.portable_setting_int(text, integer, integer, integer) IS 'portable edition: an integer setting of the C library, or its default';
COMMENT ON FUNCTION idempotency.portable_ms_value(text, text, integer, integer, integer) IS 'portable edition: a value of a setting in milliseconds of the C library, or its default';
COMMENT ON FUNCTION idempotency.portable_setting_ms(text, integer, integer, integer) IS 'portable edition: a setting in milliseconds of the C library, or its default';
COMMENT ON FUNCTION idempotency.portable_setting_parse_bool(text, text) IS 'portable edition: a boolean setting''s value read as PostgreSQL reads it, or the C''s error';
COMMENT ON FUNCTION idempotency.portable_setting_bool(text, boolean) IS 'portable edition: a boolean setting of the C library, or its default';
COMMENT ON FUNCTION idempotency.portable_interval_value(text, text) IS 'portable edition: an interval setting''s value as the C library checks it, or the C''s error';
COMMENT ON FUNCTION idempotency.portable_setting_interval(text, interval) IS 'portable edition: an interval setting of the C library, or its default';
COMMENT ON FUNCTION idempotency.portable_arg_interval_refused(interval, text) IS 'portable edition: the error of an interval argument out of bounds';
COMMENT ON FUNCTION idempotency.portable_arg_interval(interval, text, text, interval) IS 'portable edition: an interval argument, its default from a setting';
COMMENT ON FUNCTION idempotency.portable_stored_setting(text, name) IS 'portable edition: a setting stored for the database or a role (pg_db_role_setting)';
