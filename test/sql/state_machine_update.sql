-- State machines of 1.2 updated (doc/reference.md, "State machines"):
-- 1.2 enforced a machine with an AFTER UPDATE row trigger, which a move
-- to another partition and the rows of inheritance children escape;
-- ALTER EXTENSION UPDATE gives every table so enforced the BEFORE UPDATE
-- row trigger of 1.3 (test/sql/state_machine_partitions.sql shows it at
-- work).
CREATE DATABASE regress_sm_upgrade;
\c regress_sm_upgrade
\set VERBOSITY default
\set SHOW_CONTEXT never
\i test/sql/include/error_of.sql
CREATE EXTENSION idempotency VERSION '1.2';
SELECT idempotency.define_state_machine('order',
  '{"PENDING": ["PAID", "CANCELLED"], "PAID": ["SHIPPED", "REFUNDED"], "SHIPPED": ["COMPLETED"]}');
SELECT idempotency.define_state_machine('m''1', '{"a": ["b"]}');
CREATE TABLE orders (order_no text NOT NULL, status text NOT NULL) PARTITION BY LIST (status);
CREATE TABLE orders_pending PARTITION OF orders FOR VALUES IN ('PENDING');
CREATE TABLE orders_other PARTITION OF orders DEFAULT;
INSERT INTO orders VALUES ('O1', 'PENDING'), ('O2', 'PENDING'), ('O3', 'PAID');
CREATE TABLE parents (id int, status text);
CREATE TABLE children () INHERITS (parents);
INSERT INTO children VALUES (1, 'PENDING');
CREATE TABLE plain (id int, "État ""x""" text);
INSERT INTO plain VALUES (1, 'a');
CREATE TABLE renamed (id int, status text);
CREATE TABLE orphan (id int, status text);
INSERT INTO renamed VALUES (1, 'PENDING');
INSERT INTO orphan VALUES (1, 'PENDING');
-- the triggers 1.2's enforce_state_machine installed (this library
-- installs the new one whatever the version in the catalog)
CREATE TRIGGER idempotency_state_machine_2 AFTER UPDATE ON orders FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION idempotency.state_machine_trigger('status', 'order');
CREATE TRIGGER idempotency_state_machine_2 AFTER UPDATE ON parents FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION idempotency.state_machine_trigger('status', 'order');
CREATE TRIGGER idempotency_state_machine_2 AFTER UPDATE ON plain FOR EACH ROW
  WHEN (OLD."État ""x""" IS DISTINCT FROM NEW."État ""x""")
  EXECUTE FUNCTION idempotency.state_machine_trigger('État "x"', 'm''1');
CREATE TRIGGER idempotency_state_machine_2 AFTER UPDATE ON renamed FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION idempotency.state_machine_trigger('status', 'order');
ALTER TABLE renamed RENAME COLUMN status TO state;
CREATE TRIGGER idempotency_state_machine_2 AFTER UPDATE ON orphan FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION idempotency.state_machine_trigger('status', 'gone');
-- at 1.2 the moves across partitions and the children's rows escape
BEGIN;
UPDATE orders SET status = 'REFUNDED' WHERE order_no = 'O1';
UPDATE parents SET status = 'COMPLETED' WHERE id = 1;
SELECT order_no, status FROM orders WHERE order_no = 'O1';
ROLLBACK;
SET client_min_messages = warning;
ALTER EXTENSION idempotency UPDATE TO '1.3';
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'idempotency';
SELECT tgrelid::regclass AS tbl, tgname, tgparentid <> 0 AS clone, pg_get_triggerdef(oid)
  FROM pg_trigger WHERE tgfoid = 'idempotency.state_machine_trigger()'::regprocedure
 ORDER BY tgrelid::regclass::text COLLATE "C", tgname COLLATE "C";
UPDATE orders SET status = 'PAID' WHERE order_no = 'O2';
UPDATE plain SET "État ""x""" = 'b';
-- these should all fail
SELECT n, pg_temp.error_of(statement) FROM (VALUES
  (1, $$UPDATE orders SET status = 'REFUNDED' WHERE order_no = 'O1'$$),
  (2, $$SELECT idempotency.transition('orders', 'order_no', 'O3', 'status', 'PAID', 'CANCELLED')$$),
  (3, $$UPDATE parents SET status = 'COMPLETED' WHERE id = 1$$),
  (4, $$UPDATE plain SET "État ""x""" = 'a'$$),
  (5, $$UPDATE renamed SET state = 'x'$$),
  (6, $$UPDATE orphan SET status = 'x'$$)
) AS cases(n, statement) ORDER BY n;
SELECT order_no, status, tableoid::regclass AS part FROM orders ORDER BY order_no COLLATE "C";
\c contrib_regression
DROP DATABASE regress_sm_upgrade;
