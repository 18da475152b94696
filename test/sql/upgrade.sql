-- Versions and upgrades: 1.0 is the default and its control file is right;
-- a fresh 1.0 followed by ALTER EXTENSION ... UPDATE reaches the default
-- version (a no-op until 1.1 ships as idempotency--1.0--1.1.sql).
SELECT name, default_version, installed_version
  FROM pg_available_extensions WHERE name = 'idempotency';
SELECT version, superuser, trusted, relocatable, schema, requires
  FROM pg_available_extension_versions WHERE name = 'idempotency' AND version = '1.0';
SELECT e.extversion, n.nspname, e.extrelocatable
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'idempotency';
-- the default version is 1.0 itself or reached from 1.0 by update scripts
SELECT a.default_version = '1.0' OR EXISTS (
         SELECT 1 FROM pg_extension_update_paths('idempotency') p
          WHERE p.source = '1.0' AND p.target = a.default_version AND p.path IS NOT NULL)
       AS default_reachable_from_1_0
  FROM pg_available_extensions a WHERE a.name = 'idempotency';

-- every object in the schema belongs to the extension, so that an update
-- script can replace it and DROP EXTENSION removes it
SELECT c.relname AS stray_relation FROM pg_class c
 WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'i', 'p')
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
   AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = c.oid);
SELECT p.oid::regprocedure AS stray_routine FROM pg_proc p
 WHERE p.pronamespace = 'idempotency'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e');

-- install 1.0 in a fresh database and update it to the default version
CREATE DATABASE regress_upgrade;
\c regress_upgrade
CREATE EXTENSION idempotency VERSION '1.0';
SELECT (idempotency.claim('before-update')).outcome;
SET client_min_messages = warning;
ALTER EXTENSION idempotency UPDATE;
RESET client_min_messages;
SELECT e.extversion = a.default_version AS at_default_version
  FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
 WHERE e.extname = 'idempotency';
-- the rows survive the update
SELECT (idempotency.claim('before-update')).outcome;
DROP EXTENSION idempotency;
SELECT count(*) AS tables_left FROM pg_class
 WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'idempotency');
\c contrib_regression
DROP DATABASE regress_upgrade;
