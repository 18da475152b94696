-- State machines on partitioned tables and inheritance trees
-- (doc/reference.md, "State machines"): an UPDATE that moves a row to
-- another partition runs as a DELETE and an INSERT and fires no AFTER
-- UPDATE row trigger, so the machine is enforced by a BEFORE UPDATE row
-- trigger, which fires on the source partition before the row is routed,
-- is cloned to partitions created or attached later, and is installed on
-- every inheritance child.  Tables enforced by 1.2 get it on ALTER
-- EXTENSION UPDATE (test/sql/state_machine_update.sql).
\set VERBOSITY default
\set SHOW_CONTEXT never

\i test/sql/include/error_of.sql

SELECT idempotency.define_state_machine('part_order',
  '{"PENDING": ["PAID", "CANCELLED", "HELD"], "HELD": ["PENDING"], "PAID": ["SHIPPED", "REFUNDED"], "SHIPPED": ["COMPLETED"]}');

-- a table partitioned by its state, with a sub-partitioned partition
CREATE TABLE porders (
    order_no text NOT NULL,
    status   text NOT NULL,
    note     text
) PARTITION BY LIST (status);
CREATE INDEX ON porders (order_no);
CREATE TABLE porders_open PARTITION OF porders FOR VALUES IN ('PENDING');
CREATE TABLE porders_paid PARTITION OF porders FOR VALUES IN ('PAID');
CREATE TABLE porders_closed PARTITION OF porders
  FOR VALUES IN ('CANCELLED', 'REFUNDED', 'COMPLETED') PARTITION BY LIST (status);
CREATE TABLE porders_cancelled PARTITION OF porders_closed FOR VALUES IN ('CANCELLED');
CREATE TABLE porders_final PARTITION OF porders_closed FOR VALUES IN ('REFUNDED', 'COMPLETED');
INSERT INTO porders (order_no, status) SELECT 'P' || i, 'PENDING' FROM generate_series(1, 9) i;

SELECT idempotency.enforce_state_machine('porders', 'status', 'part_order');
SELECT idempotency.enforce_state_machine('porders', 'status', 'part_order');  -- twice is harmless
-- one BEFORE trigger on the table, cloned to every partition
SELECT tgrelid::regclass AS tbl, tgname, tgparentid <> 0 AS clone
  FROM pg_trigger WHERE tgfoid = 'idempotency.state_machine_trigger()'::regprocedure
 ORDER BY tgrelid::regclass::text COLLATE "C";
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'porders'::regclass;

-- partitions created or attached after the enforcement get the trigger
CREATE TABLE porders_shipped PARTITION OF porders FOR VALUES IN ('SHIPPED');
CREATE TABLE porders_held (order_no text NOT NULL, status text NOT NULL, note text);
ALTER TABLE porders ATTACH PARTITION porders_held FOR VALUES IN ('HELD');
SELECT tgrelid::regclass AS tbl, tgname, tgparentid <> 0 AS clone
  FROM pg_trigger WHERE tgrelid IN ('porders_shipped'::regclass, 'porders_held'::regclass)
 ORDER BY tgrelid::regclass::text COLLATE "C";

-- direct UPDATEs: the legal moves cross partitions
UPDATE porders SET status = 'PAID' WHERE order_no IN ('P1', 'P2', 'P3');
UPDATE porders SET status = 'HELD' WHERE order_no = 'P4';
UPDATE porders SET status = 'PENDING' WHERE order_no = 'P4';
UPDATE porders SET status = 'HELD' WHERE order_no = 'P5';
UPDATE porders SET status = 'SHIPPED' WHERE order_no = 'P1';
UPDATE porders SET status = 'COMPLETED' WHERE order_no = 'P1';
UPDATE porders SET note = 'no state change' WHERE order_no = 'P2';
SELECT order_no, status, tableoid::regclass AS part FROM porders ORDER BY order_no COLLATE "C";
-- these should all fail: illegal moves, across partitions and sub-partitions
UPDATE porders SET status = 'REFUNDED' WHERE order_no = 'P6';
SELECT n, pg_temp.error_of(statement) FROM (VALUES
  (1, $$UPDATE porders SET status = 'CANCELLED' WHERE order_no = 'P2'$$),
  (2, $$UPDATE porders SET status = 'PAID' WHERE order_no = 'P5'$$),
  (3, $$UPDATE porders SET status = 'CANCELLED' WHERE order_no = 'P5'$$),
  (4, $$UPDATE porders SET status = 'SHIPPED' WHERE order_no = 'P6'$$),
  (5, $$UPDATE porders SET status = 'REFUNDED' WHERE order_no = 'P1'$$),
  (6, $$UPDATE porders SET status = 'PENDING' WHERE order_no = 'P1'$$),
  (7, $$UPDATE porders_closed SET status = 'CANCELLED' WHERE order_no = 'P1'$$),
  (8, $$UPDATE porders SET status = 'CANCELLED' WHERE status IN ('PENDING', 'PAID')$$),
  (9, $$MERGE INTO porders o USING (VALUES ('P2')) v(k) ON o.order_no = v.k
        WHEN MATCHED THEN UPDATE SET status = 'PENDING'$$),
  (10, $$UPDATE porders SET status = NULL WHERE order_no = 'P6'$$)
) AS cases(n, statement) ORDER BY n;
SELECT order_no, status, tableoid::regclass AS part FROM porders ORDER BY order_no COLLATE "C";

-- transition() across partitions: the same outcomes as on a plain table
SELECT * FROM idempotency.transition('porders', 'order_no', 'P2', 'status', 'PAID', 'SHIPPED');
SELECT * FROM idempotency.transition('porders', 'order_no', 'P2', 'status', 'PAID', 'SHIPPED');
SELECT * FROM idempotency.transition('porders', 'order_no', 'P3', 'status', 'PENDING', 'CANCELLED');
SELECT * FROM idempotency.transition('porders', 'order_no', 'P7', 'status', 'PENDING', 'CANCELLED');
SELECT * FROM idempotency.transition('porders', 'order_no', 'P99', 'status', 'PENDING', 'PAID');
-- these should all fail: a row in from_state that the machine may not
-- move to to_state is refused by the trigger, as on a plain table
SELECT * FROM idempotency.transition('porders', 'order_no', 'P3', 'status', 'PAID', 'CANCELLED');
SELECT pg_temp.error_of($$SELECT idempotency.transition('porders', 'order_no', 'P5', 'status', 'HELD', 'PAID')$$);
SELECT pg_temp.error_of($$SELECT idempotency.transition('porders', 'order_no', 'P8', 'status', 'PENDING', 'COMPLETED')$$);
SELECT order_no, status, tableoid::regclass AS part FROM porders
 WHERE order_no IN ('P2', 'P3', 'P5', 'P7', 'P8') ORDER BY order_no COLLATE "C";

-- a BEFORE trigger named before the enforcing one moves the state: caught
CREATE FUNCTION part_sneaky() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.note = 'sneaky' THEN NEW.status := 'REFUNDED'; END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER set_sneaky BEFORE UPDATE ON porders FOR EACH ROW EXECUTE FUNCTION part_sneaky();
SELECT pg_temp.error_of($$UPDATE porders SET note = 'sneaky' WHERE order_no = 'P9'$$);
DROP TRIGGER set_sneaky ON porders;
-- the documented limit: one named after it ("zz_…" sorts after "zz_i…")
-- acts after the check
CREATE TRIGGER zzz_sneaky BEFORE UPDATE ON porders FOR EACH ROW EXECUTE FUNCTION part_sneaky();
BEGIN;
UPDATE porders SET note = 'sneaky' WHERE order_no = 'P9';
SELECT order_no, status FROM porders WHERE order_no = 'P9';
ROLLBACK;
DROP TRIGGER zzz_sneaky ON porders;

-- a table enforced on its own must drop that before it is attached
CREATE TABLE porders_lost (order_no text NOT NULL, status text NOT NULL, note text);
SELECT idempotency.enforce_state_machine('porders_lost', 'status', 'part_order');
-- these should all fail: core refuses a second trigger of the same name,
-- a partition's clone cannot be replaced or dropped on its own
SELECT pg_temp.error_of($$ALTER TABLE porders ATTACH PARTITION porders_lost FOR VALUES IN ('LOST')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enforce_state_machine('porders_paid', 'status', 'part_order')$$);
SELECT pg_temp.error_of($$SELECT idempotency.drop_state_machine_enforcement('porders_paid', 'status')$$);
SELECT idempotency.drop_state_machine_enforcement('porders_lost', 'status');
ALTER TABLE porders ATTACH PARTITION porders_lost FOR VALUES IN ('LOST');
SELECT tgname, tgparentid <> 0 AS clone FROM pg_trigger WHERE tgrelid = 'porders_lost'::regclass;
SELECT pg_temp.error_of($$UPDATE porders SET status = 'LOST' WHERE order_no = 'P9'$$);
-- a detached partition loses the clone
ALTER TABLE porders DETACH PARTITION porders_lost;
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'porders_lost'::regclass;

-- dropping the enforcement drops the clones; twice is harmless
SELECT idempotency.drop_state_machine_enforcement('porders', 'status');
SELECT idempotency.drop_state_machine_enforcement('porders', 'status');
SELECT count(*) AS triggers FROM pg_trigger
 WHERE tgfoid = 'idempotency.state_machine_trigger()'::regprocedure;
UPDATE porders SET status = 'REFUNDED' WHERE order_no = 'P9';
SELECT order_no, status, tableoid::regclass AS part FROM porders WHERE order_no = 'P9';

-- inheritance: the children's rows fire the children's triggers, so each
-- table of the tree gets one, named after its own attnum of the column
CREATE TABLE tickets (id int PRIMARY KEY, status text NOT NULL);
CREATE TABLE tickets_old (archived date) INHERITS (tickets);
CREATE TABLE tickets_older () INHERITS (tickets_old);
INSERT INTO tickets VALUES (1, 'PENDING');
INSERT INTO tickets_old VALUES (2, 'PENDING', '2024-01-01');
INSERT INTO tickets_older VALUES (3, 'PAID', '2023-01-01');
SELECT idempotency.enforce_state_machine('tickets', 'status', 'part_order');
SELECT idempotency.enforce_state_machine('tickets', 'status', 'part_order');  -- twice is harmless
SELECT tgrelid::regclass AS tbl, tgname, pg_get_triggerdef(oid) FROM pg_trigger
 WHERE tgfoid = 'idempotency.state_machine_trigger()'::regprocedure ORDER BY tgrelid::regclass::text COLLATE "C";
UPDATE tickets SET status = 'PAID' WHERE id = 2;
SELECT * FROM idempotency.transition('tickets', 'id', '3', 'status', 'PAID', 'SHIPPED');
-- these should all fail
SELECT n, pg_temp.error_of(statement) FROM (VALUES
  (1, $$UPDATE tickets SET status = 'REFUNDED' WHERE id = 1$$),
  (2, $$UPDATE tickets SET status = 'PENDING' WHERE id = 2$$),
  (3, $$UPDATE tickets SET status = 'PENDING' WHERE id = 3$$),
  (4, $$UPDATE tickets_old SET status = 'CANCELLED' WHERE id = 2$$),
  (5, $$SELECT idempotency.transition('tickets', 'id', '2', 'status', 'PAID', 'COMPLETED')$$)
) AS cases(n, statement) ORDER BY n;
SELECT id, status, tableoid::regclass AS tbl FROM tickets ORDER BY id;
-- a child added later is not guarded until the table is enforced again
-- (the documented limit); its column has another attnum
CREATE TABLE tickets_new (note text, status text NOT NULL, id int PRIMARY KEY);
INSERT INTO tickets_new VALUES ('late', 'PENDING', 4);
ALTER TABLE tickets_new INHERIT tickets;
BEGIN;
UPDATE tickets SET status = 'COMPLETED' WHERE id = 4;
SELECT id, status FROM tickets WHERE id = 4;
ROLLBACK;
SELECT idempotency.enforce_state_machine('tickets', 'status', 'part_order');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'tickets_new'::regclass;
SELECT pg_temp.error_of($$UPDATE tickets SET status = 'COMPLETED' WHERE id = 4$$);
-- dropping the enforcement drops it from the children too
SELECT idempotency.drop_state_machine_enforcement('tickets', 'status');
SELECT idempotency.drop_state_machine_enforcement('tickets', 'status');  -- nothing left to drop
SELECT count(*) AS triggers FROM pg_trigger
 WHERE tgfoid = 'idempotency.state_machine_trigger()'::regprocedure;
-- enforcing a child guards its subtree and leaves the parent as it is
SELECT idempotency.enforce_state_machine('tickets_old', 'status', 'part_order');
SELECT tgrelid::regclass AS tbl FROM pg_trigger
 WHERE tgfoid = 'idempotency.state_machine_trigger()'::regprocedure ORDER BY tgrelid::regclass::text COLLATE "C";
UPDATE tickets SET status = 'COMPLETED' WHERE id = 1;
SELECT pg_temp.error_of($$UPDATE tickets SET status = 'COMPLETED' WHERE id = 2$$);
SELECT idempotency.drop_state_machine_enforcement('tickets_old', 'status');

DROP TABLE porders, porders_lost, tickets CASCADE;
DROP FUNCTION part_sneaky();
DELETE FROM idempotency.state_machines WHERE name = 'part_order';
