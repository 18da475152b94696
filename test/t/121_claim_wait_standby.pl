# claim(..., wait => ...) on a streaming hot standby (doc/reference.md,
# "Waiting for the holder"): the holder works on the primary, the waiter
# waits on the standby, where the holder's calls arrive by replay.
#
# The C edition's waiter sleeps on a condition variable that the holder's
# commit wakes, and on a standby nothing commits: a waiter there used to
# answer a completion only at the end of the holder's lease, and then,
# when the lease ran out without one, to raise 25006 like a claim that
# takes a key over.  Now it watches replay: it answers a replayed
# completion (or final failure) at once, measured here from the primary's
# commit to the answer, many times; a holder whose lease runs out, or that
# releases the key or fails retryably, leaves the key to a claim that
# writes, which a standby cannot make: the waiter raises 25006 as a claim
# without wait there does, at that moment and not at the end of its wait;
# a lease that the holder extends on the primary keeps the waiter waiting;
# a wait that runs out answers in_progress with the time left on the
# lease.  A read-only transaction on the primary follows the same rule;
# a promotion of the standby hands the waiter over to the new
# primary's commits.  The portable edition waits by claiming again after naps
# (doc/portable.md), which the same answers and bounds satisfy.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use IdemClaimWait;
use Test::More;
use Time::HiRes qw(time usleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
idem_init($primary, allows_streaming => 1);
$primary->append_conf('postgresql.conf',
	'shared_preload_libraries = ' . idem_preload('idempotency'))
  unless idem_portable();
$primary->start;
idem_install($primary, 'postgres');
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');

my $lease = '15s';
my $w = IdemClaimWait->new(holder => $primary, waiter => $standby, lease => $lease, wait => '60s');

# 1. The holder completes: the standby's waiter replays the answer at the
# replay of the commit, far sooner than the lease of 15 s; measured over
# several rounds.
my @delays;
my $rounds = 10;
for my $round (1 .. $rounds)
{
	my $key = "s-complete-$round";
	my $fence = $w->hold($key);
	my $waiter = $w->start_waiter($key);
	$w->wait_until_sleeping(1);
	usleep(200_000);    # asleep for a while, past any first short nap
	$w->holder_call($key, "SELECT idempotency.complete('$key', $fence, '{\"paid\": $round}', 201)");
	my ($answer, $at, $err) = $w->answer_of($waiter);
	is($answer, qq{replay|false|{"paid": $round}}, "round $round: the standby's waiter replays the answer")
	  or diag($err);
	push @delays, $w->since_mark($key, $at) if defined $at;
}
@delays = sort { $a <=> $b } @delays;
cmp_ok($delays[-1], '<', 2, "the waiter answered within 2 s of the primary's commit, with a lease of $lease");
diag(sprintf('standby waiter, primary commit to answer over %d rounds: min %.3f s, median %.3f s, max %.3f s',
		scalar(@delays), $delays[0], $delays[ int(@delays / 2) ], $delays[-1]));

# 2. A final failure replays as well; a release and a retryable failure
# leave the key to a claim that writes (claimed, resumed), which the
# standby cannot make: 25006 at the holder's commit, as a claim without
# wait would raise there.
my %cases = (
	fail_final => ["SELECT idempotency.fail('%s', %d, '{\"e\": 2}', 402, retryable => false)", 'replay|false|{"e": 2}'],
	fail_retry => ["SELECT idempotency.fail('%s', %d, '{\"e\": 1}', 504)", undef],
	release => ["SELECT idempotency.release('%s', %d)", undef],
);
for my $case (sort keys %cases)
{
	my ($sql, $want) = @{ $cases{$case} };
	my $key = "s-$case";
	my $fence = $w->hold($key);
	my $waiter = $w->start_waiter($key);
	$w->wait_until_sleeping(1);
	$w->holder_call($key, sprintf($sql, $key, $fence));
	my $started = time;
	my ($answer, $at, $err) = $w->answer_of($waiter);
	if (defined $want)
	{
		is($answer, $want, "the holder's $case: the standby's waiter gets $want");
	}
	else
	{
		like($err, qr/ERROR:\s+25006: cannot execute idempotency\.claim\(\) in a read-only transaction/,
			"the holder's $case: the standby's waiter raises 25006");
		is($answer, '', "$case: and answers nothing");
	}
	cmp_ok(time - $started, '<', 2, "$case: at the replay of the holder's commit");
}

# 3. The holder's lease runs out without a completion (it crashed): the
# waiter raises 25006 when the lease ends, not when its wait of 60 s does.
$w->hold('s-crash', '3s');
$w->mark('s-crash');
my $started = time;
my $waiter = $w->start_waiter('s-crash');
my ($answer, $at, $err) = $w->answer_of($waiter);
like($err, qr/ERROR:\s+25006: cannot execute idempotency\.claim\(\) in a read-only transaction/,
	'the lease runs out on the standby: 25006, the key needs a claim on the primary');
cmp_ok(time - $started, '<', 10, 'at the end of the lease, not of the wait');
unlike(slurp_file($standby->logfile), qr/TRAP|PANIC|server process .* was terminated/,
	'the standby log shows no crash');

# 4. The holder extends its lease on the primary: the replayed extension
# keeps the waiter waiting past the lease it first saw, until the
# completion.
my $fence = $w->hold('s-extend', '3s');
$waiter = $w->start_waiter('s-extend');
$w->wait_until_sleeping(1);
$primary->safe_psql('postgres',
	qq{SELECT idempotency.checkpoint('s-extend', $fence, 'step', lease => '1 hour')});
sleep 4;
is(scalar($w->waiter_pids), 1, 'past the first lease, the waiter still waits');
$w->holder_call('s-extend', "SELECT idempotency.complete('s-extend', $fence, '{\"paid\": 4}')");
($answer, $at, $err) = $w->answer_of($waiter);
is($answer, 'replay|false|{"paid": 4}',
	'a lease extended on the primary keeps the waiter waiting; it replays the completion')
  or diag($err);
cmp_ok($w->since_mark('s-extend', $at), '<', 2, 'extended lease: at the completion');

# 5. The wait runs out while the holder works: in_progress, with the time
# left on its lease.
$w->hold('s-short', '1 hour');
is( $standby->safe_psql('postgres', q{
SELECT outcome || ' ' || (retry_after > '50 minutes')
  FROM idempotency.claim('s-short', '{"a": 1}', wait => '300ms')}),
	'in_progress true', 'the wait runs out on the standby: in_progress with Retry-After');

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is still in recovery');

# 6. The same rule in a read-only transaction on the primary: the lease
# runs out, and taking the key over would write.
$w->hold('s-read-only', '2s');
$started = time;
my ($ret, $out);
($ret, $out, $err) = $primary->psql('postgres', q{
\set VERBOSITY verbose
BEGIN READ ONLY;
SELECT outcome FROM idempotency.claim('s-read-only', '{"a": 1}', wait => '60s');});
like($err, qr/ERROR:\s+25006: cannot execute idempotency\.claim\(\) in a read-only transaction/,
	'a read-only transaction on the primary: 25006 when the lease runs out');
cmp_ok(time - $started, '<', 10, 'read-only transaction: at the end of the lease');

# 7. The standby is promoted while a claim waits there: the waiter claims
# again and from then on waits for the new primary's commits; the holder
# completes there with its fence, and the waiter replays the answer.
$fence = $w->hold('s-promote', '1 hour');
$waiter = $w->start_waiter('s-promote');
$w->wait_until_sleeping(1);
$primary->stop;
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f', 'the standby is promoted');
usleep(200_000);
is(scalar($w->waiter_pids), 1, 'promoted: the waiter still waits');
$standby->safe_psql('postgres', qq{
BEGIN;
SELECT idempotency.complete('s-promote', $fence, '{"paid": 6}');
INSERT INTO marks VALUES ('s-promote', clock_timestamp());
COMMIT;});
($answer, $at, $err) = $w->answer_of($waiter);
is($answer, 'replay|false|{"paid": 6}', 'promoted: the new primary\'s completion wakes the waiter')
  or diag($err);
cmp_ok($standby->safe_psql('postgres', qq{
SELECT extract(epoch FROM '$at'::timestamptz - at) FROM marks WHERE what = 's-promote'}),
	'<', 2, 'promoted: at the completion');
$standby->stop;
done_testing();
