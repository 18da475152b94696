-- sql/portable/locks.sql: the portable bodies of src/locks.c, lock_key()
-- and try_lock().
--
-- lock_key() is the first 8 bytes of SHA-256 of the key's UTF-8 bytes,
-- read as a big-endian signed bigint, as in the C: a database of another
-- encoding converts the key to UTF-8 first, except SQL_ASCII, whose bytes
-- are hashed as stored (convert_to() to UTF-8 would check that they are
-- UTF-8; converting to SQL_ASCII, its own encoding, hands them on as they
-- are).  Keys of 1 to 255 characters, as in the C.

-- portable: idempotency_lock_key
CREATE FUNCTION idempotency.lock_key(key text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    nchars integer;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    nchars := pg_catalog.char_length(key);
    IF nchars OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'key must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF nchars OPERATOR(pg_catalog.>) 255 THEN
        RAISE EXCEPTION 'key is too long'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('It has %s characters; at most 255 are allowed.', nchars);
    END IF;
    RETURN ('x' OPERATOR(pg_catalog.||)
            pg_catalog.left(pg_catalog.encode(
                pg_catalog.sha256(pg_catalog.convert_to(key,
                    CASE WHEN pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.=) 'SQL_ASCII'
                         THEN 'SQL_ASCII' ELSE 'UTF8' END)),
                'hex'), 16))::pg_catalog.bit(64)::pg_catalog.int8;
END
$$;

-- pg_try_advisory_xact_lock(lock_key(key)): the key's checks and errors are
-- lock_key's.
-- portable: idempotency_try_lock
CREATE FUNCTION idempotency.try_lock(key text)
RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
SELECT pg_catalog.pg_try_advisory_xact_lock(idempotency.lock_key(key))
$$;
