-- idempotency 1.3 -> 1.4 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.4 and an
-- updated one are the same.
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.4'" to load this file. \quit

-- [section: keys] ------------------------------------------------------------

--
-- key_hash is held to idempotency.key_hash(scope, idempotency_key) by a
-- trigger instead of a CHECK constraint: the executor reads and plans a
-- CHECK's expression again for every statement that writes the table (each
-- claim and each completion paid for it), where the trigger runs for new
-- rows and for updates of the three columns only.  The rule is the same: a
-- row without key_hash gets it (a dump of 1.2, a publisher at 1.2, an
-- INSERT by hand), a wrong one is refused with check_violation (23514), on
-- insert and when scope, key or hash is changed.  ALWAYS, so that it also
-- fires in logical replication's apply worker.  No rewrite, no scan.
--
CREATE FUNCTION idempotency.check_key_hash()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idempotency_check_key_hash'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION idempotency.check_key_hash() IS 'trigger: give a new row of idempotency_keys its key_hash, and refuse a row whose key_hash is not key_hash(scope, idempotency_key)';
REVOKE ALL ON FUNCTION idempotency.check_key_hash() FROM PUBLIC;

DROP TRIGGER idempotency_keys_fill_key_hash ON idempotency.idempotency_keys;
DROP FUNCTION idempotency.fill_key_hash();
ALTER TABLE idempotency.idempotency_keys DROP CONSTRAINT idempotency_keys_key_hash_check;
CREATE TRIGGER idempotency_keys_key_hash
    BEFORE INSERT ON idempotency.idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION idempotency.check_key_hash();
CREATE TRIGGER idempotency_keys_key_hash_changed
    AFTER UPDATE OF scope, idempotency_key, key_hash ON idempotency.idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION idempotency.check_key_hash();
ALTER TABLE idempotency.idempotency_keys ENABLE ALWAYS TRIGGER idempotency_keys_key_hash;
ALTER TABLE idempotency.idempotency_keys ENABLE ALWAYS TRIGGER idempotency_keys_key_hash_changed;
COMMENT ON COLUMN idempotency.idempotency_keys.key_hash IS 'idempotency.key_hash(scope, idempotency_key), written with the row (a trigger holds it): the primary key; look a key up with WHERE key_hash = idempotency.key_hash(scope, key)';
