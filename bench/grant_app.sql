--
-- bench/grant_app.sql: what an application role gets, so that the
-- workloads run as one (a role given grant_usage, no superuser), and the
-- baselines as the same role.  Run by the owner of the extension and of
-- schema bench: psql -v app=ROLE -f bench/grant_app.sql.
--
SELECT idempotency.grant_usage(:'app');
GRANT USAGE ON SCHEMA bench TO :"app";
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA bench TO :"app";
GRANT USAGE ON ALL SEQUENCES IN SCHEMA bench TO :"app";
