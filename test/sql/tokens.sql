-- One-time submit tokens.
\i test/sql/include/error_of.sql

CREATE TEMP TABLE t AS SELECT idempotency.issue_token() AS token;
SELECT substr(token::text, 15, 1) AS uuid_version FROM t;
-- true exactly once
SELECT idempotency.consume_token(token) FROM t;
SELECT idempotency.consume_token(token) FROM t;
-- unknown
SELECT idempotency.consume_token('00000000-0000-4000-8000-000000000000');
-- issued for another scope: false, and it stays valid for its own scope
CREATE TEMP TABLE s AS SELECT idempotency.issue_token('checkout') AS token;
SELECT idempotency.consume_token(token) FROM s;
SELECT idempotency.consume_token(token, 'cart') FROM s;
SELECT idempotency.consume_token(token, 'checkout') FROM s;
-- expired
CREATE TEMP TABLE e AS SELECT idempotency.issue_token('', '100 ms') AS token;
SELECT pg_sleep(0.2);
SELECT idempotency.consume_token(token) FROM e;
-- ttl: the argument, else idempotency.token_ttl
SELECT expires_at - created_at AS ttl FROM idempotency.tokens WHERE token = (SELECT token FROM s);
SET idempotency.token_ttl = '1 hour';
CREATE TEMP TABLE h AS SELECT idempotency.issue_token() AS token;
SELECT expires_at - created_at AS ttl FROM idempotency.tokens WHERE token = (SELECT token FROM h);
RESET idempotency.token_ttl;
-- a rolled-back consume leaves the token valid
BEGIN;
SELECT idempotency.consume_token(token) FROM h;
ROLLBACK;
SELECT idempotency.consume_token(token) FROM h;
-- tokens are unique
SELECT count(DISTINCT idempotency.issue_token()) AS distinct_tokens FROM generate_series(1, 1000);

-- these should all fail
SELECT pg_temp.error_of($$SELECT idempotency.issue_token(NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.issue_token(repeat('s', 256))$$);
SELECT pg_temp.error_of($$SELECT idempotency.issue_token('', '0 seconds')$$);
SELECT pg_temp.error_of($$SELECT idempotency.issue_token('', '-1 minute')$$);
SELECT pg_temp.error_of($$SELECT idempotency.issue_token('', '1000 years')$$);
SELECT pg_temp.error_of($$SELECT idempotency.consume_token(NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.consume_token(gen_random_uuid(), NULL)$$);
SELECT pg_temp.error_of($$SELECT idempotency.consume_token(gen_random_uuid(), repeat('s', 256))$$);
