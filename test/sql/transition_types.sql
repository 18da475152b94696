-- transition() on keys and states of the built-in types that tables
-- usually key and state by, and of a domain and an enum: the key is
-- compared with the equality operator of its type's default B-tree
-- operator class, as doc/reference.md says.  The portable edition knows
-- that operator for these built-in types without reading the catalog
-- (sql/portable/transition.sql); the catalog says it is pg_catalog.= for
-- each of them.
\set VERBOSITY terse
SELECT t::regtype AS type,
       (SELECT format('%s.%s', n.nspname, o.oprname)
          FROM pg_opclass c
          JOIN pg_am a ON a.oid = c.opcmethod AND a.amname = 'btree'
          JOIN pg_amop ao ON ao.amopfamily = c.opcfamily AND ao.amoplefttype = c.opcintype
                         AND ao.amoprighttype = c.opcintype AND ao.amopstrategy = 3
          JOIN pg_operator o ON o.oid = ao.amopopr
          JOIN pg_namespace n ON n.oid = o.oprnamespace
         WHERE c.opcdefault
           AND (c.opcintype = t
                OR EXISTS (SELECT FROM pg_cast k WHERE k.castsource = t
                             AND k.casttarget = c.opcintype AND k.castmethod = 'b'))
         ORDER BY c.opcintype <> t
         LIMIT 1) AS equality
  FROM unnest(ARRAY['int2', 'int4', 'int8', 'numeric', 'text', 'varchar', 'bpchar', 'name',
                    '"char"', 'uuid', 'bool', 'oid', 'bytea', 'date', 'timestamp',
                    'timestamptz']::regtype[]::oid[]) WITH ORDINALITY AS u(t, n)
 ORDER BY n;

-- one table per key type, each with a row keyed by a value of that type
CREATE TABLE tt_keys (type text, key text, other text);
INSERT INTO tt_keys VALUES
  ('int2', '7', '8'), ('int4', '7', '8'), ('int8', '7000000000', '7000000001'),
  ('numeric', '1.50', '1.5000001'), ('text', 'k-1', 'k-2'), ('varchar(10)', 'k-1', 'k-2'),
  ('char(5)', 'k-1', 'k-2'), ('name', 'k-1', 'k-2'), ('"char"', 'k', 'l'),
  ('uuid', '00000000-0000-0000-0000-000000000007', '00000000-0000-0000-0000-000000000008'),
  ('bool', 'true', 'false'), ('oid', '7', '8'), ('bytea', '\x07', '\x08'),
  ('date', '2024-01-07', '2024-01-08'), ('timestamp', '2024-01-07 10:00', '2024-01-07 10:01'),
  ('timestamptz', '2024-01-07 10:00+00', '2024-01-07 10:01+00');
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT row_number() OVER () AS i, * FROM tt_keys LOOP
        EXECUTE format('CREATE TABLE tt_%s (k %s PRIMARY KEY, state text NOT NULL)', r.i, r.type);
        EXECUTE format('INSERT INTO tt_%s VALUES (%L, %L)', r.i, r.key, 'NEW');
    END LOOP;
END
$$;
-- applied, already, rejected (from another state) and not_found, per type;
-- numeric 1.5 is the key 1.50 (equal, not the same text)
SELECT k.type,
       (idempotency.transition(format('tt_%s', k.i)::regclass, 'k', k.key, 'state', 'NEW', 'DONE')).outcome AS first,
       (idempotency.transition(format('tt_%s', k.i)::regclass, 'k', k.key, 'state', 'NEW', 'DONE')).outcome AS again,
       (idempotency.transition(format('tt_%s', k.i)::regclass, 'k', k.key, 'state', 'NEW', 'GONE')).outcome AS other,
       (idempotency.transition(format('tt_%s', k.i)::regclass, 'k', k.other, 'state', 'NEW', 'DONE')).outcome AS missing
  FROM (SELECT row_number() OVER () AS i, * FROM tt_keys) k
 ORDER BY k.i;
SELECT (idempotency.transition('tt_4', 'k', '1.5', 'state', 'DONE', 'PAID')).outcome AS numeric_by_value;

-- states of a domain over text, an enum and varchar: the same outcomes
CREATE DOMAIN tt_state AS text CHECK (VALUE <> '');
CREATE TYPE tt_phase AS ENUM ('NEW', 'PAID', 'SHIPPED');
CREATE TABLE tt_states (id int PRIMARY KEY, d tt_state NOT NULL, e tt_phase NOT NULL, v varchar(8) NOT NULL);
INSERT INTO tt_states VALUES (1, 'NEW', 'NEW', 'NEW');
SELECT c AS state_column,
       (idempotency.transition('tt_states', 'id', '1', c, 'NEW', 'PAID')).outcome AS first,
       (idempotency.transition('tt_states', 'id', '1', c, 'NEW', 'PAID')).outcome AS again,
       (idempotency.transition('tt_states', 'id', '1', c, 'NEW', 'SHIPPED')).outcome AS other
  FROM unnest(ARRAY['d', 'e', 'v']) AS c;
-- a key of a type without a B-tree class is refused (this should fail)
CREATE TABLE tt_points (k point, state text);
SELECT idempotency.transition('tt_points', 'k', '(1,1)', 'state', 'NEW', 'DONE');

DO $$
DECLARE
    n bigint;
BEGIN
    FOR n IN 1 .. (SELECT count(*) FROM tt_keys) LOOP
        EXECUTE format('DROP TABLE tt_%s', n);
    END LOOP;
END
$$;
DROP TABLE tt_keys, tt_states, tt_points;
DROP DOMAIN tt_state;
DROP TYPE tt_phase;
