# Stress: pgbench with many clients on a small key space mixes phased and
# one-transaction requests (and execute()), with random rollbacks and
# random lease expiries.  The key space moves on every 5 seconds (the key
# names carry the 5-second slot), so that keys are claimed, resumed and
# completed all through the run instead of only replaying after a while.  Checked afterwards, from a side-effect table: no
# double execution, every completed key has all its effects, every
# recovery point matches the effects that committed with it, and the only
# errors are the documented ones (55000 for a holder whose lease ran out;
# 40001 would be allowed, but READ COMMITTED never raises it here).  The
# server log must show no crash.
#
#   STRESS_SECONDS  duration (default 15; `make stress` runs 60)
#   STRESS_CLIENTS  pgbench clients (default 32)
#   STRESS_KEYS     size of the key space (default 1000)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $seconds = $ENV{STRESS_SECONDS} // 15;
my $clients = $ENV{STRESS_CLIENTS} // 32;
my $keys = $ENV{STRESS_KEYS} // 1000;

my $node = PostgreSQL::Test::Cluster->new('stress');
idem_init($node);
$node->append_conf('postgresql.conf',
	"max_connections = " . ($clients + 10) . "\nlog_min_messages = warning\n");
$node->start;
idem_install($node, 'postgres');
$node->safe_psql('postgres', q{
CREATE TABLE side_effects (key text NOT NULL, phase text NOT NULL, fence bigint NOT NULL,
                           at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE UNLOGGED TABLE outcomes (kind text, outcome text);
CREATE UNLOGGED TABLE caught (kind text, sqlstate text);
-- the key of request number n of a kind in the current 5-second slot
CREATE FUNCTION stress_key(kind text, n int) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT kind || n || '-' || floor(extract(epoch FROM clock_timestamp()) / 5)
$$;

-- A phased request (Stripe's atomic phases): the claim commits on its own;
-- phase "charge" and the checkpoint that records it commit together; phase
-- "ship" and complete() commit together.  A phase whose fence no longer
-- holds the key (55000) rolls back with its side effect.  p_rollback
-- rolls back the first or the second phase; p_expire sleeps past the
-- one-second lease between the phases, so another client may resume.
CREATE PROCEDURE phased(n int, p_rollback int, p_expire boolean)
LANGUAGE plpgsql AS $$
DECLARE
    k text := stress_key('p', n);
    c idempotency.claim_result;
BEGIN
    c := idempotency.claim(k, '{"kind": "phased"}', 'stress', NULL, '1 second');
    INSERT INTO outcomes VALUES ('phased', c.outcome);
    COMMIT;
    IF c.outcome NOT IN ('claimed', 'resumed') THEN
        RETURN;
    END IF;
    IF c.recovery_point = 'started' THEN
        BEGIN
            INSERT INTO side_effects (key, phase, fence) VALUES (k, 'charge', c.fence);
            PERFORM idempotency.checkpoint(k, c.fence, 'charged', '1 second', 'stress');
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            INSERT INTO caught VALUES ('phased', SQLSTATE);
            COMMIT;
            RETURN;
        END;
        IF p_rollback = 1 THEN
            ROLLBACK;
            RETURN;
        END IF;
        COMMIT;
    END IF;
    IF p_expire THEN
        PERFORM pg_sleep(1.2);
    END IF;
    BEGIN
        INSERT INTO side_effects (key, phase, fence) VALUES (k, 'ship', c.fence);
        PERFORM idempotency.complete(k, c.fence, jsonb_build_object('fence', c.fence), 201, 'stress');
    EXCEPTION WHEN object_not_in_prerequisite_state THEN
        INSERT INTO caught VALUES ('phased', SQLSTATE);
        COMMIT;
        RETURN;
    END;
    IF p_rollback = 2 THEN
        ROLLBACK;
    ELSE
        COMMIT;
    END IF;
END $$;

-- A one-transaction request: claim, side effect, complete, then COMMIT or
-- a random ROLLBACK.  Any error here fails the run.
CREATE PROCEDURE one_transaction(n int, p_rollback boolean)
LANGUAGE plpgsql AS $$
DECLARE
    k text := stress_key('t', n);
    c idempotency.claim_result;
BEGIN
    c := idempotency.claim(k, '{"kind": "one"}', 'stress');
    IF c.outcome IN ('claimed', 'resumed') THEN
        INSERT INTO side_effects (key, phase, fence) VALUES (k, 'one', c.fence);
        PERFORM idempotency.complete(k, c.fence, jsonb_build_object('fence', c.fence), 201, 'stress');
    END IF;
    INSERT INTO outcomes VALUES ('one', c.outcome);
    IF p_rollback THEN
        ROLLBACK;
    ELSE
        COMMIT;
    END IF;
END $$;
});

my $dir = $node->basedir;
my %files = (
	'phased.sql@4' => qq{
\\set k random(1, $keys)
\\set rb random(0, 19)
\\set ex random(0, 19)
CALL phased(:k, :rb, :ex = 0);
},
	'one.sql@4' => qq{
\\set k random(1, $keys)
\\set rb random(0, 9)
CALL one_transaction(:k, :rb = 0);
},
	'execute.sql@2' => qq{
\\set k random(1, $keys)
\\set rb random(0, 9)
BEGIN;
SELECT outcome FROM (SELECT stress_key('x', :k) AS key) s,
    idempotency.execute(s.key, '{"kind": "execute"}',
    'INSERT INTO side_effects (key, phase, fence) VALUES (\$1, ''execute'', 0) RETURNING key',
    ARRAY[s.key], 'stress');
\\if :rb = 0
ROLLBACK;
\\else
COMMIT;
\\endif
});

$node->pgbench(
	"--no-vacuum --client=$clients --jobs=2 --time=$seconds --progress=5",
	0,
	[qr/number of failed transactions: 0/, qr/processed: [1-9]/],
	[qr/^(progress: .*\n)*$/],
	"pgbench: $clients clients, $seconds s, $keys keys per kind and slot, no client failed",
	\%files);

sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

is(query(q{
    SELECT string_agg(key || ' ' || phase, ', ') FROM (
        SELECT key, phase FROM side_effects GROUP BY 1, 2 HAVING count(*) > 1) d}),
	'', 'zero double executions');
is(query(q{
    SELECT count(*) FROM idempotency.idempotency_keys k
    WHERE k.status = 'completed' AND k.scope = 'stress'
      AND (SELECT string_agg(s.phase, ',' ORDER BY s.phase) FROM side_effects s
           WHERE s.key = k.idempotency_key)
          IS DISTINCT FROM CASE left(k.idempotency_key, 1)
              WHEN 'p' THEN 'charge,ship' WHEN 't' THEN 'one' ELSE 'execute' END}),
	'0', 'every completed key has each of its side effects once');
is(query(q{
    SELECT count(*) FROM idempotency.idempotency_keys k
    WHERE k.scope = 'stress' AND k.idempotency_key LIKE 'p%'
      AND (k.recovery_point = 'charged') <>
          EXISTS (SELECT FROM side_effects s WHERE s.key = k.idempotency_key AND s.phase = 'charge')}),
	'0', 'every recovery point matches the side effects committed with it');
is(query(q{
    SELECT count(*) FROM side_effects s
    WHERE s.phase = 'ship' AND NOT EXISTS (
        SELECT FROM idempotency.idempotency_keys k
        WHERE k.scope = 'stress' AND k.idempotency_key = s.key
          AND k.status = 'completed' AND k.fence = s.fence)}),
	'0', 'every shipment was made by the holder that completed the key');
is(query(q{SELECT count(*) FROM caught WHERE sqlstate NOT IN ('55000', '40001')}),
	'0', 'no error other than lease lost (55000) or serialization failure (40001)');
is(query(q{
    SELECT count(*) FROM idempotency.idempotency_keys k
    WHERE k.scope = 'stress' AND k.status = 'completed'
      AND (SELECT c.outcome FROM idempotency.claim(k.idempotency_key,
               jsonb_build_object('kind', CASE left(k.idempotency_key, 1)
                   WHEN 'p' THEN 'phased' WHEN 't' THEN 'one' ELSE 'execute' END),
               'stress') c) <> 'replay'}),
	'0', 'every completed key replays');

my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|PANIC|TRAP:|server process .* exited with exit code/,
	'no crash in the server log');

# The figures of the run, for doc/reliability.md.
diag(sprintf "stress: %d s, %d clients, %d keys per kind and 5-second slot", $seconds, $clients, $keys);
diag('outcomes: ' . query(q{
    SELECT string_agg(kind || ' ' || outcome || ' ' || n, ', ' ORDER BY kind, outcome)
    FROM (SELECT kind, outcome, count(*) AS n FROM outcomes GROUP BY 1, 2) o}));
diag('caught: ' . (query(q{
    SELECT string_agg(kind || ' ' || sqlstate || ' ' || n, ', ')
    FROM (SELECT kind, sqlstate, count(*) AS n FROM caught GROUP BY 1, 2) c}) || 'none'));
diag('side effects: ' . query(q{
    SELECT string_agg(phase || ' ' || n, ', ' ORDER BY phase)
    FROM (SELECT phase, count(*) AS n FROM side_effects GROUP BY 1) s}));
diag('keys: ' . query(q{
    SELECT string_agg(status || ' ' || n, ', ' ORDER BY status)
    FROM (SELECT status::text, count(*) AS n FROM idempotency.idempotency_keys GROUP BY 1) k}));

$node->stop;
done_testing();
