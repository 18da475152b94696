-- sql/portable/fingerprint.sql: the portable bodies of src/fingerprint.c,
-- fingerprint(jsonb) and key_hash(text, text), bit for bit the C's.
--
-- Both hash text as the C does, in the bytes of the database's encoding:
-- convert_to() to the database's own encoding hands them on unchanged.
-- SHA-256 is PostgreSQL's own sha256() (11 and later; no pgcrypto).  The
-- canonical text of a jsonb value is its output, jsonb_out, which is what
-- the C hashes (JsonbToCString): keys sorted and de-duplicated, fixed
-- spacing, numbers as written (1 and 1.0 differ).
--
-- PL/pgSQL, for the errors of a NULL argument (22023); every name is
-- qualified, so no SET search_path is needed (nor wanted: it would cost
-- every call a configuration change).

-- portable: idempotency_fingerprint
CREATE FUNCTION idempotency.fingerprint(request jsonb)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF request IS NULL THEN
        RAISE EXCEPTION 'request must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN pg_catalog.sha256(pg_catalog.convert_to(request::pg_catalog.text,
                                                   pg_catalog.getdatabaseencoding()));
END
$$;

-- The first 16 bytes of SHA-256(length of the scope in bytes, 4 bytes
-- big-endian || scope || key); int4send() writes the length big-endian.
-- portable: idempotency_key_hash
CREATE FUNCTION idempotency.key_hash(scope text, key text)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    scope_bytes bytea;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'scope must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    scope_bytes := pg_catalog.convert_to(scope, pg_catalog.getdatabaseencoding());
    RETURN pg_catalog.encode(
               pg_catalog.substr(
                   pg_catalog.sha256(
                       pg_catalog.int4send(pg_catalog.length(scope_bytes))
                       OPERATOR(pg_catalog.||) scope_bytes
                       OPERATOR(pg_catalog.||) pg_catalog.convert_to(key, pg_catalog.getdatabaseencoding())),
                   1, 16),
               'hex')::pg_catalog.uuid;
END
$$;

-- The trigger that holds idempotency_keys.key_hash to key_hash(scope,
-- idempotency_key): fills it when absent (BEFORE INSERT), refuses a wrong
-- one with check_violation (on insert, and AFTER an update of the three
-- columns).  A row without scope or key is left to NOT NULL.
-- portable: idempotency_check_key_hash
CREATE FUNCTION idempotency.check_key_hash()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    hash uuid;
BEGIN
    -- the usual row, whose hash is right, in one test (1.9); a row
    -- without scope or key (the hash is then NULL) only when its
    -- key_hash is NULL too
    hash := idempotency.portable_key_hash(NEW.scope, NEW.idempotency_key);
    IF NEW.key_hash IS NOT DISTINCT FROM hash THEN
        RETURN NEW;
    END IF;
    IF NEW.scope IS NULL OR NEW.idempotency_key IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.key_hash IS NULL AND TG_WHEN OPERATOR(pg_catalog.=) 'BEFORE' THEN
        NEW.key_hash := hash;
    ELSIF NEW.key_hash OPERATOR(pg_catalog.<>) hash THEN
        RAISE EXCEPTION 'key_hash of idempotency key "%" in scope "%" is not key_hash(scope, idempotency_key)',
                        NEW.idempotency_key, NEW.scope
            USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME, COLUMN = 'key_hash';
    END IF;
    RETURN NEW;
END
$$;

-- portable helper: since 1.0, again in 1.4, 1.6, 1.7, 1.8, 1.9

-- key_hash() and fingerprint() for the bodies that run as the extension
-- owner, on arguments checked already: plain SQL that PostgreSQL inlines
-- into the caller's expression (1.9), where a call of key_hash() or
-- fingerprint(), PL/pgSQL for their errors on NULL, costs a call of its
-- own.  The same bytes: octet_length() counts the bytes of the
-- database's encoding, and convert_to() to that encoding hands the bytes
-- of the text on unchanged, so the scope's and the key's are those of
-- their concatenation.  (The scripts that state the bodies that call them
-- create them.)
CREATE FUNCTION idempotency.portable_key_hash(scope text, key text)
RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.encode(
           pg_catalog.substr(
               pg_catalog.sha256(
                   pg_catalog.int4send(pg_catalog.octet_length(scope))
                   OPERATOR(pg_catalog.||) pg_catalog.convert_to(scope OPERATOR(pg_catalog.||) key,
                                                                 pg_catalog.getdatabaseencoding())),
               1, 16),
           'hex')::pg_catalog.uuid
$$;
REVOKE ALL ON FUNCTION idempotency.portable_key_hash(text, text) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_key_hash(text, text) IS 'portable edition: key_hash() of a scope and key that are not NULL, inlined';

CREATE FUNCTION idempotency.portable_request_hash(request jsonb)
RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.sha256(pg_catalog.convert_to(request::pg_catalog.text, pg_catalog.getdatabaseencoding()))
$$;
REVOKE ALL ON FUNCTION idempotency.portable_request_hash(jsonb) FROM PUBLIC;
COMMENT ON FUNCTION idempotency.portable_request_hash(jsonb) IS 'portable edition: fingerprint() of a request that is not NULL, inlined';
