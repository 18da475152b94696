-- test/pooler/pgbench_claim.sql: a pgbench script (test/pooler/sql_api.sh)
-- claiming random keys of run :run, the holder writing its business row
-- and completing in one transaction, as an application behind a pooler
-- does.  Variables hold numbers only, so that -M simple (which pastes the
-- value into the text) and -M extended and prepared (which bind it) read
-- the same statements.
\set k random(1, 100)
SELECT (outcome IN ('claimed', 'resumed'))::int AS mine, coalesce(fence, 0) AS f
  FROM idempotency.claim('pgb-' || CAST(:run AS int) || '-' || CAST(:k AS int), '{"n": 1}',
                         lease => '1 minute') \gset
\if :mine
BEGIN;
INSERT INTO pgb_business (k) VALUES ('pgb-' || CAST(:run AS int) || '-' || CAST(:k AS int));
SELECT idempotency.complete('pgb-' || CAST(:run AS int) || '-' || CAST(:k AS int),
                            CAST(:f AS bigint), '{"ok": true}');
COMMIT;
\endif
