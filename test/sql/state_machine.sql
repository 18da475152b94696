-- State machines: define_state_machine, enforce_state_machine,
-- drop_state_machine_enforcement and transition (doc/reference.md, "State machines").
\set VERBOSITY default
\set SHOW_CONTEXT never

\i test/sql/include/error_of.sql

-- signatures, labels and result type are those of doc/reference.md
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result, provolatile AS vol,
       proparallel AS par, proisstrict AS strict, prosecdef AS definer
  FROM pg_proc p
 WHERE pronamespace = 'idempotency'::regnamespace
   AND proname IN ('define_state_machine', 'enforce_state_machine',
                   'drop_state_machine_enforcement', 'transition', 'state_machine_trigger')
 ORDER BY p.proname COLLATE "C";
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'idempotency.transition_result'::regclass AND attnum > 0 ORDER BY attnum;
-- pg_dump keeps the machines
SELECT 'idempotency.state_machines'::regclass = ANY (extconfig) AS dumped
  FROM pg_extension WHERE extname = 'idempotency';

SELECT idempotency.define_state_machine('order',
  '{"PENDING": ["PAID", "CANCELLED"], "PAID": ["SHIPPED", "REFUNDED"], "SHIPPED": ["COMPLETED"]}');
SELECT name, transitions FROM idempotency.state_machines ORDER BY name COLLATE "C";

CREATE TABLE orders (
    order_no text PRIMARY KEY,
    status   text NOT NULL DEFAULT 'PENDING',
    paid_at  timestamptz,
    amount   int,
    note     text
);
INSERT INTO orders (order_no, amount) SELECT 'ORD' || i, i FROM generate_series(1, 1000) i;
ANALYZE orders;

-- every outcome, without a trigger
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', 'CANCELLED');
SELECT * FROM idempotency.transition('orders', 'order_no', 'NOPE', 'status', 'PENDING', 'PAID');
SELECT order_no, status FROM orders WHERE order_no IN ('ORD1', 'ORD2') ORDER BY 1;

-- set_columns: values converted to the columns' types
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD2', 'status', 'PENDING', 'PAID',
  '{"paid_at": "2024-01-02T03:04:05Z", "amount": 250, "note": null}');
SELECT status, paid_at AT TIME ZONE 'UTC' AS paid_at_utc, amount, note FROM orders WHERE order_no = 'ORD2';
-- a rejected or already transition writes nothing
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD2', 'status', 'PENDING', 'PAID', '{"amount": 1}');
SELECT amount FROM orders WHERE order_no = 'ORD2';
-- from_state = to_state moves nothing
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD2', 'status', 'PAID', 'PAID');
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD3', 'status', 'PAID', 'PAID');

-- the enforcing trigger
SELECT idempotency.enforce_state_machine('orders', 'status', 'order');
SELECT idempotency.enforce_state_machine('orders', 'status', 'order');  -- twice is harmless
SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'orders'::regclass ORDER BY 1;
UPDATE orders SET status = 'SHIPPED' WHERE order_no = 'ORD1';
UPDATE orders SET note = 'no state change' WHERE order_no = 'ORD1';
UPDATE orders SET status = 'SHIPPED', note = 'same state' WHERE order_no = 'ORD1';
INSERT INTO orders (order_no, status) VALUES ('ORD-X', 'COMPLETED');  -- inserts are free
-- these should all fail
UPDATE orders SET status = 'PENDING' WHERE order_no = 'ORD1';
UPDATE orders SET status = 'CANCELLED' WHERE order_no = 'ORD-X';
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD3', 'status', 'PENDING', 'SHIPPED');
SELECT status FROM orders WHERE order_no = 'ORD3';
SELECT pg_temp.error_of($$UPDATE orders SET status = 'COMPLETED' WHERE order_no = 'ORD4'$$);
SELECT pg_temp.error_of($$SELECT idempotency.transition('orders', 'order_no', 'ORD4', 'status', 'PENDING', 'COMPLETED')$$);
-- a BEFORE trigger that moves the state is caught too: the check runs after it
CREATE FUNCTION sneaky() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.note = 'sneaky' THEN NEW.status := 'REFUNDED'; END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER a_sneaky BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION sneaky();
SELECT pg_temp.error_of($$UPDATE orders SET note = 'sneaky' WHERE order_no = 'ORD4'$$);
DROP TRIGGER a_sneaky ON orders;
-- through transition(), a transition the machine has passes
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'SHIPPED', 'COMPLETED');

-- redefining replaces the transitions, and the trigger sees it at once
SELECT idempotency.define_state_machine('order',
  '{"PENDING": ["PAID", "CANCELLED", "SHIPPED"], "PAID": ["SHIPPED", "REFUNDED"], "SHIPPED": ["COMPLETED"]}');
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD3', 'status', 'PENDING', 'SHIPPED');
BEGIN;
SELECT idempotency.define_state_machine('order', '{"PENDING": []}');
UPDATE orders SET status = 'PAID' WHERE order_no = 'ORD5';  -- fails: redefined in this transaction
ROLLBACK;
UPDATE orders SET status = 'PAID' WHERE order_no = 'ORD5';  -- the rollback restored the machine

-- dropping the enforcement
SELECT idempotency.drop_state_machine_enforcement('orders', 'status');
SELECT idempotency.drop_state_machine_enforcement('orders', 'status');  -- nothing left to drop
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'orders'::regclass;
UPDATE orders SET status = 'PENDING' WHERE order_no = 'ORD1';

-- the key is cast to the key column's type: the primary key index is used
SELECT pg_stat_force_next_flush();
SELECT seq_scan AS seq_before, idx_scan AS idx_before
  FROM pg_stat_user_tables WHERE relid = 'orders'::regclass \gset
SELECT outcome FROM idempotency.transition('orders', 'order_no', 'ORD10', 'status', 'PENDING', 'PAID');
SELECT outcome FROM idempotency.transition('orders', 'order_no', 'ORD10', 'status', 'PENDING', 'PAID');
-- past the fifth execution the cached plan is generic: still the index
SELECT outcome, count(*) FROM generate_series(11, 20) i,
  idempotency.transition('orders', 'order_no', 'ORD' || i, 'status', 'PENDING', 'PAID') GROUP BY 1;
SELECT pg_stat_force_next_flush();
SELECT seq_scan - :seq_before AS seq_scans, idx_scan - :idx_before >= 12 AS index_scan_per_call
  FROM pg_stat_user_tables WHERE relid = 'orders'::regclass;
-- the statement transition() runs (see the CONTEXT of its errors), as a
-- generic plan
SET plan_cache_mode = force_generic_plan;
PREPARE guarded(text, text, text) AS
  UPDATE public.orders AS t SET status = $3::pg_catalog.text
  WHERE t.order_no OPERATOR(pg_catalog.=) $1::pg_catalog.text
    AND t.status OPERATOR(pg_catalog.=) $2::pg_catalog.text;
EXPLAIN (COSTS OFF) EXECUTE guarded('ORD1', 'PENDING', 'PAID');
DEALLOCATE guarded;
RESET plan_cache_mode;

-- bigint keys, an enum state column
CREATE TYPE ship_state AS ENUM ('PENDING', 'PAID', 'SHIPPED', 'COMPLETED', 'CANCELLED', 'REFUNDED');
CREATE TABLE shipments (id bigint PRIMARY KEY, state ship_state NOT NULL DEFAULT 'PENDING', tags text[]);
INSERT INTO shipments (id) SELECT i FROM generate_series(1, 1000) i;
ANALYZE shipments;
SELECT idempotency.enforce_state_machine('shipments', 'state', 'order');
SELECT * FROM idempotency.transition('shipments', 'id', '42', 'state', 'PENDING', 'PAID', '{"tags": ["a", "b"]}');
SELECT * FROM idempotency.transition('shipments', 'id', '42', 'state', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('shipments', 'id', '42', 'state', 'PENDING', 'CANCELLED');
SELECT * FROM idempotency.transition('shipments', 'id', '4242', 'state', 'PENDING', 'PAID');
SELECT id, state, tags FROM shipments WHERE id = 42;
SELECT pg_stat_force_next_flush();
SELECT seq_scan AS seq_before, idx_scan AS idx_before
  FROM pg_stat_user_tables WHERE relid = 'shipments'::regclass \gset
SELECT outcome FROM idempotency.transition('shipments', 'id', '43', 'state', 'PENDING', 'PAID');
SELECT pg_stat_force_next_flush();
SELECT seq_scan - :seq_before AS seq_scans, idx_scan - :idx_before AS index_scans
  FROM pg_stat_user_tables WHERE relid = 'shipments'::regclass;
-- these should all fail
SELECT pg_temp.error_of($$SELECT idempotency.transition('shipments', 'id', 'x42', 'state', 'PENDING', 'PAID')$$);
SELECT pg_temp.error_of($$SELECT idempotency.transition('shipments', 'id', '42', 'state', 'PAID', 'LOST')$$);
SELECT pg_temp.error_of($$SELECT idempotency.transition('shipments', 'id', '42', 'state', 'PAID', 'PENDING')$$);

-- uuid keys
CREATE TABLE payments (id uuid PRIMARY KEY, status varchar(20) NOT NULL);
INSERT INTO payments VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'PENDING');
SELECT * FROM idempotency.transition('payments', 'id', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 'status', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('payments', 'id', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'status', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('payments', 'id', '00000000-0000-0000-0000-000000000000', 'status', 'PENDING', 'PAID');

-- character(n) keys and states: the casts do not truncate to one character
CREATE TABLE codes (code char(5) PRIMARY KEY, status char(10) NOT NULL);
INSERT INTO codes VALUES ('AB', 'PENDING'), ('AC', 'PENDING');
SELECT * FROM idempotency.transition('codes', 'code', 'AB', 'status', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('codes', 'code', 'AB', 'status', 'PENDING', 'PAID');
SELECT code, status FROM codes ORDER BY code;

-- hostile identifiers are quoted, never spliced
CREATE SCHEMA "we""ird; schema";
CREATE TABLE "we""ird; schema"."a; DROP TABLE x" ("key; --" text PRIMARY KEY, "St""ate" text NOT NULL, "Set Me" int);
CREATE TABLE x (keep int);
INSERT INTO "we""ird; schema"."a; DROP TABLE x" VALUES ('k''1', 'PENDING', 0);
SELECT * FROM idempotency.transition('"we""ird; schema"."a; DROP TABLE x"', 'key; --', 'k''1', 'St"ate', 'PENDING', 'PAID', '{"Set Me": 7}');
SELECT idempotency.enforce_state_machine('"we""ird; schema"."a; DROP TABLE x"', 'St"ate', 'order');
SELECT * FROM idempotency.transition('"we""ird; schema"."a; DROP TABLE x"', 'key; --', 'k''1', 'St"ate', 'PAID', 'PENDING');
SELECT idempotency.drop_state_machine_enforcement('"we""ird; schema"."a; DROP TABLE x"', 'St"ate');
SELECT * FROM "we""ird; schema"."a; DROP TABLE x";
SELECT count(*) AS x_still_there FROM x;

-- a machine with hostile state and machine names
SELECT idempotency.define_state_machine('m''); DROP TABLE x; --', '{"a''b": ["c\"d"]}');
CREATE TABLE hostile (id int PRIMARY KEY, s text);
INSERT INTO hostile VALUES (1, 'a''b');
SELECT idempotency.enforce_state_machine('hostile', 's', 'm''); DROP TABLE x; --');
UPDATE hostile SET s = 'c"d' WHERE id = 1;
UPDATE hostile SET s = 'a''b' WHERE id = 1;
SELECT count(*) AS x_still_there FROM x;

-- NULL states are never a transition of the machine
UPDATE hostile SET s = NULL WHERE id = 1;

-- renaming the table or the columns: transition() prepares its statements again
ALTER TABLE payments RENAME COLUMN status TO state;
ALTER TABLE payments RENAME TO payments2;
SELECT * FROM idempotency.transition('payments2', 'id', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'state', 'PAID', 'SHIPPED');

-- a role without UPDATE on the table is refused; with it, it works
CREATE ROLE regress_sm_user;
GRANT USAGE ON SCHEMA idempotency TO regress_sm_user;
GRANT EXECUTE ON FUNCTION idempotency.transition(regclass, name, text, name, text, text, jsonb) TO regress_sm_user;
GRANT SELECT ON orders TO regress_sm_user;
SET ROLE regress_sm_user;
-- these should all fail
SELECT pg_temp.error_of($$SELECT idempotency.transition('orders', 'order_no', 'ORD40', 'status', 'PENDING', 'PAID')$$);
SELECT pg_temp.error_of($$SELECT * FROM idempotency.state_machines$$);
SELECT pg_temp.error_of($$SELECT idempotency.define_state_machine('mine', '{}')$$);
SELECT pg_temp.error_of($$SELECT idempotency.enforce_state_machine('orders', 'status', 'order')$$);
RESET ROLE;
GRANT UPDATE ON orders TO regress_sm_user;
SELECT idempotency.enforce_state_machine('orders', 'status', 'order');
-- redefine (unchanged) so that the role's backend must read the machine again
SELECT idempotency.define_state_machine('order',
  '{"PENDING": ["PAID", "CANCELLED", "SHIPPED"], "PAID": ["SHIPPED", "REFUNDED"], "SHIPPED": ["COMPLETED"]}');
SET ROLE regress_sm_user;
SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD40', 'status', 'PENDING', 'PAID');
-- the trigger reads the machine as the extension owner, and still refuses
SELECT pg_temp.error_of($$SELECT idempotency.transition('orders', 'order_no', 'ORD40', 'status', 'PAID', 'PENDING')$$);
RESET ROLE;

-- these should all fail: arguments
SELECT n, pg_temp.error_of(statement) FROM (VALUES
  (1, $$SELECT * FROM idempotency.transition(NULL, 'order_no', 'ORD1', 'status', 'PENDING', 'PAID')$$),
  (2, $$SELECT * FROM idempotency.transition('orders', NULL, 'ORD1', 'status', 'PENDING', 'PAID')$$),
  (3, $$SELECT * FROM idempotency.transition('orders', 'order_no', NULL, 'status', 'PENDING', 'PAID')$$),
  (4, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', NULL, 'PENDING', 'PAID')$$),
  (5, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', NULL, 'PAID')$$),
  (6, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', NULL)$$),
  (7, $$SELECT * FROM idempotency.transition('no_such_table', 'order_no', 'ORD1', 'status', 'PENDING', 'PAID')$$),
  (8, $$SELECT * FROM idempotency.transition(1::oid::regclass, 'order_no', 'ORD1', 'status', 'PENDING', 'PAID')$$),
  (9, $$SELECT * FROM idempotency.transition('orders', 'no_such_column', 'ORD1', 'status', 'PENDING', 'PAID')$$),
  (10, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'no_such_column', 'PENDING', 'PAID')$$),
  (11, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'ctid', 'PENDING', 'PAID')$$),
  (12, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', 'PAID', '{"no_such_column": 1}')$$),
  (13, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', 'PAID', '{"status": "PAID"}')$$),
  (14, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD1', 'status', 'PENDING', 'PAID', '[1]')$$),
  (15, $$SELECT * FROM idempotency.transition('orders', 'order_no', 'ORD30', 'status', 'PENDING', 'PAID', '{"amount": "many"}')$$),
  (16, $$SELECT idempotency.define_state_machine(NULL, '{}')$$),
  (17, $$SELECT idempotency.define_state_machine('', '{}')$$),
  (18, $$SELECT idempotency.define_state_machine(repeat('m', 256), '{}')$$),
  (19, $$SELECT idempotency.define_state_machine('bad', NULL)$$),
  (20, $$SELECT idempotency.define_state_machine('bad', '["PENDING"]')$$),
  (21, $$SELECT idempotency.define_state_machine('bad', '"PENDING"')$$),
  (22, $$SELECT idempotency.define_state_machine('bad', '{"PENDING": "PAID"}')$$),
  (23, $$SELECT idempotency.define_state_machine('bad', '{"PENDING": ["PAID", 2]}')$$),
  (24, $$SELECT idempotency.define_state_machine('bad', '{"PENDING": [["PAID"]]}')$$),
  (25, $$SELECT idempotency.enforce_state_machine(NULL, 'status', 'order')$$),
  (26, $$SELECT idempotency.enforce_state_machine('orders', NULL, 'order')$$),
  (27, $$SELECT idempotency.enforce_state_machine('orders', 'status', NULL)$$),
  (28, $$SELECT idempotency.enforce_state_machine('orders', 'status', 'no_such_machine')$$),
  (29, $$SELECT idempotency.enforce_state_machine('orders', 'no_such_column', 'order')$$),
  (30, $$SELECT idempotency.enforce_state_machine('no_such_table', 'status', 'order')$$),
  (31, $$SELECT idempotency.drop_state_machine_enforcement(NULL, 'status')$$),
  (32, $$SELECT idempotency.drop_state_machine_enforcement('orders', NULL)$$),
  (33, $$SELECT idempotency.drop_state_machine_enforcement('orders', 'no_such_column')$$)
) AS cases(n, statement) ORDER BY n;
SELECT count(*) AS bad_machines FROM idempotency.state_machines WHERE name = 'bad';

-- a key column that is not unique
CREATE TABLE lines (order_no text, status text);
INSERT INTO lines VALUES ('A', 'PENDING'), ('A', 'PENDING');
SELECT pg_temp.error_of($$SELECT idempotency.transition('lines', 'order_no', 'A', 'status', 'PENDING', 'PAID')$$);

-- a plain table (no trigger, rule, row security or CHECK): transition()
-- finds the row through the index itself; the outcomes are the UPDATE's
CREATE TABLE tickets (id int PRIMARY KEY, state text NOT NULL UNIQUE, note text);
INSERT INTO tickets VALUES (1, 'a', 'one'), (2, 'b', 'two'), (3, 'c', 'three');
SELECT * FROM idempotency.transition('tickets', 'id', '1', 'state', 'a', 'x');
SELECT * FROM idempotency.transition('tickets', 'id', '1', 'state', 'a', 'x');
SELECT * FROM idempotency.transition('tickets', 'id', '1', 'state', 'a', 'y');
SELECT * FROM idempotency.transition('tickets', 'id', '1', 'state', 'x', 'x');
SELECT * FROM idempotency.transition('tickets', 'id', '1', 'state', 'a', 'a');
SELECT * FROM idempotency.transition('tickets', 'id', '9', 'state', 'a', 'x');
-- the state column is indexed: the new index entry is there, and unique
SET enable_seqscan = off;
SELECT id, note FROM tickets WHERE state = 'x';
SELECT count(*) AS old_entry FROM tickets WHERE state = 'a';
RESET enable_seqscan;
-- inside a transaction, a rolled back call leaves nothing
BEGIN;
SELECT outcome FROM idempotency.transition('tickets', 'id', '2', 'state', 'b', 'z');
SELECT outcome FROM idempotency.transition('tickets', 'id', '2', 'state', 'z', 'w');
SELECT id, state FROM tickets WHERE id = 2;
ROLLBACK;
SELECT id, state FROM tickets ORDER BY id;
-- these should all fail: unique violation, bad key, read-only transaction
SELECT pg_temp.error_of($$SELECT idempotency.transition('tickets', 'id', '2', 'state', 'b', 'c')$$);
SELECT pg_temp.error_of($$SELECT idempotency.transition('tickets', 'id', 'x2', 'state', 'b', 'q')$$);
BEGIN READ ONLY;
SELECT pg_temp.error_of($$SELECT idempotency.transition('tickets', 'id', '2', 'state', 'b', 'q')$$);
ROLLBACK;
-- a CHECK constraint still holds
ALTER TABLE tickets ADD CONSTRAINT no_bad CHECK (state <> 'bad');
SELECT pg_temp.error_of($$SELECT idempotency.transition('tickets', 'id', '2', 'state', 'b', 'bad')$$);
ALTER TABLE tickets DROP CONSTRAINT no_bad;
-- so does a trigger installed after plain calls
SELECT idempotency.define_state_machine('ticket', '{"b": ["c2"]}');
SELECT idempotency.enforce_state_machine('tickets', 'state', 'ticket');
SELECT pg_temp.error_of($$SELECT idempotency.transition('tickets', 'id', '2', 'state', 'b', 'q')$$);
SELECT idempotency.drop_state_machine_enforcement('tickets', 'state');
DELETE FROM idempotency.state_machines WHERE name = 'ticket';
-- a key matching two rows: the UPDATE's rule (two to move, or none and two to read)
CREATE TABLE lines2 (order_no text, status text);
CREATE INDEX ON lines2 (order_no);
INSERT INTO lines2 VALUES ('A', 'PENDING'), ('A', 'PENDING'), ('B', 'PENDING'), ('B', 'PAID');
SELECT pg_temp.error_of($$SELECT idempotency.transition('lines2', 'order_no', 'A', 'status', 'PENDING', 'PAID')$$);
SELECT * FROM idempotency.transition('lines2', 'order_no', 'B', 'status', 'PENDING', 'PAID');
SELECT pg_temp.error_of($$SELECT idempotency.transition('lines2', 'order_no', 'B', 'status', 'PENDING', 'PAID')$$);
SELECT order_no, status, count(*) FROM lines2 GROUP BY 1, 2 ORDER BY 1, 2;
-- the caller's rights: column privileges, no SELECT, row security
CREATE ROLE regress_sm_plain;
GRANT USAGE ON SCHEMA idempotency TO regress_sm_plain;
GRANT EXECUTE ON FUNCTION idempotency.transition(regclass, name, text, name, text, text, jsonb) TO regress_sm_plain;
GRANT SELECT (id, state), UPDATE (state) ON tickets TO regress_sm_plain;
SET ROLE regress_sm_plain;
SELECT * FROM idempotency.transition('tickets', 'id', '3', 'state', 'c', 'd');
RESET ROLE;
REVOKE ALL ON tickets FROM regress_sm_plain;
GRANT UPDATE ON tickets TO regress_sm_plain;
SET ROLE regress_sm_plain;
-- these should all fail
SELECT pg_temp.error_of($$SELECT idempotency.transition('tickets', 'id', '3', 'state', 'd', 'e')$$);
RESET ROLE;
GRANT SELECT ON tickets TO regress_sm_plain;
ALTER TABLE tickets ENABLE ROW LEVEL SECURITY;
CREATE POLICY not_three ON tickets USING (id <> 3);
SET ROLE regress_sm_plain;
SELECT * FROM idempotency.transition('tickets', 'id', '3', 'state', 'd', 'e');
SELECT * FROM idempotency.transition('tickets', 'id', '2', 'state', 'b', 'e');
RESET ROLE;
SELECT id, state FROM tickets ORDER BY id;

DROP TABLE orders, shipments, payments2, codes, "we""ird; schema"."a; DROP TABLE x", x, hostile, lines, lines2, tickets;
DROP SCHEMA "we""ird; schema";
DROP TYPE ship_state;
DROP FUNCTION sneaky();
DROP OWNED BY regress_sm_user, regress_sm_plain;
DROP ROLE regress_sm_user, regress_sm_plain;
