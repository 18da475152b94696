-- The bounds of claim_events and leases taken back (doc/reference.md,
-- "Outbox and inbox", "Threat model").  Before 1.8 one relay could run
-- claim_events(2147483647, '100 years') and lease every pending event for
-- a century: the other relays got nothing, and no function took the
-- leases back.  Now a batch above idempotency.outbox_max_batch or a lease
-- above idempotency.outbox_max_lease is refused (22023) before anything
-- is written; a relay's role cannot lift the bounds (the C refuses its
-- SET with 42501; the portable edition takes the SET and ignores it, its
-- alternative output in test/portable/expected/); only the database's
-- setting lifts them; release_event_leases, for operators only, hands a
-- relay's leases back, and another relay then gets the events in order.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
-- the SQLSTATE, message and detail of a refused statement
CREATE FUNCTION pg_temp.refusal(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  detail text;
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RETURN SQLSTATE || ': ' || SQLERRM || ' / ' || detail;
END $$;
TRUNCATE idempotency.outbox_events RESTART IDENTITY;
CREATE ROLE regress_relay_greedy;
CREATE ROLE regress_relay_honest;
CREATE ROLE regress_relay_nobody;
SELECT idempotency.grant_usage('regress_relay_greedy'),
       idempotency.grant_usage('regress_relay_honest');
-- aggregate A: events 1, 2, 3; aggregate B: event 4
SELECT idempotency.enqueue_event('order', 'A', 'a' || g, '{}') FROM generate_series(1, 3) g;
SELECT idempotency.enqueue_event('order', 'B', 'b1', '{}');

-- the greedy call, and each bound alone: refused, naming the setting
SET ROLE regress_relay_greedy;
SELECT pg_temp.refusal($$SELECT idempotency.claim_events(2147483647, '100 years')$$);
SELECT pg_temp.refusal($$SELECT idempotency.claim_events(10001)$$);
SELECT pg_temp.refusal($$SELECT idempotency.claim_events(1, '1 hour 1 second')$$);
-- a bad argument keeps its own error, first
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(0, '100 years')$$);
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(20000, '-1 second')$$);
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(NULL, '100 years')$$);
-- the relay's role cannot lift them: its SET is refused (C) or ignored
-- (portable)
SELECT pg_temp.error_of($$SET idempotency.outbox_max_batch = 2147483647$$);
SELECT pg_temp.error_of($$SET idempotency.outbox_max_lease = '100 years'$$);
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(2147483647, '100 years')$$);
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(10001)$$);
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(1, '2 hours')$$);
RESET ROLE;
RESET idempotency.outbox_max_batch;
RESET idempotency.outbox_max_lease;
-- nothing was written: no lease, no takeover, no token drawn
SELECT count(*) FILTER (WHERE locked_until IS NOT NULL) AS leased,
       count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead,
       count(lease_token) AS tokens
  FROM idempotency.outbox_events;

-- a session may tighten its own bounds
SET idempotency.outbox_max_batch = 2;
SET idempotency.outbox_max_lease = '1 minute';
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(3)$$);
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(1, '2 minutes')$$);
RESET idempotency.outbox_max_batch;
RESET idempotency.outbox_max_lease;

-- at the bounds, the greedy relay takes everything, for an hour
SET ROLE regress_relay_greedy;
SELECT id, aggregate_id FROM idempotency.claim_events(10000, '1 hour');
SET ROLE regress_relay_honest;
SELECT count(*) AS honest_gets FROM idempotency.claim_events(10);

-- no relay may take leases back: the function is the operators'
SELECT pg_temp.error_of($$SELECT idempotency.release_event_leases('regress_relay_greedy')$$);
SET ROLE regress_relay_greedy;
SELECT pg_temp.error_of($$SELECT idempotency.release_event_leases()$$);
SET ROLE regress_relay_nobody;
SELECT pg_temp.error_of($$SELECT idempotency.release_event_leases()$$);
RESET ROLE;
SELECT has_function_privilege('public', 'idempotency.release_event_leases(regrole,interval)', 'EXECUTE') AS public_may,
       has_function_privilege('regress_relay_honest', 'idempotency.release_event_leases(regrole,interval)', 'EXECUTE') AS app_may;

-- the operator: another role's leases, or leases shorter than asked, stay
SELECT idempotency.release_event_leases('regress_relay_honest') AS honest_leases;
SELECT idempotency.release_event_leases(NULL, '2 hours') AS leases_over_2_hours;
SELECT idempotency.release_event_leases('regress_relay_greedy', '30 minutes') AS greedy_leases;
SELECT id, locked_until <= clock_timestamp() AS lease_ended, attempts, takeovers, lease_role
  FROM idempotency.outbox_events ORDER BY id;

-- the honest relay gets them now, in order: A's first two, then B's
-- event, while A's third waits behind the two it holds
SET ROLE regress_relay_honest;
SELECT id, aggregate_id, takeovers, lease_role FROM idempotency.claim_events(2);
SELECT id, aggregate_id FROM idempotency.claim_events(10);
SELECT count(*) AS held_back FROM idempotency.claim_events(10);
-- the greedy relay can no longer mark what it held
SET ROLE regress_relay_greedy;
SELECT pg_temp.error_of($$SELECT idempotency.mark_published(ARRAY[1::bigint])$$);
RESET ROLE;
-- expired leases are not counted; all live ones of any role are
SELECT idempotency.release_event_leases() AS all_live_leases;
SELECT idempotency.release_event_leases() AS none_left;

-- an operator lifts the bounds for the database: sessions from then on
-- may claim more, in both editions
SELECT format('ALTER DATABASE %I SET idempotency.outbox_max_batch = 20000', current_database()) \gexec
SELECT format('ALTER DATABASE %I SET idempotency.outbox_max_lease = %L', current_database(), '2 hours') \gexec
\c
\set VERBOSITY terse
\i test/sql/include/error_of.sql
SET ROLE regress_relay_honest;
SELECT id FROM idempotency.claim_events(20000, '2 hours');
SELECT pg_temp.error_of($$SELECT idempotency.claim_events(20001)$$);
RESET ROLE;
SELECT format('ALTER DATABASE %I RESET idempotency.outbox_max_batch', current_database()) \gexec
SELECT format('ALTER DATABASE %I RESET idempotency.outbox_max_lease', current_database()) \gexec

TRUNCATE idempotency.outbox_events;
DROP OWNED BY regress_relay_greedy, regress_relay_honest, regress_relay_nobody;
DROP ROLE regress_relay_greedy, regress_relay_honest, regress_relay_nobody;
