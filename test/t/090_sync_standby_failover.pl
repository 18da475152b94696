# test/t/090_sync_standby_failover.pl: no-loss failover with a synchronous
# standby.
#
# A primary streams to one synchronous standby (synchronous_commit = on,
# synchronous_standby_names = 'standby').  Three clients run phased
# requests against the primary: claim (commits alone), then in one
# transaction the side effect (a ledger row) and complete.  In the middle of
# that load the primary is killed with SIGKILL and the standby is promoted.
# Then, on the new primary:
#   - every request a client saw completed replays, with its answer;
#   - every claim a client saw is still there;
#   - holders that were cut off are fenced (55000) once a new holder has
#     resumed their key after the lease, so no key is executed twice.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;
use IPC::Run;

my $primary = PostgreSQL::Test::Cluster->new('primary');
idem_init($primary, allows_streaming => 1);
$primary->append_conf('postgresql.conf', 'synchronous_commit = on');
$primary->start;
idem_install($primary, 'postgres');
$primary->safe_psql('postgres', q(
CREATE TABLE ledger (key text NOT NULL, fence bigint NOT NULL);
));
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->append_conf('postgresql.conf',
	"primary_conninfo = '" . $primary->connstr . " application_name=standby'");
$standby->start;
$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'standby'");
$primary->reload;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'")
  or die "the standby did not become synchronous";
pass('the standby is synchronous');

# A holder that claims a key and is cut off by the failover.
my $held_fence = $primary->safe_psql('postgres',
	q(SELECT fence FROM idempotency.claim('held', '{"n": 0}', lease => '2 seconds')));

# Client scripts: claim, echo the fence, then ledger row + complete in one
# transaction, echo done.  ON_ERROR_STOP ends a client at the first error.
my $lease = '2 seconds';
my @clients;
for my $c (1 .. 3)
{
	my $file = $PostgreSQL::Test::Utils::tmp_check . "/client$c.sql";
	open my $fh, '>', $file or die $!;
	print $fh "\\set ON_ERROR_STOP 1\n";
	for my $i (1 .. 5000)
	{
		my $key = "c$c-$i";
		print $fh <<SQL;
SELECT fence AS f FROM idempotency.claim('$key', '{"n": $i}', lease => '$lease') \\gset
\\echo claimed $key :f
BEGIN;
INSERT INTO ledger VALUES ('$key', :f);
SELECT idempotency.complete('$key', :f, '{"n": $i}');
COMMIT;
\\echo done $key
SQL
	}
	close $fh;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-A', '-t', '-d', $primary->connstr('postgres'), '-f', $file ],
		'>', \$out, '2>', \$err);
	push @clients, { h => $h, out => \$out, err => \$err };
}

# Kill the primary in the middle of the load.
$primary->poll_query_until('postgres', 'SELECT count(*) >= 150 FROM ledger')
  or die "the load did not start";
$primary->kill9;
$_->{h}->finish for @clients;

my (%claimed, %done);
my $lost = 0;
for my $cl (@clients)
{
	for (split /\n/, ${ $cl->{out} })
	{
		$claimed{$1} = $2 if /^claimed (\S+) (\d+)$/;
		$done{$1} = 1 if /^done (\S+)$/;
	}
	$lost++ if ${ $cl->{err} } =~ /connection|terminat|server closed/i;
}
cmp_ok(scalar(keys %done), '>=', 150, scalar(keys %done) . ' requests were completed before the kill');
is($lost, 3, 'every client lost its connection in the middle of its load');

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die "the standby was not promoted";

# Every request that a client saw completed replays its answer.
my $values = join(',', map { my $n = (split /-/)[1]; "('$_', $n)" } sort keys %done);
is( $standby->safe_psql('postgres', qq(
	SELECT count(*) FILTER (WHERE c.outcome = 'replay' AND c.response_body = jsonb_build_object('n', d.n)),
	       count(*)
	  FROM (VALUES $values) d(key, n), idempotency.claim(d.key, jsonb_build_object('n', d.n)) c)),
	scalar(keys %done) . '|' . scalar(keys %done),
	'every request a client saw completed replays on the new primary');
is( $standby->safe_psql('postgres', qq(
	SELECT count(*) FROM (VALUES $values) d(key, n) JOIN ledger l USING (key))),
	scalar(keys %done),
	'each of them left exactly one ledger row');

# Every claim a client saw is there, with its fence or a completed answer.
my @inflight = grep { !$done{$_} } sort keys %claimed;
my $claims = join(',', (map { "('$_', $claimed{$_})" } sort keys %claimed), "('held', $held_fence)");
is( $standby->safe_psql('postgres', qq(
	SELECT count(*) FROM (VALUES $claims) v(key, fence), idempotency.lookup(v.key) k
	 WHERE k.fence = v.fence OR k.status = 'completed')),
	scalar(keys %claimed) + 1,
	'every claim a client saw survived the failover (' . scalar(@inflight) . ' cut off mid-request, plus one idle holder)');

# Holders cut off by the failover: once their lease is over a new holder
# resumes the key with a larger fence; the old holder's transaction (ledger
# row + complete) then fails with 55000 and leaves nothing behind.
sleep 3;
for my $key ('held', @inflight)
{
	my $old = $key eq 'held' ? $held_fence : $claimed{$key};
	my ($n) = $key eq 'held' ? (0) : ((split /-/, $key)[1]);
	my $claim = $standby->safe_psql('postgres',
		"SELECT outcome || ' ' || coalesce(fence, 0) FROM idempotency.claim('$key', '{\"n\": $n}')");
	my ($outcome, $new) = split / /, $claim;
	if ($outcome eq 'replay')
	{
		# its commit reached the standby, only the acknowledgement was lost
		is($standby->safe_psql('postgres', "SELECT count(*) FROM ledger WHERE key = '$key'"),
			'1', "$key: completed before the kill, replays");
		next;
	}
	is($outcome, 'resumed', "$key: a new holder resumes it after the lease");
	cmp_ok($new, '>', $old, "$key: with a larger fence");
	my ($ret, $stdout, $stderr) = $standby->psql('postgres', qq(
		\\set VERBOSITY sqlstate
		BEGIN;
		INSERT INTO ledger VALUES ('$key', $old);
		SELECT idempotency.complete('$key', $old, '{"n": $n}');
		COMMIT;));
	like($stderr, qr/ERROR:  55000/, "$key: the cut-off holder is fenced (55000)");
	$standby->safe_psql('postgres', qq(
		BEGIN;
		INSERT INTO ledger VALUES ('$key', $new);
		SELECT idempotency.complete('$key', $new, '{"n": $n}');
		COMMIT;));
}

is( $standby->safe_psql('postgres',
		'SELECT count(*) FROM (SELECT key FROM ledger GROUP BY key HAVING count(*) > 1) twice'),
	'0', 'no key was executed twice');
is( $standby->safe_psql('postgres', qq(
	SELECT count(*) FROM (VALUES $claims) v(key, fence) JOIN ledger l USING (key))),
	scalar(keys %claimed) + 1,
	'every claimed key was executed exactly once in the end');
done_testing();
