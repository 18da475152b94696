-- idempotency 1.6 -> 1.7 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.7 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.7'" to load this file. \quit

-- [section: the portable edition's parity] ----------------------------------

--
-- This section states again the functions whose portable bodies
-- (sql/portable/, doc/portable.md) changed in 1.7 and whose C symbol did
-- not, so that an installation of the portable edition updated to 1.7
-- gets them; in the C edition each statement binds the symbol it bound
-- before.
--

-- The portable body pins search_path in the catalog (SECURITY DEFINER
-- with SET search_path), as every SECURITY DEFINER function must.
CREATE OR REPLACE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
AS 'MODULE_PATHNAME', 'idempotency_purge_expired_batch_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 5;

-- [section: lookup hides an answer past its time] ---------------------------

--
-- lookup() returns the key's row without its response_body once
-- response_expires_at has come, the moment claims start answering gone,
-- whoever asks and whether or not purge_expired() has dropped the body
-- yet (the code stays, as in gone).  The 1.7 library does so for the 1.0
-- symbol too; this statement binds 1.7's symbol, so that the portable
-- edition's body, which changed, lands in an updated installation.  The
-- views (stats, stalled_keys, metrics) show no answers.
--
CREATE OR REPLACE FUNCTION idempotency.lookup(key text, scope text DEFAULT '')
RETURNS idempotency.idempotency_keys
AS 'MODULE_PATHNAME', 'idempotency_lookup_1_7'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION idempotency.lookup(text, text) IS 'the row of a key, or NULL when absent or expired; its response_body NULL once response_expires_at has come';
