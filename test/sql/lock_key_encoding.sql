-- lock_key() hashes the key's UTF-8 bytes whatever the database encoding
-- (doc/reference.md, "Locks"): the same id in a UTF-8 and a LATIN1
-- database, and the documented formula in both.
SELECT idempotency.lock_key('café') AS utf8_id \gset
SELECT :utf8_id AS utf8_id,
       :utf8_id = ('x' || left(encode(sha256(convert_to('café', 'UTF8')), 'hex'), 16))::bit(64)::bigint
       AS documented_formula;

CREATE DATABASE regress_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'
    TEMPLATE template0;
\c regress_latin1
SET client_encoding = 'UTF8';
CREATE EXTENSION idempotency;
SELECT pg_encoding_to_char(encoding) AS encoding FROM pg_database
 WHERE datname = current_database();
-- one byte a character here, two for 'é' in UTF-8
SELECT length('café') AS characters, octet_length('café') AS bytes;
SELECT idempotency.lock_key('café') = :utf8_id AS same_as_utf8,
       idempotency.lock_key('café') =
       ('x' || left(encode(sha256(convert_to('café', 'UTF8')), 'hex'), 16))::bit(64)::bigint
       AS documented_formula,
       idempotency.lock_key('account:42') =
       ('x' || left(encode(sha256(convert_to('account:42', 'UTF8')), 'hex'), 16))::bit(64)::bigint
       AS ascii_formula;
-- try_lock takes the lock of that id
BEGIN;
SELECT idempotency.try_lock('café');
SELECT objid::bigint | (classid::bigint << 32) = :utf8_id AS same_lock
  FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;

\c contrib_regression
DROP DATABASE regress_latin1;
