-- idempotency 1.6 -> 1.7 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.7 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.7'" to load this file. \quit

-- [section: the portable edition's parity] ----------------------------------

--
-- The C edition's objects are unchanged by 1.7.  This script states again
-- the functions whose portable bodies (sql/portable/, doc/portable.md)
-- changed in 1.7, so that an installation of the portable edition updated
-- to 1.7 gets them; in the C edition each statement binds the symbol it
-- bound before.
--

-- The portable body pins search_path in the catalog (SECURITY DEFINER
-- with SET search_path), as every SECURITY DEFINER function must.
CREATE OR REPLACE FUNCTION idempotency.purge_expired_batch(batch_size integer DEFAULT 10000)
RETURNS TABLE (relation text, deleted bigint)
AS 'MODULE_PATHNAME', 'idempotency_purge_expired_batch_1_6'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 5;
