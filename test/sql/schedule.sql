-- schedule_cleanup() / unschedule_cleanup().  The test cluster runs pg_cron
-- in database "postgres" (cron.database_name), so from this database the
-- job is written there over a local connection.
\set VERBOSITY sqlstate
SELECT current_setting('cron.database_name') <> current_database() AS pg_cron_elsewhere;

SELECT idempotency.schedule_cleanup() AS jobid \gset
SELECT :jobid > 0 AS scheduled;
-- again, with another schedule: the same job
SELECT idempotency.schedule_cleanup('17 3 * * *') = :jobid AS same_job;

\c postgres
SELECT jobname, schedule, command, database = 'contrib_regression' AS runs_here, active
  FROM cron.job WHERE jobid = :jobid;
\c contrib_regression

-- these should all fail
SELECT idempotency.schedule_cleanup(NULL);
SELECT idempotency.schedule_cleanup('');
SELECT idempotency.schedule_cleanup('every now and then');

SELECT idempotency.unschedule_cleanup() AS removed;
SELECT idempotency.unschedule_cleanup() AS removed_again;
\c postgres
SELECT count(*) AS jobs_left FROM cron.job WHERE jobname = 'idempotency-cleanup';
\c contrib_regression
