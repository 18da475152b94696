-- idempotency 1.2 -> 1.3 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.3 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-- [section: keys] ------------------------------------------------------------

--
-- key_hash becomes a plain column that the library writes with every new
-- key, instead of a stored generated column: logical replication (pgoutput
-- of 15 and 17) does not send generated columns, and key_hash is the
-- primary key, so the replica identity.  A CHECK constraint holds it to
-- idempotency.key_hash(scope, idempotency_key), as the generated column
-- did.  No rewrite; the check reads the table once (doc/operations.md,
-- "Upgrades").
--
ALTER TABLE idempotency.idempotency_keys ALTER COLUMN key_hash DROP EXPRESSION;
ALTER TABLE idempotency.idempotency_keys
    ADD CONSTRAINT idempotency_keys_key_hash_check
        CHECK (key_hash OPERATOR(pg_catalog.=) idempotency.key_hash(scope, idempotency_key));
-- Rows that come without key_hash get it: a dump of a database at 1.2
-- (whose COPY leaves the generated column out) restored into 1.3, a
-- publisher at 1.2 replicating to 1.3, an INSERT written by hand.  The
-- library always gives key_hash, so the trigger's WHEN clause keeps it
-- from firing on claims; ALWAYS, so that it also fires in logical
-- replication's apply worker.
CREATE FUNCTION idempotency.fill_key_hash()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.key_hash := idempotency.key_hash(NEW.scope, NEW.idempotency_key);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION idempotency.fill_key_hash() IS 'trigger: give a row of idempotency_keys inserted without key_hash its hash';
REVOKE ALL ON FUNCTION idempotency.fill_key_hash() FROM PUBLIC;
CREATE TRIGGER idempotency_keys_fill_key_hash
    BEFORE INSERT ON idempotency.idempotency_keys
    FOR EACH ROW WHEN (NEW.key_hash IS NULL)
    EXECUTE FUNCTION idempotency.fill_key_hash();
ALTER TABLE idempotency.idempotency_keys ENABLE ALWAYS TRIGGER idempotency_keys_fill_key_hash;
COMMENT ON COLUMN idempotency.idempotency_keys.key_hash IS 'idempotency.key_hash(scope, idempotency_key), written with the row (a CHECK holds it): the primary key; look a key up with WHERE key_hash = idempotency.key_hash(scope, key)';

-- [section: state machines] --------------------------------------------------
--
-- enforce_state_machine() now installs a BEFORE UPDATE row trigger,
-- zz_idempotency_state_machine_<attnum>, on the table and on its
-- inheritance children: the AFTER UPDATE trigger of 1.2
-- (idempotency_state_machine_<attnum>) never fires for an UPDATE that
-- moves a row to another partition, nor for the rows of inheritance
-- children.  Every table that 1.2 enforced is enforced again, which
-- installs the new trigger and drops the old one.  A trigger whose column
-- was renamed or whose machine is gone is left as it was: it fails every
-- state change, as it did (42703, 42704), until enforced again.  Clones of
-- a partitioned table's trigger go with it.
SELECT idempotency.enforce_state_machine(t.tgrelid, a.attname, m.name)
  FROM pg_catalog.pg_trigger t
 CROSS JOIN LATERAL (
        SELECT pg_catalog.position(t.tgargs, '\x00'::pg_catalog.bytea) AS col_end) e
 CROSS JOIN LATERAL (
        SELECT pg_catalog.convert_from(pg_catalog.substr(t.tgargs, 1, e.col_end - 1),
                                       pg_catalog.getdatabaseencoding()) AS col,
               pg_catalog.substr(t.tgargs, e.col_end + 1) AS rest) r
  JOIN pg_catalog.pg_attribute a
    ON a.attrelid OPERATOR(pg_catalog.=) t.tgrelid
   AND a.attname OPERATOR(pg_catalog.=) r.col::pg_catalog.name
   AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
  JOIN idempotency.state_machines m
    ON m.name OPERATOR(pg_catalog.=) pg_catalog.convert_from(
         pg_catalog.substr(r.rest, 1, pg_catalog.position(r.rest, '\x00'::pg_catalog.bytea) - 1),
         pg_catalog.getdatabaseencoding())
 WHERE t.tgfoid OPERATOR(pg_catalog.=) 'idempotency.state_machine_trigger()'::pg_catalog.regprocedure
   AND t.tgparentid OPERATOR(pg_catalog.=) 0
   AND t.tgnargs OPERATOR(pg_catalog.=) 2
   AND t.tgname OPERATOR(pg_catalog.~) '^idempotency_state_machine_[0-9]+$'
 ORDER BY t.tgrelid, t.tgname COLLATE "C";

-- [section: outbox] ----------------------------------------------------------

-- [section: views and privileges] --------------------------------------------
