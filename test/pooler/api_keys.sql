-- test/pooler/api_keys.sql: one client's calls of the SQL API, each in a
-- transaction of its own (psql's autocommit) unless it says BEGIN, as a
-- client behind a transaction pooler makes them; its keys, tokens, rows
-- and event ids start with :p.  test/pooler/sql_api.sh runs it on a direct
-- connection and, many clients at once, through PgBouncer, and compares
-- what each printed (with :p replaced).  Nothing printed depends on time
-- or on the server connection.
\set ON_ERROR_STOP 0
\set VERBOSITY verbose
\pset null '(null)'
\set k_pay :p'-pay'
\set k_fail :p'-fail'
\set k_rel :p'-release'
\set k_lost :p'-lost'
\set k_gone :p'-gone'
\set k_exec :p'-exec'
\set k_local :p'-local'
\set k_after :p'-after'

\echo -- claim, in_progress, mismatch, complete, replay
SELECT outcome, fence AS f_pay FROM idempotency.claim(:'k_pay', '{"amount": 5}', lease => '1 minute') \gset
\echo :outcome
SELECT outcome, status, attempts, retry_after > interval '50 seconds' AS lease_left
  FROM idempotency.claim(:'k_pay', '{"amount": 5}');
SELECT outcome FROM idempotency.claim(:'k_pay', '{"amount": 6}');
SELECT idempotency.complete(:'k_pay', :f_pay, '{"paid": 5}', 201);
SELECT outcome, status, response_code, response_body, fence IS NULL AS no_fence
  FROM idempotency.claim(:'k_pay', '{"amount": 5}');
SELECT outcome, response_code FROM idempotency.claim(:'k_pay', '{"amount": 5}', wait => '1 second');
SELECT status, response_code, attempts FROM idempotency.lookup(:'k_pay');

\echo -- fail retryably, resume, fail for good, replay of the error
SELECT fence AS f_fail FROM idempotency.claim(:'k_fail', '{"n": 1}') \gset
SELECT idempotency.fail(:'k_fail', :f_fail, '{"error": "timeout"}', 503, retryable => true);
SELECT outcome, attempts, fence > :f_fail AS larger_fence, fence AS f_fail2
  FROM idempotency.claim(:'k_fail', '{"n": 1}') \gset
\echo :outcome :attempts :larger_fence
SELECT idempotency.fail(:'k_fail', :f_fail, '{"error": "stale"}', 500);
SELECT idempotency.fail(:'k_fail', :f_fail2, '{"error": "declined"}', 402, retryable => false);
SELECT outcome, response_code, response_body FROM idempotency.claim(:'k_fail', '{"n": 1}');

\echo -- checkpoint, release, claim again
SELECT fence AS f_rel FROM idempotency.claim(:'k_rel') \gset
SELECT idempotency.checkpoint(:'k_rel', :f_rel, 'charged');
SELECT status, recovery_point FROM idempotency.lookup(:'k_rel');
SELECT idempotency.release(:'k_rel', :f_rel);
SELECT outcome, recovery_point, attempts FROM idempotency.claim(:'k_rel');

\echo -- a lease that ran out: taken over, the old fence refused
SELECT fence AS f_lost FROM idempotency.claim(:'k_lost', lease => '1 millisecond') \gset
SELECT pg_sleep(0.01);
SELECT outcome, attempts FROM idempotency.claim(:'k_lost');
SELECT idempotency.complete(:'k_lost', :f_lost, '{}');

\echo -- an answer past its response_ttl
SELECT fence AS f_gone FROM idempotency.claim(:'k_gone') \gset
SELECT idempotency.complete(:'k_gone', :f_gone, '{"ok": true}', response_ttl => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT outcome, status, response_code, response_body FROM idempotency.claim(:'k_gone');

\echo -- execute
SELECT outcome, status, response_code, response_body
  FROM idempotency.execute(:'k_exec', '{"n": 7}',
         'INSERT INTO api_business (k, n) VALUES ($1, $2::int) RETURNING n', ARRAY[:'k_exec', '7']);
SELECT outcome, response_body
  FROM idempotency.execute(:'k_exec', '{"n": 7}',
         'INSERT INTO api_business (k, n) VALUES ($1, $2::int) RETURNING n', ARRAY[:'k_exec', '7']);
SELECT outcome FROM idempotency.execute(:'k_exec', '{"n": 8}', 'SELECT 1');
SELECT count(*) FROM api_business WHERE k = :'k_exec';

\echo -- a per-call lease, and SET LOCAL: neither outlives its transaction
SELECT outcome FROM idempotency.claim(:'k_local', lease => '7 seconds');
SELECT retry_after <= interval '7 seconds' AS short_lease FROM idempotency.claim(:'k_local');
BEGIN;
SET LOCAL idempotency.lease_timeout = '8 seconds';
SELECT outcome FROM idempotency.claim(:'k_local' || '-2');
COMMIT;
SELECT retry_after <= interval '8 seconds' AS short_lease FROM idempotency.claim(:'k_local' || '-2');
SELECT outcome FROM idempotency.claim(:'k_after');
SELECT retry_after > interval '20 seconds' AS default_lease FROM idempotency.claim(:'k_after');

\echo -- one-time tokens
SELECT idempotency.issue_token(:'p') AS tok \gset
SELECT idempotency.consume_token(:'tok', :'p') AS first,
       idempotency.consume_token(:'tok', :'p') AS second;
SELECT idempotency.issue_token(:'p') AS tok \gset
SELECT idempotency.consume_token(:'tok', :'p' || '-other') AS other_scope;
SELECT idempotency.consume_token(:'tok', :'p') AS own_scope;

\echo -- transitions
INSERT INTO api_orders (id, state) VALUES (:'p' || '-o1', 'PENDING');
SELECT * FROM idempotency.transition('api_orders', 'id', :'p' || '-o1', 'state', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('api_orders', 'id', :'p' || '-o1', 'state', 'PENDING', 'PAID');
SELECT * FROM idempotency.transition('api_orders', 'id', :'p' || '-o1', 'state', 'PENDING', 'CANCELLED');
SELECT * FROM idempotency.transition('api_orders', 'id', :'p' || '-o2', 'state', 'PENDING', 'PAID');
UPDATE api_orders SET state = 'PENDING' WHERE id = :'p' || '-o1';

\echo -- the inbox
SELECT idempotency.process_once('consumer', :'p' || '-e1') AS first,
       idempotency.process_once('consumer', :'p' || '-e1') AS again;
SELECT * FROM idempotency.process_once('consumer',
         ARRAY[:'p' || '-e1', :'p' || '-e2', :'p' || '-e2', :'p' || '-e3']);
