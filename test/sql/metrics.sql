-- Outcome counts per scope (doc/reference.md, "Metrics"):
-- idempotency.metrics(), metrics_reset() and the view.  test/run.sh
-- preloads the library, which the counts need; test/t/110_metrics.pl
-- checks a server without it (55000), the scopes beyond metrics_max_scopes,
-- other databases and a hot standby.  Other tests count in this database
-- too, so this one counts in scopes of its own.
\set VERBOSITY sqlstate
-- the portable edition has no counts (0A000): nothing more to test there
SELECT count(*) > 0 AS counting FROM idempotency.metrics();
\if :ERROR
\quit
\endif

CREATE FUNCTION pg_temp.counts(VARIADIC scopes text[])
RETURNS TABLE (scope text, claimed bigint, replay bigint, mismatch bigint,
               in_progress bigint, resumed bigint, gone bigint,
               lease_lost bigint, purged bigint)
LANGUAGE sql AS $$
  SELECT m.scope, m.claimed, m.replay, m.mismatch, m.in_progress, m.resumed,
         m.gone, m.lease_lost, m.purged
    FROM idempotency.metrics m
   WHERE m.scope = ANY (scopes)
   ORDER BY m.scope COLLATE "C"
$$;
\i test/sql/include/wal_records.sql

-- a scope has no row until a call counts in it
SELECT count(*) AS rows_before FROM idempotency.metrics
 WHERE scope IN ('metrics a', 'metrics b');
SELECT now() AS started \gset

-- every outcome of a claim, in scope "metrics a"
SELECT outcome FROM idempotency.claim('k1', '{"n": 1}', 'metrics a');      -- claimed
SELECT outcome FROM idempotency.claim('k1', '{"n": 1}', 'metrics a');      -- in_progress
SELECT outcome FROM idempotency.claim('k1', '{"n": 2}', 'metrics a');      -- mismatch
SELECT idempotency.complete('k1', fence, '{"ok": true}', scope => 'metrics a')
  FROM idempotency.idempotency_keys WHERE scope = 'metrics a' AND idempotency_key = 'k1';
SELECT outcome FROM idempotency.claim('k1', '{"n": 1}', 'metrics a');      -- replay
SELECT outcome FROM idempotency.claim('k2', NULL, 'metrics a');           -- claimed
SELECT fence AS k2_fence FROM idempotency.idempotency_keys
 WHERE scope = 'metrics a' AND idempotency_key = 'k2' \gset
-- its holder crashed: the lease ran out
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE scope = 'metrics a' AND idempotency_key = 'k2';
SELECT outcome, attempts FROM idempotency.claim('k2', NULL, 'metrics a'); -- resumed
-- these should all fail with 55000: the old holder's fence lost the lease
-- (lease_lost)
SELECT idempotency.complete('k2', :k2_fence, '{}', scope => 'metrics a');
SELECT idempotency.fail('k2', :k2_fence, scope => 'metrics a');
SELECT idempotency.checkpoint('k2', :k2_fence, 'step', scope => 'metrics a');
SELECT idempotency.release('k2', :k2_fence, 'metrics a');
-- an answer past its response_ttl
SELECT outcome FROM idempotency.claim('k4', NULL, 'metrics a');           -- claimed
SELECT idempotency.complete('k4', fence, '{}', scope => 'metrics a', response_ttl => '1 hour')
  FROM idempotency.idempotency_keys WHERE scope = 'metrics a' AND idempotency_key = 'k4';
UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second'
 WHERE scope = 'metrics a' AND idempotency_key = 'k4';
SELECT outcome FROM idempotency.claim('k4', NULL, 'metrics a');           -- gone

-- execute() counts as a claim, in scope "metrics b"
SELECT outcome FROM idempotency.execute('e1', '{}', 'SELECT 1', scope => 'metrics b');
SELECT outcome FROM idempotency.execute('e1', '{}', 'SELECT 1', scope => 'metrics b');
SELECT outcome FROM idempotency.execute('e1', '{"x": 1}', 'SELECT 1', scope => 'metrics b');
SELECT outcome FROM idempotency.execute('e2', '{}', 'SELECT 1', scope => 'metrics b',
                                        response_ttl => '1 hour');
UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second'
 WHERE scope = 'metrics b' AND idempotency_key = 'e2';
SELECT outcome FROM idempotency.execute('e2', '{}', 'SELECT 1', scope => 'metrics b');

SELECT * FROM pg_temp.counts('metrics a', 'metrics b');
SELECT scope, reset_at >= :'started' AS counting_since_first_call
  FROM idempotency.metrics WHERE scope IN ('metrics a', 'metrics b')
 ORDER BY scope COLLATE "C";

-- a call is counted when it decides, even if its transaction rolls back
BEGIN;
SELECT outcome FROM idempotency.claim('rolled-back', NULL, 'metrics b');
ROLLBACK;
SELECT claimed FROM pg_temp.counts('metrics b');

-- replays write nothing, counted or not; a claim that creates a key does
SELECT pg_temp.wal_records($$SELECT idempotency.claim('k1', '{"n": 1}', 'metrics a')$$) AS replay_wal_records;
SELECT pg_temp.wal_records($$SELECT idempotency.execute('e1', '{}', 'SELECT 1', scope => 'metrics b')$$) AS execute_replay_wal_records;
SELECT pg_temp.wal_records($$SELECT idempotency.claim('k3', NULL, 'metrics a')$$) > 0 AS claim_writes_wal;
-- and are counted in read-only transactions (as on a hot standby:
-- test/t/110_metrics.pl)
BEGIN;
SET TRANSACTION READ ONLY;
SELECT outcome FROM idempotency.claim('k1', '{"n": 1}', 'metrics a');
SELECT outcome FROM idempotency.claim('k1', '{"n": 3}', 'metrics a');
SELECT replay, mismatch FROM pg_temp.counts('metrics a');
-- a reset writes nothing either
SELECT idempotency.metrics_reset('metrics a');
SELECT replay, mismatch FROM pg_temp.counts('metrics a');
COMMIT;

-- purge counts the keys it deletes in the row of scope NULL (its delete
-- does not learn their scopes): other tests' expired keys go too
UPDATE idempotency.idempotency_keys
   SET expires_at = now() - interval '1 second', locked_until = NULL
 WHERE scope IN ('metrics a', 'metrics b');
SELECT purged AS purged_before FROM idempotency.metrics WHERE scope IS NULL \gset
SELECT deleted AS keys_deleted FROM idempotency.purge_expired_batch()
 WHERE relation = 'idempotency_keys' \gset
SELECT :keys_deleted >= 6 AS deleted_ours, purged - :purged_before = :keys_deleted AS all_counted
  FROM idempotency.metrics WHERE scope IS NULL;
SELECT scope, purged FROM pg_temp.counts('metrics a', 'metrics b');
DELETE FROM idempotency.idempotency_keys WHERE scope IN ('metrics a', 'metrics b');

-- reset: one scope, then all of them (the row of scope NULL too)
SELECT now() AS before_reset \gset
SELECT idempotency.metrics_reset('metrics b');
SELECT * FROM pg_temp.counts('metrics a', 'metrics b');
SELECT scope, reset_at >= :'before_reset' AS reset
  FROM idempotency.metrics WHERE scope IN ('metrics a', 'metrics b')
 ORDER BY scope COLLATE "C";
SELECT idempotency.metrics_reset('metrics unknown');   -- no row: nothing to do
SELECT count(*) AS unknown_rows FROM idempotency.metrics WHERE scope = 'metrics unknown';
SELECT idempotency.metrics_reset();
SELECT bool_and(claimed + replay + mismatch + in_progress + resumed + gone
                + lease_lost + purged = 0) AS all_zero,
       bool_and(reset_at >= :'before_reset') AS all_reset,
       count(*) FILTER (WHERE scope IS NULL) AS null_scope_rows
  FROM idempotency.metrics WHERE scope IN ('metrics a', 'metrics b') OR scope IS NULL;
-- these should all fail with 22023
SELECT idempotency.metrics_reset(repeat('s', 256));

-- idempotency.track_outcomes = off: calls are not counted (the bench
-- measures what counting costs this way); only a superuser, or a role
-- granted SET on it, may turn it off
SET idempotency.track_outcomes = off;
SELECT outcome FROM idempotency.claim('k5', NULL, 'metrics b');           -- claimed
SELECT outcome FROM idempotency.claim('k5', NULL, 'metrics b');           -- in_progress
SELECT claimed, in_progress FROM pg_temp.counts('metrics b');
RESET idempotency.track_outcomes;
SELECT outcome FROM idempotency.claim('k5', NULL, 'metrics b');           -- in_progress
SELECT claimed, in_progress FROM pg_temp.counts('metrics b');
CREATE ROLE regress_metrics_hider;
SET ROLE regress_metrics_hider;
-- this should fail with 42501
SET idempotency.track_outcomes = off;
RESET ROLE;
GRANT SET ON PARAMETER idempotency.track_outcomes TO regress_metrics_hider;
SET ROLE regress_metrics_hider;
SET idempotency.track_outcomes = off;
SHOW idempotency.track_outcomes;
RESET idempotency.track_outcomes;
RESET ROLE;
REVOKE SET ON PARAMETER idempotency.track_outcomes FROM regress_metrics_hider;
DROP ROLE regress_metrics_hider;

-- the view and the functions are for operators: not PUBLIC's, not in
-- grant_usage(); a monitoring role needs the three grants of
-- doc/operations.md
CREATE ROLE regress_metrics_app;
CREATE ROLE regress_metrics_monitor;
SELECT idempotency.grant_usage('regress_metrics_app');
SELECT r AS role,
       has_function_privilege(r, 'idempotency.metrics()', 'EXECUTE') AS may_call,
       has_function_privilege(r, 'idempotency.metrics_reset(text)', 'EXECUTE') AS may_reset,
       has_table_privilege(r, 'idempotency.metrics', 'SELECT') AS may_select
  FROM unnest(ARRAY['regress_metrics_app', 'regress_metrics_monitor']) r;
GRANT USAGE ON SCHEMA idempotency TO regress_metrics_monitor;
GRANT SELECT ON idempotency.metrics TO regress_metrics_monitor;
SET ROLE regress_metrics_monitor;
-- these should all fail with 42501: the view calls metrics() with the
-- caller's rights
SELECT count(*) FROM idempotency.metrics;
SELECT idempotency.metrics_reset();
RESET ROLE;
GRANT EXECUTE ON FUNCTION idempotency.metrics() TO regress_metrics_monitor;
SET ROLE regress_metrics_monitor;
SELECT count(*) > 0 AS monitor_reads FROM idempotency.metrics;
RESET ROLE;
DROP OWNED BY regress_metrics_app, regress_metrics_monitor;
DROP ROLE regress_metrics_app, regress_metrics_monitor;

-- scopes as a boundary (test/sql/scope_grants.sql): a role restricted to
-- scopes sees their rows only, not the row of scope NULL, and resets
-- their counts only
CREATE ROLE regress_metrics_scoped;
GRANT USAGE ON SCHEMA idempotency TO regress_metrics_scoped;
GRANT EXECUTE ON FUNCTION idempotency.metrics(), idempotency.metrics_reset(text) TO regress_metrics_scoped;
GRANT SELECT ON idempotency.metrics TO regress_metrics_scoped;
SELECT idempotency.grant_scopes('regress_metrics_scoped', ARRAY['metrics a']);
SELECT count(*) > 1 AS owner_sees_more FROM idempotency.metrics
 WHERE scope IS DISTINCT FROM 'metrics a';
SET ROLE regress_metrics_scoped;
SELECT scope FROM idempotency.metrics ORDER BY 1;
SELECT scope FROM idempotency.metrics() ORDER BY 1;
-- these should fail with 42501
SELECT idempotency.metrics_reset('metrics b');
SELECT idempotency.metrics_reset();
SELECT idempotency.metrics_reset('metrics a');
RESET ROLE;
SELECT idempotency.revoke_scopes('regress_metrics_scoped');
DROP OWNED BY regress_metrics_scoped;
DROP ROLE regress_metrics_scoped;
