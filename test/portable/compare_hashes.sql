-- test/portable/compare_hashes.sql: the portable fingerprint(), key_hash(),
-- lock_key() and try_lock() (sql/portable/fingerprint.sql, locks.sql), and
-- the inlined key_hash and fingerprint of the hot paths (portable_key_hash,
-- portable_request_hash)
-- against the C edition's, in one database where the C edition is
-- installed: the same bits for every input, the same errors for bad ones.
--
-- The portable functions are created in schema idempotency_portable from
-- the file named by the psql variable "scratch", which
--   python3 scripts/portable.py scratch --schema idempotency_portable fingerprint locks
-- writes; test/portable/compare_hashes.sh does all of it, in a UTF8, a
-- LATIN1 and a SQL_ASCII database.  Not part of make test yet
-- (doc/portable.md).
--
-- The script uses no literal outside Latin-1, so that it runs in a LATIN1
-- database too; characters beyond come from chr() where the database's
-- encoding has them.  It ends with an error when anything differs.
\set ON_ERROR_STOP on
\if :{?scratch}
\else
\echo 'give the portable functions: psql -v scratch=FILE (see test/portable/compare_hashes.sh)'
\quit
\endif
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS idempotency_portable CASCADE;
CREATE SCHEMA idempotency_portable;
\i :scratch
RESET client_min_messages;

SELECT pg_catalog.getdatabaseencoding() AS encoding;

-- Characters the database can hold, by code point: Latin-1 everywhere
-- (in SQL_ASCII the bytes 128 to 255, which are not UTF-8); Cyrillic, CJK,
-- combining marks, emoji and the last code point in UTF8; and in
-- SQL_ASCII the UTF-8 bytes of Cyrillic and an emoji (code 0 here).
CREATE TEMP TABLE chars AS
SELECT pg_catalog.chr(c) AS ch, c
  FROM pg_catalog.unnest(ARRAY[65, 97, 32, 9, 10, 34, 39, 92, 47, 1, 127, 160, 233, 255]
                         || CASE WHEN pg_catalog.getdatabaseencoding() = 'UTF8'
                                 THEN ARRAY[256, 769, 1082, 1083, 1102, 1095, 8364, 12354, 19990,
                                            65279, 65533, 128274, 128512, 1114111]
                                 ELSE ARRAY[]::int[] END) AS c
UNION ALL
SELECT pg_catalog.convert_from('\xd0bad0bbd18ed187f09f9492'::bytea, 'SQL_ASCII'), 0
 WHERE pg_catalog.getdatabaseencoding() = 'SQL_ASCII';

-- Strings: the empty one, one of each character, runs of each, mixed
-- strings, and every length from 0 to 300 bytes of ASCII and of the
-- widest character (SHA-256 pads at 55/56 and 64 bytes; the C's stack
-- buffer for key_hash is 1024 bytes), and 200 pseudo-random ones.
CREATE TEMP TABLE strings AS
SELECT DISTINCT s FROM (
    SELECT '' AS s
    UNION ALL SELECT ch FROM chars
    UNION ALL SELECT pg_catalog.repeat(ch, n) FROM chars, pg_catalog.generate_series(2, 70, 17) n
    UNION ALL SELECT pg_catalog.string_agg(ch, '' ORDER BY c) FROM chars
    UNION ALL SELECT pg_catalog.string_agg(ch, '' ORDER BY c DESC) FROM chars
    UNION ALL SELECT pg_catalog.repeat('k', n) FROM pg_catalog.generate_series(0, 300) n
    UNION ALL SELECT pg_catalog.repeat((SELECT ch FROM chars ORDER BY pg_catalog.octet_length(ch) DESC, c LIMIT 1), n)
                FROM pg_catalog.generate_series(1, 80) n
    UNION ALL SELECT pg_catalog.repeat('x', n) FROM pg_catalog.generate_series(1010, 1040) n
    UNION ALL SELECT pg_catalog.repeat('long key ', 20000)
    UNION ALL SELECT 'order-' || i FROM pg_catalog.generate_series(1, 50) i
    UNION ALL SELECT pg_catalog.md5(i::text) || COALESCE((SELECT pg_catalog.string_agg(ch, '') FROM chars WHERE c % 7 = i % 7), '')
                FROM pg_catalog.generate_series(1, 200) i
) t;

-- key_hash of scopes and keys, among them the pairs that concatenate to
-- the same bytes ('a', 'bc') and ('ab', 'c'), where only the length differs
CREATE TEMP TABLE pairs AS
SELECT sc.s AS scope, k.s AS key
  FROM (SELECT s FROM strings ORDER BY pg_catalog.octet_length(s), s LIMIT 40) sc,
       strings k
UNION ALL SELECT 'a', 'bc'
UNION ALL SELECT 'ab', 'c'
UNION ALL SELECT s, '' FROM strings
UNION ALL SELECT s, s FROM strings;

SELECT pg_catalog.count(*) AS pairs,
       pg_catalog.count(*) FILTER (WHERE idempotency.key_hash(scope, key)
                                   IS DISTINCT FROM idempotency_portable.key_hash(scope, key)) AS differ
  FROM pairs;
SELECT idempotency_portable.key_hash('a', 'bc') <> idempotency_portable.key_hash('ab', 'c') AS length_counts;
-- and the inlined key_hash of the hot paths (portable_key_hash), which
-- hashes the concatenation of scope and key after the scope's length
SELECT pg_catalog.count(*) FILTER (WHERE idempotency.key_hash(scope, key)
                                   IS DISTINCT FROM idempotency_portable.portable_key_hash(scope, key)) AS inlined_differ
  FROM pairs;

-- lock_key of every string of 1 to 255 characters
SELECT pg_catalog.count(*) AS keys,
       pg_catalog.count(*) FILTER (WHERE idempotency.lock_key(s)
                                   IS DISTINCT FROM idempotency_portable.lock_key(s)) AS differ,
       pg_catalog.count(*) FILTER (WHERE pg_catalog.octet_length(s) > 255) AS longer_than_255_bytes
  FROM strings
 WHERE pg_catalog.char_length(s) BETWEEN 1 AND 255;
-- lock_key is the formula of doc/reference.md, which hashes the key's
-- UTF-8 bytes, in every encoding but SQL_ASCII (the bytes as stored,
-- which need not be UTF-8 there)
SELECT pg_catalog.getdatabaseencoding() AS encoding,
       pg_catalog.count(*) FILTER (WHERE pg_catalog.getdatabaseencoding() <> 'SQL_ASCII'
           AND idempotency_portable.lock_key(s) <>
               ('x' || left(encode(sha256(convert_to(s, 'UTF8')), 'hex'), 16))::bit(64)::bigint)
       AS differ_from_utf8_formula,
       pg_catalog.count(*) FILTER (WHERE s !~ '^[\x01-\x7f]*$') AS beyond_ascii
  FROM strings
 WHERE pg_catalog.char_length(s) BETWEEN 1 AND 255;

-- Request bodies: numbers of every form (1, 1.0, 1.00, exponents, -0,
-- huge), key order, whitespace, duplicate keys, nesting, escapes, every
-- string above as a value and as a key, and large values.
CREATE TEMP TABLE bodies (j jsonb);
INSERT INTO bodies
SELECT v::jsonb FROM pg_catalog.unnest(ARRAY[
    '{}', '[]', 'null', 'true', 'false', '""', '0', '-0', '1', '1.0', '1.00', '1.5e1', '15E-1',
    '1e3', '1E+3', '1e-3', '1000', '0.1', '-1.5e-10', '1e308', '-1e-308',
    '123456789012345678901234567890.123456789012345678901234567890',
    '0.00000000000000000000000000000000000001',
    '[1, 1.0, 1.10, 100e-2, 1.000000000000000000001]',
    '{"a": 1, "b": 2}', '{"b": 2, "a": 1}', '{ "a" :1,"b":  2 }',
    E'{\n\t"a": 1,\r\n "b": 2\n}',
    '{"a": 1, "a": 2}', '{"a": 2}',
    '{"aa": 1, "b": 2, "c": {"z": [], "y": {}}}',
    '{"nested": {"deeper": {"deepest": [1, [2, [3, [4, {"x": null}]]]]}}}',
    '["\n", "\t", "\"", "\\", "/", "\/", "\u0001", "\u001f", "\u007f", "\b\f\r"]',
    '{"amount": 100, "currency": "EUR", "items": [{"sku": "A-1", "qty": 2}]}'
]) AS v;
INSERT INTO bodies
SELECT pg_catalog.jsonb_build_object(s, s, 'n', pg_catalog.octet_length(s)) FROM strings;
INSERT INTO bodies
SELECT pg_catalog.jsonb_build_array(s, pg_catalog.char_length(s)::numeric / 7) FROM strings;
INSERT INTO bodies
SELECT pg_catalog.to_jsonb(s) FROM strings;
-- Unicode escapes the database can hold (beyond ASCII: not in SQL_ASCII,
-- which cannot convert them; beyond Latin-1 and a surrogate pair: in UTF8)
INSERT INTO bodies
SELECT pg_catalog.format('{"k": "\u%s"}', pg_catalog.lpad(pg_catalog.to_hex(c), 4, '0'))::jsonb
  FROM chars
 WHERE c BETWEEN 1 AND 65535
   AND (c < 128 OR pg_catalog.getdatabaseencoding() = 'UTF8'
        OR (c < 256 AND pg_catalog.getdatabaseencoding() <> 'SQL_ASCII'));
-- (format(): built when the statement runs, only where the encoding has them)
INSERT INTO bodies
SELECT pg_catalog.format(v)::jsonb
  FROM pg_catalog.unnest(ARRAY['["\u00e9", "\u00ff"]', '{"\u00e9": "\u00e9", "e": "\u00e9"}']) v
 WHERE pg_catalog.getdatabaseencoding() <> 'SQL_ASCII';
INSERT INTO bodies
SELECT pg_catalog.format(v)::jsonb
  FROM pg_catalog.unnest(ARRAY['{"emoji": "\ud83d\udd12"}', '{"\u00e9": "e\u0301", "e": "\u00e9"}']) v
 WHERE pg_catalog.getdatabaseencoding() = 'UTF8';
-- large: stored compressed and out of line (TOAST), read back from the table
INSERT INTO bodies
SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('i', i, 'v', pg_catalog.md5(i::text), 'f', i / 3.0))
  FROM pg_catalog.generate_series(1, 20000) i;
INSERT INTO bodies
SELECT pg_catalog.jsonb_object_agg(pg_catalog.md5(i::text), i) FROM pg_catalog.generate_series(1, 5000) i;

SELECT pg_catalog.count(*) AS bodies,
       pg_catalog.count(*) FILTER (WHERE idempotency.fingerprint(j)
                                   IS DISTINCT FROM idempotency_portable.fingerprint(j)) AS differ,
       pg_catalog.count(DISTINCT idempotency_portable.fingerprint(j)) AS distinct_fingerprints,
       pg_catalog.count(DISTINCT j) AS distinct_bodies
  FROM bodies;
-- the promises of doc/reference.md, on the portable function
SELECT idempotency_portable.fingerprint('{"b": 1, "a": [1, 2]}')
     = idempotency_portable.fingerprint('{ "a": [1,2], "b": 1 }') AS order_and_spacing_ignored,
       idempotency_portable.fingerprint('{"a": 1}') <> idempotency_portable.fingerprint('{"a": 1.0}') AS scale_counts,
       idempotency_portable.fingerprint('{"a": 1, "a": 2}') = idempotency_portable.fingerprint('{"a": 2}') AS last_duplicate_wins,
       pg_catalog.octet_length(idempotency_portable.fingerprint('{}')) AS bytes;

-- Errors: the same SQLSTATE, message, detail and hint, or the same value.
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
    state text;
    message text;
    detail text;
    hint text;
BEGIN
    EXECUTE statement INTO result;
    RETURN 'value ' || COALESCE(result, 'NULL');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN pg_catalog.format('%s %s | %s | %s', state, message, detail, hint);
END
$$;
CREATE TEMP TABLE calls (call text);
INSERT INTO calls VALUES
    ('SELECT %s.fingerprint(NULL)'),
    ('SELECT %s.fingerprint(''{"a": 1}'')::text'),
    ('SELECT %s.key_hash(NULL, ''k'')'),
    ('SELECT %s.key_hash('''', NULL)'),
    ('SELECT %s.key_hash(NULL, NULL)'),
    ('SELECT %s.key_hash('''', '''')'),
    ('SELECT %s.lock_key(NULL)'),
    ('SELECT %s.lock_key('''')'),
    ('SELECT %s.lock_key(''k'')'),
    ('SELECT %s.lock_key(pg_catalog.repeat(''k'', 255))'),
    ('SELECT %s.lock_key(pg_catalog.repeat(''k'', 256))'),
    ('SELECT %s.lock_key(pg_catalog.repeat(''k'', 100000))'),
    ('SELECT %s.lock_key(pg_catalog.repeat(pg_catalog.chr(233), 255))'),
    ('SELECT %s.lock_key(pg_catalog.repeat(pg_catalog.chr(233), 256))'),
    ('SELECT %s.try_lock(NULL)'),
    ('SELECT %s.try_lock('''')'),
    ('SELECT %s.try_lock(pg_catalog.repeat(''k'', 256))');
SELECT pg_catalog.format(call, 'idempotency') AS call,
       pg_temp.outcome(pg_catalog.format(call, 'idempotency')) AS c_edition,
       pg_temp.outcome(pg_catalog.format(call, 'idempotency_portable')) AS portable
  FROM calls;

-- try_lock takes the advisory lock of lock_key (the same pg_locks entry
-- as the C's: a transaction-scoped exclusive lock on the bigint), without
-- waiting, and again when held
CREATE FUNCTION pg_temp.lock_taken(schema_name text, k text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    got boolean;
    again boolean;
    taken text;
BEGIN
    EXECUTE pg_catalog.format('SELECT %I.try_lock($1)', schema_name) INTO got USING k;
    EXECUTE pg_catalog.format('SELECT %I.try_lock($1)', schema_name) INTO again USING k;
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s %s %s/%s/%s %s', l.locktype, l.mode, l.granted,
                                                   l.classid, l.objid, l.objsubid,
                                                   (l.classid::bigint << 32 | l.objid::bigint)
                                                   = idempotency.lock_key(k)), ', ')
      INTO taken
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid();
    RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = pg_catalog.format('%s %s %s', got, again, taken);
EXCEPTION WHEN raise_exception THEN
    -- rolled back: the lock goes with the subtransaction
    GET STACKED DIAGNOSTICS taken = MESSAGE_TEXT;
    RETURN taken;
END
$$;
SELECT pg_catalog.left(k.k, 12) AS key,
       pg_temp.lock_taken('idempotency', k.k) = pg_temp.lock_taken('idempotency_portable', k.k) AS same_lock,
       pg_temp.lock_taken('idempotency_portable', k.k) AS portable
  FROM (VALUES ('order-42'), ('k'), (pg_catalog.repeat('z', 255))) k(k);

-- Labels: the portable functions are declared as the C ones (the
-- assembler checks it too).
SELECT c.proname, c.provolatile = p.provolatile AND c.proisstrict = p.proisstrict
                  AND c.proparallel = p.proparallel AND c.prorettype = p.prorettype
                  AND c.proargtypes = p.proargtypes AND c.proargnames = p.proargnames AS same_labels,
       l.lanname AS portable_language
  FROM pg_catalog.pg_proc c
  JOIN pg_catalog.pg_proc p ON p.proname = c.proname
  JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE c.pronamespace = 'idempotency'::regnamespace
   AND p.pronamespace = 'idempotency_portable'::regnamespace
 ORDER BY 1;

-- the verdict: an error when anything differs
DO $$
DECLARE
    bad bigint;
BEGIN
    SELECT (SELECT pg_catalog.count(*) FROM pairs
             WHERE idempotency.key_hash(scope, key) IS DISTINCT FROM idempotency_portable.key_hash(scope, key))
         + (SELECT pg_catalog.count(*) FROM strings
             WHERE pg_catalog.char_length(s) BETWEEN 1 AND 255
               AND idempotency.lock_key(s) IS DISTINCT FROM idempotency_portable.lock_key(s))
         + (SELECT pg_catalog.count(*) FROM bodies
             WHERE idempotency.fingerprint(j) IS DISTINCT FROM idempotency_portable.fingerprint(j))
         + (SELECT pg_catalog.count(*) FROM pairs
             WHERE idempotency.key_hash(scope, key) IS DISTINCT FROM idempotency_portable.portable_key_hash(scope, key))
         + (SELECT pg_catalog.count(*) FROM bodies
             WHERE idempotency.fingerprint(j) IS DISTINCT FROM idempotency_portable.portable_request_hash(j))
         + (SELECT pg_catalog.count(*) FROM calls
             WHERE pg_temp.outcome(pg_catalog.format(call, 'idempotency'))
                   IS DISTINCT FROM pg_temp.outcome(pg_catalog.format(call, 'idempotency_portable')))
         + (SELECT pg_catalog.count(*) FROM (VALUES ('order-42'), ('k')) k(k)
             WHERE pg_temp.lock_taken('idempotency', k.k)
                   IS DISTINCT FROM pg_temp.lock_taken('idempotency_portable', k.k))
      INTO bad;
    IF bad > 0 THEN
        RAISE EXCEPTION 'the portable hashes differ from the C edition''s in % case(s)', bad;
    END IF;
    RAISE NOTICE 'portable hashes: all the same as the C edition''s (%)', pg_catalog.getdatabaseencoding();
END
$$;

SET client_min_messages = warning;
DROP SCHEMA idempotency_portable CASCADE;
