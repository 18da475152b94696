--
-- Section 8: privileges.  Nothing is usable by PUBLIC; grant_usage() hands
-- an application role what it needs.  The functions of sections 1, 2, 4
-- and 5 run their bookkeeping as the extension owner (see
-- src/plan_cache.c), so the role needs no access to the tables.
--
REVOKE ALL ON ALL ROUTINES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA idempotency FROM PUBLIC;
REVOKE ALL ON SCHEMA idempotency FROM PUBLIC;
