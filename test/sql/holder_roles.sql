-- Only the holder acts as the holder.  Two application
-- roles, each given grant_usage: a role that learns or guesses another
-- role's fence cannot complete, fail, checkpoint or release that key
-- (42501 whatever the fence, nothing written), nor mark another role's
-- leased outbox events.  A member of the claiming role may act; keys and
-- events from before 1.7 (no role recorded) take any role's calls.
\set VERBOSITY terse
\i test/sql/include/error_of.sql
CREATE ROLE regress_holder_a;
CREATE ROLE regress_holder_b;
CREATE ROLE regress_holder_a_member IN ROLE regress_holder_a;
SELECT idempotency.grant_usage('regress_holder_a'),
       idempotency.grant_usage('regress_holder_b'),
       idempotency.grant_usage('regress_holder_a_member');
-- where the test hands values from one role to another
CREATE TABLE holder_notes (name text PRIMARY KEY, value bigint);
GRANT ALL ON holder_notes TO PUBLIC;
CREATE FUNCTION pg_temp.note(n text) RETURNS bigint
LANGUAGE sql AS $$ SELECT value FROM public.holder_notes WHERE name = n $$;

-- The issue: app claims "victim" in tenant-A; app2 cannot see the fence,
-- claims a key of its own and tries the number just below its fence.
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'victim', fence FROM idempotency.claim('victim', '{"amount": 10}', 'tenant-A');
SET ROLE regress_holder_b;
SELECT fence IS NULL AS fence_hidden, status FROM idempotency.lookup('victim', 'tenant-A');
INSERT INTO holder_notes
SELECT 'own', fence FROM idempotency.claim('own', '{"amount": 1}', 'tenant-A');
SELECT pg_temp.note('own') - 1 = pg_temp.note('victim') AS guess_is_right;
-- with the right fence, and with a wrong one: the same refusal
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('victim', %s, '{"forged": true}', scope => 'tenant-A')$$,
                               pg_temp.note('own') - 1));
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('victim', %s, '{"forged": true}', scope => 'tenant-A')$$,
                               pg_temp.note('own') - 2));
SELECT pg_temp.error_of(format($$SELECT idempotency.fail('victim', %s, '{"forged": true}', 400, false, 'tenant-A')$$,
                               pg_temp.note('victim')));
SELECT pg_temp.error_of(format($$SELECT idempotency.fail('victim', %s, '{"forged": true}', 500, true, 'tenant-A')$$,
                               pg_temp.note('victim')));
SELECT pg_temp.error_of(format($$SELECT idempotency.checkpoint('victim', %s, 'forged', scope => 'tenant-A')$$,
                               pg_temp.note('victim')));
SELECT pg_temp.error_of(format($$SELECT idempotency.checkpoint('victim', %s, 'forged', scope => 'tenant-A')$$,
                               pg_temp.note('victim') + 1000));
SELECT pg_temp.error_of(format($$SELECT idempotency.release('victim', %s, 'tenant-A')$$,
                               pg_temp.note('victim')));
SELECT pg_temp.error_of(format($$SELECT idempotency.release('victim', %s, 'tenant-A')$$,
                               pg_temp.note('victim') - 1));
-- its own key it completes as usual
SELECT idempotency.complete('own', pg_temp.note('own'), '{"mine": true}', scope => 'tenant-A');
RESET ROLE;
-- nothing of the victim's key changed
SELECT status, fence = pg_temp.note('victim') AS same_fence, recovery_point, response_body,
       holder_role
  FROM idempotency.idempotency_keys WHERE scope = 'tenant-A' AND idempotency_key = 'victim';
-- the real holder completes, and every retry replays its answer
SET ROLE regress_holder_a;
SELECT idempotency.complete('victim', pg_temp.note('victim'), '{"real": true}', scope => 'tenant-A');
SELECT outcome, response_body FROM idempotency.claim('victim', '{"amount": 10}', 'tenant-A');
SET ROLE regress_holder_b;
SELECT outcome, response_body FROM idempotency.claim('victim', '{"amount": 10}', 'tenant-A');
-- a finished key of another role: still 42501, whatever the fence
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('victim', %s, '{"forged": true}', scope => 'tenant-A')$$,
                               pg_temp.note('victim')));
RESET ROLE;

-- With release instead, the retry would run the request again: the key
-- stays held, and the holder's retry is told in_progress.
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'victim-2', fence FROM idempotency.claim('victim-2', '{"amount": 20}', 'tenant-A');
SET ROLE regress_holder_b;
SELECT pg_temp.error_of(format($$SELECT idempotency.release('victim-2', %s, 'tenant-A')$$,
                               pg_temp.note('victim-2')));
SELECT outcome FROM idempotency.claim('victim-2', '{"amount": 20}', 'tenant-A');
SET ROLE regress_holder_a;
SELECT outcome FROM idempotency.claim('victim-2', '{"amount": 20}', 'tenant-A');
SELECT idempotency.release('victim-2', pg_temp.note('victim-2'), 'tenant-A');
SELECT outcome FROM idempotency.claim('victim-2', '{"amount": 20}', 'tenant-A');
RESET ROLE;

-- The statement path (a table with a statement trigger takes the UPDATE
-- statement, not the direct row write): the same refusals.
CREATE FUNCTION pg_temp.nothing() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER holder_roles_statement AFTER UPDATE ON idempotency.idempotency_keys
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.nothing();
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'victim-3', fence FROM idempotency.claim('victim-3', NULL, 'tenant-A');
SET ROLE regress_holder_b;
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('victim-3', %s, '{"forged": true}', scope => 'tenant-A')$$,
                               pg_temp.note('victim-3')));
SELECT pg_temp.error_of(format($$SELECT idempotency.fail('victim-3', %s, scope => 'tenant-A')$$,
                               pg_temp.note('victim-3') + 1));
SET ROLE regress_holder_a;
SELECT idempotency.complete('victim-3', pg_temp.note('victim-3'), '{"real": 3}', scope => 'tenant-A');
RESET ROLE;
DROP TRIGGER holder_roles_statement ON idempotency.idempotency_keys;
SELECT response_body FROM idempotency.idempotency_keys WHERE scope = 'tenant-A' AND idempotency_key = 'victim-3';

-- A member of the claiming role may act as the holder; so may a superuser.
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'shared', fence FROM idempotency.claim('shared', NULL, 'tenant-A');
INSERT INTO holder_notes
SELECT 'by-superuser', fence FROM idempotency.claim('by-superuser', NULL, 'tenant-A');
SET ROLE regress_holder_a_member;
SELECT idempotency.checkpoint('shared', pg_temp.note('shared'), 'charged', scope => 'tenant-A');
SELECT idempotency.complete('shared', pg_temp.note('shared'), '{"by": "member"}', scope => 'tenant-A');
RESET ROLE;
SELECT idempotency.complete('by-superuser', pg_temp.note('by-superuser'), '{"by": "superuser"}', scope => 'tenant-A');
SELECT idempotency_key, status, recovery_point, response_body, holder_role
  FROM idempotency.idempotency_keys
 WHERE scope = 'tenant-A' AND idempotency_key IN ('shared', 'by-superuser') ORDER BY 1;

-- A key claimed before 1.7 has no holder_role: any role's holder calls
-- with its fence work, as before.
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'legacy', fence FROM idempotency.claim('legacy', NULL, 'tenant-A');
RESET ROLE;
UPDATE idempotency.idempotency_keys SET holder_role = NULL, holder_role_name = NULL
 WHERE scope = 'tenant-A' AND idempotency_key = 'legacy';
SET ROLE regress_holder_b;
SELECT idempotency.complete('legacy', pg_temp.note('legacy'), '{"by": "b"}', scope => 'tenant-A');
-- an expired key is gone for every role: lease lost, not a refusal
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'expired', fence FROM idempotency.claim('expired', NULL, 'tenant-A');
RESET ROLE;
UPDATE idempotency.idempotency_keys
   SET locked_until = now() - interval '1 hour', expires_at = now() - interval '1 second'
 WHERE scope = 'tenant-A' AND idempotency_key = 'expired';
SET ROLE regress_holder_b;
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('expired', %s, '{}', scope => 'tenant-A')$$,
                               pg_temp.note('expired')));
RESET ROLE;

-- A claim that takes a key over records the new holder: the old holder,
-- of another role, is refused (not only lease lost), the new one acts.
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'taken-over', fence FROM idempotency.claim('taken-over', '{"n": 1}', 'tenant-A');
RESET ROLE;
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE scope = 'tenant-A' AND idempotency_key = 'taken-over';
SET ROLE regress_holder_b;
INSERT INTO holder_notes
SELECT 'taken-over-b', fence FROM idempotency.claim('taken-over', '{"n": 1}', 'tenant-A');
SET ROLE regress_holder_a;
SELECT pg_temp.error_of(format($$SELECT idempotency.complete('taken-over', %s, '{"by": "a"}', scope => 'tenant-A')$$,
                               pg_temp.note('taken-over')));
SET ROLE regress_holder_b;
SELECT idempotency.complete('taken-over', pg_temp.note('taken-over-b'), '{"by": "b"}', scope => 'tenant-A');
RESET ROLE;

-- execute() records its caller as the holder of the key it creates.
SET ROLE regress_holder_a;
SELECT outcome, response_body FROM idempotency.execute('ex-1', '{}', 'SELECT 1', scope => 'tenant-A');
RESET ROLE;
SELECT idempotency_key, status, holder_role FROM idempotency.idempotency_keys
 WHERE scope = 'tenant-A' AND idempotency_key IN ('ex-1', 'legacy', 'taken-over') ORDER BY 1;

-- Outbox: a relay role's leased events cannot be marked by another role,
-- whatever lease token it passes; the call changes nothing.
DELETE FROM idempotency.outbox_events;
SELECT count(*) FROM (
  SELECT idempotency.enqueue_event('holder', 'x' || i, 'made', '{}') FROM generate_series(1, 4) i) e;
-- the ids of x1 to x4, for the roles
INSERT INTO holder_notes
SELECT 'event-' || aggregate_id, id FROM idempotency.outbox_events WHERE aggregate_type = 'holder';
SET ROLE regress_holder_a;
INSERT INTO holder_notes
SELECT 'token-a', max(lease_token) FROM idempotency.claim_events(2);
SET ROLE regress_holder_b;
INSERT INTO holder_notes
SELECT 'token-b', max(lease_token) FROM idempotency.claim_events(1);
SELECT regexp_replace(pg_temp.error_of(format($$SELECT idempotency.mark_published(ARRAY[%s, %s])$$,
                                              pg_temp.note('event-x1'), pg_temp.note('event-x2'))),
                      'event \d+', 'event N');
SELECT regexp_replace(pg_temp.error_of(format($$SELECT idempotency.mark_published(ARRAY[%s], %s)$$,
                                              pg_temp.note('event-x1'), pg_temp.note('token-a'))),
                      'event \d+', 'event N');
SELECT regexp_replace(pg_temp.error_of(format($$SELECT idempotency.mark_failed(ARRAY[%s], 'forged', %s)$$,
                                              pg_temp.note('event-x2'), pg_temp.note('token-a'))),
                      'event \d+', 'event N');
-- one of its own and one of the other role's: refused, its own unmarked
SELECT regexp_replace(pg_temp.error_of(format($$SELECT idempotency.mark_published(ARRAY[%s, %s], %s)$$,
                                              pg_temp.note('event-x3'), pg_temp.note('event-x1'),
                                              pg_temp.note('token-b'))),
                      'event \d+', 'event N');
RESET ROLE;
SELECT aggregate_id, published_at IS NOT NULL AS published, attempts, last_error, lease_role
  FROM idempotency.outbox_events WHERE aggregate_type = 'holder' ORDER BY id;
-- each relay marks its own; an event never leased since 1.7 takes any role's mark
SET ROLE regress_holder_b;
SELECT idempotency.mark_published(ARRAY[pg_temp.note('event-x3')], pg_temp.note('token-b'));
SELECT idempotency.mark_published(ARRAY[pg_temp.note('event-x4')]);
SET ROLE regress_holder_a_member;
SELECT idempotency.mark_failed(ARRAY[pg_temp.note('event-x2')], 'retry later', pg_temp.note('token-a'));
SET ROLE regress_holder_a;
SELECT idempotency.mark_published(ARRAY[pg_temp.note('event-x1')], pg_temp.note('token-a'));
RESET ROLE;
SELECT aggregate_id, published_at IS NOT NULL AS published, attempts, last_error, lease_role
  FROM idempotency.outbox_events WHERE aggregate_type = 'holder' ORDER BY id;

DELETE FROM idempotency.outbox_events WHERE aggregate_type = 'holder';
DELETE FROM idempotency.idempotency_keys WHERE scope = 'tenant-A';
DROP TABLE holder_notes;
DROP OWNED BY regress_holder_a, regress_holder_b, regress_holder_a_member;
DROP ROLE regress_holder_a_member, regress_holder_a, regress_holder_b;
