-- transition() runs its statements with the caller's rights, through the
-- executor (doc/reference.md, "transition"): privileges on the table and
-- USAGE on its schema are checked for each caller, even when another role
-- called it on the same table first in this session.
\set VERBOSITY terse
CREATE SCHEMA tr_shop;
CREATE TABLE tr_shop.orders (id bigint PRIMARY KEY, state text NOT NULL);
INSERT INTO tr_shop.orders VALUES (1, 'PENDING'), (2, 'PENDING');
CREATE ROLE regress_tr_clerk;
CREATE ROLE regress_tr_outsider;
GRANT USAGE ON SCHEMA idempotency TO regress_tr_clerk, regress_tr_outsider;
GRANT EXECUTE ON FUNCTION idempotency.transition(regclass, name, text, name, text, text, jsonb)
  TO regress_tr_clerk, regress_tr_outsider;
GRANT USAGE ON SCHEMA tr_shop TO regress_tr_clerk;
GRANT SELECT, UPDATE ON tr_shop.orders TO regress_tr_clerk, regress_tr_outsider;

SET ROLE regress_tr_clerk;
SELECT * FROM idempotency.transition('tr_shop.orders', 'id', '1', 'state', 'PENDING', 'PAID');
RESET ROLE;

-- this should fail: the outsider may update the table but not reach its
-- schema (the table is named by its OID, which needs no lookup)
SELECT 'tr_shop.orders'::regclass::oid AS orders_oid \gset
SET ROLE regress_tr_outsider;
SELECT * FROM idempotency.transition(:orders_oid, 'id', '2', 'state', 'PENDING', 'PAID');
RESET ROLE;

-- and without UPDATE on the table, the clerk is refused too
REVOKE UPDATE ON tr_shop.orders FROM regress_tr_clerk;
SET ROLE regress_tr_clerk;
SELECT * FROM idempotency.transition('tr_shop.orders', 'id', '2', 'state', 'PENDING', 'PAID');
RESET ROLE;
SELECT id, state FROM tr_shop.orders ORDER BY id;

DROP SCHEMA tr_shop CASCADE;
REVOKE ALL ON SCHEMA idempotency FROM regress_tr_clerk, regress_tr_outsider;
REVOKE ALL ON FUNCTION idempotency.transition(regclass, name, text, name, text, text, jsonb)
  FROM regress_tr_clerk, regress_tr_outsider;
DROP ROLE regress_tr_clerk, regress_tr_outsider;
