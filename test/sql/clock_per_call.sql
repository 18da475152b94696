-- Tokens and the purge read the clock once per call, when the call starts
-- its work, not at the start of the statement (doc/reference.md, "General
-- rules"): what a call late in a long statement or procedure writes or
-- decides is measured from its own time.
\set VERBOSITY terse
CREATE TEMP TABLE issued (before timestamptz, token uuid);

-- a token issued after a statement slept lives its whole ttl from then
INSERT INTO issued
SELECT x.before, idempotency.issue_token(scope => 'clock', ttl => '1 hour')
  FROM (SELECT pg_sleep(0.3), clock_timestamp() AS before OFFSET 0) AS x;

-- and so does one issued by a procedure after a COMMIT
DO $$
DECLARE
    before timestamptz;
BEGIN
    PERFORM pg_sleep(0.3);
    COMMIT;
    before := clock_timestamp();
    INSERT INTO issued
    VALUES (before, idempotency.issue_token(scope => 'clock', ttl => '1 hour'));
END $$;

SELECT count(*) AS tokens,
       bool_and(t.created_at >= i.before) AS created_at_call,
       bool_and(t.expires_at >= i.before + interval '1 hour') AS whole_ttl
  FROM issued AS i JOIN idempotency.tokens AS t USING (token);

-- a token that expired while a statement slept can no longer be consumed
-- in that statement
SELECT idempotency.issue_token(scope => 'clock', ttl => '0.5 seconds') AS short \gset
SELECT idempotency.consume_token(:'short', 'clock') AS consumed
  FROM (SELECT pg_sleep(0.8) OFFSET 0) AS x;
SELECT consumed_at IS NULL AS not_consumed FROM idempotency.tokens WHERE token = :'short';

-- consumed_at is the time of the consume
SELECT idempotency.issue_token(scope => 'clock') AS fresh \gset
CREATE TEMP TABLE consumed AS
SELECT x.before, idempotency.consume_token(:'fresh', 'clock') AS ok
  FROM (SELECT pg_sleep(0.3), clock_timestamp() AS before OFFSET 0) AS x;
SELECT c.ok, t.consumed_at >= c.before AS consumed_at_call
  FROM consumed AS c, idempotency.tokens AS t WHERE t.token = :'fresh';

-- a purge after a statement slept deletes what expired meanwhile
INSERT INTO idempotency.tokens (token, scope, expires_at)
VALUES ('00000000-0000-4000-8000-00000000c10c', 'clock-purge',
        clock_timestamp() + interval '0.2 seconds');
SELECT b.deleted > 0 AS purged
  FROM (SELECT pg_sleep(0.5), 0 AS zero OFFSET 0) AS x,
       LATERAL idempotency.purge_expired_batch(100 + x.zero) AS b
 WHERE b.relation = 'tokens';
SELECT count(*) AS left_behind FROM idempotency.tokens WHERE scope = 'clock-purge';

DELETE FROM idempotency.tokens WHERE scope = 'clock';
