# A phased holder's backend is killed with SIGKILL, which makes the
# postmaster restart every backend (crash recovery).  After the lease runs
# out, the next claim resumes the key from the holder's last recovery point
# with a larger fence, and the dead holder's fence is refused with 55000.
# A one-transaction holder killed before its COMMIT leaves nothing behind.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash_holder');
idem_init($node);
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->start;
idem_install($node, 'postgres');
$node->safe_psql('postgres', q{
    CREATE TABLE side_effects (key text, phase text, fence bigint);
});

# Kill the backend of $psql with SIGKILL and wait for the crash restart.
sub kill_backend
{
	my ($psql) = @_;
	my $pid = $psql->query_safe('SELECT pg_backend_pid()');
	my $log_offset = -s $node->logfile;
	kill 'KILL', $pid or die "could not kill backend $pid: $!";
	eval { $psql->quit; };
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset);
	$node->poll_query_until('postgres', 'SELECT true')
	  or die "server did not come back after the crash";
	return $pid;
}

# 1. Phased: the claim and the first phase commit, then the backend dies.
my $lease = 8;
my $holder = $node->background_psql('postgres');
my $fence1 = $holder->query_safe(qq{
    SELECT fence FROM idempotency.claim('crash-k1', '{"amount": 100}', '', NULL, '$lease seconds')});
$holder->query_safe(qq{
    BEGIN;
    INSERT INTO side_effects VALUES ('crash-k1', 'charge', $fence1);
    SELECT idempotency.checkpoint('crash-k1', $fence1, 'charged', '$lease seconds');
    COMMIT;});
# the second phase is under way, uncommitted, when the backend dies
$holder->query_safe(qq{
    BEGIN;
    INSERT INTO side_effects VALUES ('crash-k1', 'ship', $fence1);
    SELECT idempotency.checkpoint('crash-k1', $fence1, 'shipped', '$lease seconds');});
my $pid = kill_backend($holder);
ok(1, "holder backend $pid killed, server restarted");
like(slurp_file($node->logfile), qr/was terminated by signal 9/,
	'the postmaster saw the SIGKILL');

my $row = $node->safe_psql('postgres', q{
    SELECT status, recovery_point, attempts FROM idempotency.lookup('crash-k1')});
is($row, 'processing|charged|1',
	'after the restart the key is still processing at the committed recovery point');

# While the lease lasts, a retry is told to come back later.
my $early = $node->safe_psql('postgres', q{
    SELECT outcome, retry_after > interval '0' FROM idempotency.claim('crash-k1', '{"amount": 100}')});
like($early, qr/^(in_progress\|t|resumed\|f)$/,
	'a claim within the lease gets in_progress (or resumed if recovery outlasted the lease)');

# After the lease the next claim resumes from the last recovery point.
$node->poll_query_until('postgres', q{
    SELECT outcome = 'resumed' FROM idempotency.claim('crash-k1', '{"amount": 100}')})
  or die 'the key was never resumed';
my ($fence2, $point, $attempts) = split /\|/, $node->safe_psql('postgres', q{
    SELECT fence, recovery_point, attempts FROM idempotency.lookup('crash-k1')});
cmp_ok($fence2, '>', $fence1, "the resumed holder has a larger fence ($fence2 > $fence1)");
is($point, 'charged', 'resumed at the last committed recovery point');
is($attempts, 2, 'attempts counts the second holder');

# The dead holder's fence no longer holds the key.
for my $call (
	"idempotency.complete('crash-k1', $fence1, '{\"late\": true}')",
	"idempotency.fail('crash-k1', $fence1, NULL, 500, false)",
	"idempotency.checkpoint('crash-k1', $fence1, 'shipped')",
	"idempotency.release('crash-k1', $fence1)")
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/55000: idempotency lease lost/, "stale fence refused: $call");
}

# The new holder finishes; later claims replay its answer.
$node->safe_psql('postgres', qq{
    BEGIN;
    INSERT INTO side_effects VALUES ('crash-k1', 'ship', $fence2);
    SELECT idempotency.complete('crash-k1', $fence2, '{"shipped": true}', 201);
    COMMIT;});
is($node->safe_psql('postgres', q{
    SELECT outcome, response_code, response_body FROM idempotency.claim('crash-k1', '{"amount": 100}')}),
	'replay|201|{"shipped": true}', 'the key replays the new holder\'s answer');
is($node->safe_psql('postgres', q{
    SELECT string_agg(phase || ':' || (fence = } . $fence1 . q{)::text, ',' ORDER BY phase)
    FROM side_effects WHERE key = 'crash-k1'}),
	'charge:true,ship:false',
	'one charge (by the dead holder), one shipment (by the new holder), nothing twice');

# 2. One transaction: the backend dies before COMMIT; claim and side
# effect vanish together, and the next claim starts afresh.
$holder = $node->background_psql('postgres');
$holder->query_safe(q{
    BEGIN;
    SELECT fence FROM idempotency.claim('crash-k2', '{"amount": 5}');
    INSERT INTO side_effects VALUES ('crash-k2', 'one', 0);});
kill_backend($holder);
is($node->safe_psql('postgres', q{SELECT count(*) FROM side_effects WHERE key = 'crash-k2'}),
	'0', 'the uncommitted side effect is gone');
is($node->safe_psql('postgres', q{
    SELECT outcome, attempts FROM idempotency.claim('crash-k2', '{"amount": 5}')}),
	'claimed|1', 'the next claim of the key starts afresh');

$node->stop;
done_testing();
