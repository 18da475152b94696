-- lookup() once an answer's response_ttl has passed (1.7): from
-- the moment claims answer gone, lookup() returns the key's row without
-- its response_body, to the application role and to the owner alike,
-- whether or not purge_expired() has dropped the body yet; the status and
-- code stay, as in gone.  The views show no answer at all.  Time passes by
-- moving the times stored in rows (as response_ttl does), and once by a
-- short sleep inside a transaction: the moment is the call's clock, as
-- for claim, not the transaction's.
\set VERBOSITY terse
CREATE ROLE regress_lookup_app;
SELECT idempotency.grant_usage('regress_lookup_app');

-- the application role stores answers: two with response_ttl (a
-- completion and a final failure), one without
SET ROLE regress_lookup_app;
SELECT fence AS f FROM idempotency.claim('la-1', '{"order": 1}') \gset
SELECT idempotency.complete('la-1', :f, '{"card": "4111 1111 1111 1111"}', 201,
                            response_ttl => '1 hour');
SELECT fence AS f FROM idempotency.claim('la-2', '{"order": 2}') \gset
SELECT idempotency.complete('la-2', :f, '{"card": "5500 0000 0000 0004"}', 201);
SELECT fence AS f FROM idempotency.claim('la-3') \gset
SELECT idempotency.fail('la-3', :f, '{"secret": "s-3"}', 402, false,
                        response_ttl => '1 hour');
-- before the answers' time: claims replay them, lookup shows them
SELECT outcome, response_code, response_body FROM idempotency.claim('la-1', '{"order": 1}');
SELECT status, response_code, response_body FROM idempotency.lookup('la-1');
SELECT status, response_code, response_body FROM idempotency.lookup('la-3');
RESET ROLE;

-- the time of la-1's and la-3's answers comes
UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second'
 WHERE idempotency_key IN ('la-1', 'la-3');

-- claims answer gone, and lookup shows no body any more: the status, the
-- code and the answer's time stay
SET ROLE regress_lookup_app;
SELECT outcome, status, response_code, response_body FROM idempotency.claim('la-1', '{"order": 1}');
SELECT status, response_code, response_body, fence IS NULL AS fence_hidden,
       response_expires_at < now() AS answer_past
  FROM idempotency.lookup('la-1');
SELECT outcome, status, response_code, response_body FROM idempotency.claim('la-3');
SELECT status, response_code, response_body, retryable FROM idempotency.lookup('la-3');
-- both in one statement agree
SELECT c.outcome, l.response_body
  FROM idempotency.claim('la-1', '{"order": 1}') c, idempotency.lookup('la-1') l;
-- an answer without response_ttl lives as long as its key
SELECT status, response_code, response_body FROM idempotency.lookup('la-2');
RESET ROLE;

-- the owner's lookup hides it too (it shows the fence); the table keeps
-- the body until purge_expired() drops it
SELECT status, response_code, response_body, fence IS NOT NULL AS fence_shown
  FROM idempotency.lookup('la-1');
SELECT idempotency_key, response_body IS NOT NULL AS body_stored
  FROM idempotency.idempotency_keys WHERE idempotency_key IN ('la-1', 'la-3')
 ORDER BY idempotency_key COLLATE "C";
-- the views of the schema have no column that could carry an answer
SELECT c.relname AS view, a.attname AS answer_column
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
 WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'v'
   AND a.attnum > 0 AND NOT a.attisdropped
   AND (a.attname ~ 'response|body|error'
        OR a.atttypid IN ('jsonb'::regtype, 'json'::regtype, 'text[]'::regtype,
                          'idempotency.idempotency_keys'::regtype))
 ORDER BY 1, 2;

-- the moment is the call's clock: in one transaction, where now() stands
-- still, an answer of 1 second is shown, then after the sleep it is gone
-- for claim and lookup alike, though its time is after now()
BEGIN;
SET LOCAL ROLE regress_lookup_app;
SELECT fence AS f FROM idempotency.claim('la-4') \gset
SELECT idempotency.complete('la-4', :f, '{"secret": "s-4"}', response_ttl => '1 second');
SELECT outcome, response_body FROM idempotency.claim('la-4');
SELECT response_body FROM idempotency.lookup('la-4');
SELECT pg_sleep(1.1);
SELECT outcome, response_code, response_body FROM idempotency.claim('la-4');
SELECT response_code, response_body, response_expires_at > now() AS after_transaction_start
  FROM idempotency.lookup('la-4');
COMMIT;

DELETE FROM idempotency.idempotency_keys WHERE idempotency_key ~ '^la-';
DROP OWNED BY regress_lookup_app;
DROP ROLE regress_lookup_app;
