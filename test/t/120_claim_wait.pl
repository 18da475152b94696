# claim(..., wait => ...) (doc/reference.md, "Waiting for the holder"),
# with the times that test/specs/claim_wait.spec cannot check, and the
# cases a spec cannot set up (isolationtester sees a session wait only for
# a lock; a waiting claim sleeps on a condition variable).  Each waiter
# runs in a session of its own and records its answer with the time it got
# it; the test checks the answer and that it came when the holder's call
# committed, long before the wait would have run out: a duplicate of a
# phased holder that completes, fails (retryably, for good), releases, or
# crashes (its lease runs out); many waiters of one key; a completion that
# rolls back; a waiter blocks no other key; cancel and statement_timeout
# end a wait; REPEATABLE READ refuses one; a server without the library
# preloaded refuses one (55000); a wait and a lease of 30 days, longer than
# an int of milliseconds, sleep a finite time at a go; at most
# idempotency.max_waiters_per_key claims sleep for a key, and an application
# role cannot raise it for itself; a transaction that
# has written, and execute()'s statement, do not sleep; the wait slots
# and their wake-up counts (C).  The portable edition waits by claiming
# again after naps (doc/portable.md), which the same answers and times
# satisfy.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use IdemClaimWait;
use Test::More;
use POSIX ();
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('claim_wait');
idem_init($node);
$node->start;
idem_install($node, 'postgres');

# Not preloaded: a claim that would wait is refused, one that need not
# wait answers as usual.
$node->safe_psql('postgres',
	q{SELECT idempotency.claim('np', '{"a": 1}', lease => '1 hour')});
my ($ret, $out, $err) = $node->psql('postgres',
	qq{\\set VERBOSITY verbose\nSELECT outcome FROM idempotency.claim('np', '{"a": 1}', wait => '5s')});
if (idem_portable())
{
	is($out, 'in_progress', 'portable, not preloaded: the wait runs out, in_progress');
}
else
{
	like($err, qr/ERROR:\s+55000: idempotency claims can wait only when the library is preloaded/,
		'not preloaded: a claim that would wait raises 55000');
	like($err, qr/HINT:\s+Add idempotency to shared_preload_libraries/, 'with the hint');
}
is($node->safe_psql('postgres',
		q{SELECT outcome FROM idempotency.claim('np-free', wait => '5s')}),
	'claimed', 'not preloaded: a claim that need not wait answers');

unless (idem_portable())
{
	# max_connections past 128: the wait slots grow with MaxBackends
	$node->append_conf('postgresql.conf',
		'shared_preload_libraries = ' . idem_preload('idempotency') . "\nmax_connections = 300");
	$node->restart;
}
# several waiters of one key sleep at once below (the default is one)
$node->append_conf('postgresql.conf', 'idempotency.max_waiters_per_key = 4');
$node->reload;

my $wait = '30s';
my $w = IdemClaimWait->new(holder => $node, wait => $wait);

my %cases = (
	complete => ["SELECT idempotency.complete('%s', %d, '{\"paid\": 1}', 201)", 'replay|false|{"paid": 1}'],
	fail_retry => ["SELECT idempotency.fail('%s', %d, '{\"e\": 1}', 504)", 'resumed|true|'],
	fail_final => ["SELECT idempotency.fail('%s', %d, '{\"e\": 2}', 402, retryable => false)", 'replay|false|{"e": 2}'],
	release => ["SELECT idempotency.release('%s', %d)", 'claimed|true|'],
);
for my $case (sort keys %cases)
{
	my ($sql, $want) = @{ $cases{$case} };
	my $key = "w-$case";
	my $fence = $w->hold($key);
	my $waiter = $w->start_waiter($key);
	$w->wait_until_sleeping(1);
	$w->holder_call($case, sprintf($sql, $key, $fence));
	my ($answer, $at, $err) = $w->answer_of($waiter);
	is($answer, $want, "the holder's $case: the waiter gets $want") or diag($err);
	cmp_ok($w->since_mark($case, $at), '<', 5, "$case: the waiter answered at the holder's commit");
}

# The holder crashed: its lease runs out, the waiter resumes the key.
$w->hold('w-crash', '2s');
$w->mark('crash');
my ($answer, $at) = $w->answer_of($w->start_waiter('w-crash'));
is($answer, 'resumed|true|', 'the holder crashed: resumed when its lease ran out');
cmp_ok($w->since_mark('crash', $at), '<', 10, 'crash: at the end of the lease, not of the wait');

# Many waiters of one key all replay the answer; a rolled back completion
# wakes none of them for good.
my $fence = $w->hold('w-many');
my @waiters = map { $w->start_waiter('w-many') } 1 .. 3;
$w->wait_until_sleeping(3);
$node->safe_psql('postgres', qq{
BEGIN;
SELECT idempotency.complete('w-many', $fence, '{"paid": 0}');
ROLLBACK;});
# (a session that blocks no other key: another key is claimed meanwhile)
is($node->safe_psql('postgres', q{SELECT outcome FROM idempotency.claim('w-other')}),
	'claimed', 'the waiters block no other key');
$w->wait_until_sleeping(3);
is(scalar($w->waiter_pids), 3, 'a rolled back completion leaves the waiters waiting');
$w->holder_call('many', "SELECT idempotency.complete('w-many', $fence, '{\"paid\": 3}')");
is(($w->answer_of($waiters[$_ - 1]))[0], 'replay|false|{"paid": 3}', "waiter $_ of 3 replays the answer")
  for 1 .. 3;

# At most idempotency.max_waiters_per_key claims sleep for a key at a time,
# so that sleeping duplicates cannot take every connection of a pool the
# holder needs to finish: a further one answers in_progress at once, with
# the time left on the lease, and the one that sleeps still gets the answer.
$fence = $w->hold('w-bound');
my $waiter = $w->start_waiter('w-bound', setup => 'SET idempotency.max_waiters_per_key = 1');
$w->wait_until_sleeping(1);
my $started = Time::HiRes::time();
is($node->safe_psql('postgres', q{
SET idempotency.max_waiters_per_key = 1;
SELECT outcome || ' ' || (retry_after > '50 minutes')
  FROM idempotency.claim('w-bound', '{"a": 1}', wait => '30s')}),
	'in_progress true', 'a claim beyond max_waiters_per_key answers in_progress, with the lease left');
cmp_ok(Time::HiRes::time() - $started, '<', 5, 'at once, not at the end of its wait');
is($node->safe_psql('postgres', q{
SET idempotency.max_waiters_per_key = 0;
SELECT outcome FROM idempotency.claim('w-bound', '{"a": 1}', wait => '30s')}),
	'in_progress', 'max_waiters_per_key = 0: no claim sleeps');
$w->holder_call('bound', "SELECT idempotency.complete('w-bound', $fence, '{\"paid\": 4}')");
is(($w->answer_of($waiter))[0], 'replay|false|{"paid": 4}', 'the claim that slept replays the answer');
# An application role cannot raise it for itself: behind a transaction
# pooler its session's value would reach other clients of the connection.
# The C refuses the SET (superuser-only); the portable edition cannot, and
# reads a non-superuser's value from ALTER ROLE / DATABASE ... SET only.
$node->safe_psql('postgres', q{
CREATE ROLE wait_app LOGIN;
SELECT idempotency.grant_usage('wait_app');
ALTER ROLE wait_app SET idempotency.max_waiters_per_key = 1;
});
$fence = $w->hold('w-role');
$waiter = $w->start_waiter('w-role', user => 'wait_app');
$w->wait_until_sleeping(1);
($ret, $out, $err) = $node->psql('postgres', q{
\set VERBOSITY verbose
SET idempotency.max_waiters_per_key = 100;
SELECT outcome FROM idempotency.claim('w-role', '{"a": 1}', wait => '30s');
}, extra_params => [ '-U', 'wait_app' ], on_error_stop => 0);
is($out, 'in_progress', 'a role\'s own SET does not raise its max_waiters_per_key');
like($err, qr/ERROR:\s+42501: permission denied to set parameter "idempotency.max_waiters_per_key"/,
	'C: the SET is refused (42501)')
  unless idem_portable();
$w->holder_call('role', "SELECT idempotency.complete('w-role', $fence, '{\"paid\": 5}')");
is(($w->answer_of($waiter))[0], 'replay|false|{"paid": 5}', 'the role\'s one waiter replays the answer');

# The wait runs out: in_progress, with the time left on the lease.
$w->hold('w-short');
is($node->safe_psql('postgres', q{
SELECT outcome || ' ' || (retry_after > '50 minutes')
  FROM idempotency.claim('w-short', '{"a": 1}', wait => '300ms')}),
	'in_progress true', 'the wait runs out: in_progress with Retry-After');

# statement_timeout and cancel end a wait.
$w->hold('w-cancel');
($ret, $out, $err) = $node->psql('postgres', qq{
\\set VERBOSITY verbose
SET statement_timeout = '500ms';
SELECT outcome FROM idempotency.claim('w-cancel', '{"a": 1}', wait => '$wait')});
like($err, qr/ERROR:\s+57014/, 'statement_timeout ends a wait (57014)');
$waiter = $w->start_waiter('w-cancel');
$w->wait_until_sleeping(1);
$node->safe_psql('postgres', "SELECT pg_cancel_backend($_)") for $w->waiter_pids;
($answer, $at, $err) = $w->answer_of($waiter);
like($err, qr/ERROR:\s+57014/, 'cancel ends a wait (57014)');
is($answer, '', 'a cancelled wait answers nothing');

# REPEATABLE READ cannot see the holder's commit: a claim that would wait
# is refused.
($ret, $out, $err) = $node->psql('postgres', qq{
\\set VERBOSITY verbose
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome FROM idempotency.claim('w-short', '{"a": 1}', wait => '$wait')});
like($err, qr/ERROR:\s+0A000: idempotency claims can wait only under READ COMMITTED/,
	'REPEATABLE READ: a claim that would wait raises 0A000');

# execute() waits the same way.
$fence = $w->hold('w-exec');
$node->safe_psql('postgres', q{CREATE TABLE paid (n int)});
$waiter = $w->start_waiter('w-exec', call => qq{idempotency.execute('w-exec', '{"a": 1}',
  'INSERT INTO paid VALUES (1) RETURNING n', wait => '$wait')});
$w->wait_until_sleeping(1);
$w->holder_call('exec', "SELECT idempotency.complete('w-exec', $fence, '7')");
is(($w->answer_of($waiter))[0], 'replay|false|7', 'execute() waits and replays the answer');
is($node->safe_psql('postgres', 'SELECT count(*) FROM paid'), '0',
	'and runs nothing');

# Waits longer than an int of milliseconds (about 24.8 days).  A latch
# sleep takes its timeout as an int: 30 days of it wrapped around to a
# negative count (epoll_wait(..., -1702968429)), which sleeps for ever, so
# a waiter slept past its wait and the holder's lease.  With a short lease,
# a wait of 30 days ends at the lease's end as a short one does; with a
# lease and a wait of 30 days, the waiter's sleep, as /proc shows it while
# it sleeps, is finite (the C edition sleeps an hour at most at a go, and
# reads the clock again; the portable edition naps 200 ms at most); the
# holder's completion then wakes it.
$w->hold('w-long-crash', '2s');
$w->mark('long-crash');
($answer, $at) = $w->answer_of($w->start_waiter('w-long-crash', wait => '30 days'));
is($answer, 'resumed|true|',
	"wait => '30 days', the holder crashed: resumed when its lease ran out");
cmp_ok($w->since_mark('long-crash', $at), '<', 10,
	"wait => '30 days': at the end of the lease, as with a short wait");

# The timeout of the latch sleep (epoll_wait) that process $pid is in, as
# the int the kernel takes; undef when /proc does not say.
sub sleep_timeout_ms
{
	my ($pid) = @_;
	no warnings 'portable';    # hex() of a 64-bit register
	my %epoll = (x86_64 => [ 232, 281 ], aarch64 => [22]);   # epoll_wait, epoll_pwait
	my $calls = $epoll{ (POSIX::uname())[4] } or return undef;
	for (1 .. 100)
	{
		open(my $fh, '<', "/proc/$pid/syscall") or return undef;
		my @f = split ' ', (<$fh> // '');
		close $fh;
		if (@f > 4 && $f[0] =~ /^\d+$/ && grep { $_ == $f[0] } @$calls)
		{
			my $ms = hex($f[4]) & 0xffffffff;
			return $ms >= 2**31 ? $ms - 2**32 : $ms;
		}
		usleep(50_000);
	}
	return undef;
}

$fence = $node->safe_psql('postgres',
	q{SELECT fence FROM idempotency.claim('w-long', '{"a": 1}', lease => '30 days', ttl => '60 days')});
$waiter = $w->start_waiter('w-long', wait => '30 days');
$w->wait_until_sleeping(1);
my ($pid) = $w->waiter_pids;
SKIP:
{
	my $ms = sleep_timeout_ms($pid);
	skip "/proc/$pid/syscall shows no epoll_wait", 1 unless defined $ms;
	ok($ms >= 0 && $ms <= 3600 * 1000,
		"a wait and a lease of 30 days: the waiter sleeps a finite time at a go ($ms ms)");
}
$w->holder_call('long', "SELECT idempotency.complete('w-long', $fence, '{\"paid\": 30}')");
($answer, $at) = $w->answer_of($waiter);
is($answer, 'replay|false|{"paid": 30}',
	"a wait and a lease of 30 days: the holder's completion wakes the waiter");
cmp_ok($w->since_mark('long', $at), '<', 5, '30 days: at the holder\'s commit');

# A claim never sleeps while another transaction may wait for its own
# (test/specs/claim_wait_deadlock.spec has the deadlocks): in a
# transaction that has written, or in execute()'s statement, a claim that
# would wait answers in_progress at once.
$w->hold('w-tx');
is($node->safe_psql('postgres', qq{
BEGIN;
INSERT INTO marks VALUES ('tx', clock_timestamp());
SELECT outcome || ' ' || (retry_after > '50 minutes') || ' ' ||
       (clock_timestamp() - (SELECT at FROM marks WHERE what = 'tx') < '10s')
  FROM idempotency.claim('w-tx', '{"a": 1}', wait => '$wait');
COMMIT;}),
	'in_progress true true', 'a transaction that has written: in_progress at once, with Retry-After');
is($node->safe_psql('postgres', qq{
SET statement_timeout = '10s';
SELECT response_body FROM idempotency.execute('w-tx-exec', NULL,
  \$\$SELECT outcome FROM idempotency.claim('w-tx', wait => '$wait')\$\$)}),
	'"in_progress"', "execute()'s statement: a claim that would wait answers in_progress at once");

# The wake-up counts (C edition): a commit wakes its slot; a waiter woken
# for another key of its slot claims again and sleeps again.
unless (idem_portable())
{
	$node->safe_psql('postgres', q{
CREATE FUNCTION wait_counts(OUT commits bigint, OUT woken bigint, OUT unchanged bigint, OUT slots integer)
  AS '$libdir/idempotency', 'idempotency_wait_counts' LANGUAGE C;
-- a key's wait slot: the first 4 bytes of its key_hash, little-endian
CREATE FUNCTION wait_slot(k text) RETURNS bigint LANGUAGE sql AS $$
  SELECT (get_byte(b, 0) + 256 * get_byte(b, 1) + 65536 * get_byte(b, 2)
          + 16777216::bigint * get_byte(b, 3)) % (SELECT slots FROM wait_counts())
    FROM (SELECT decode(replace(idempotency.key_hash('', k)::text, '-', ''), 'hex') AS b) h $$;
});
	my $slots = $node->safe_psql('postgres', 'SELECT slots FROM wait_counts()');
	my $backends = $node->safe_psql('postgres', q{
SELECT current_setting('max_connections')::int + current_setting('max_worker_processes')::int
       + current_setting('max_wal_senders')::int + 1});
	ok($slots >= 8 * $backends && ($slots & ($slots - 1)) == 0,
		"the wait slots: a power of two, at least 8 per backend ($slots for more than $backends)");

	# two keys of one slot
	my $other = $node->safe_psql('postgres', q{
SELECT 'w-slot-' || i FROM generate_series(1, 200000) i
 WHERE wait_slot('w-slot-' || i) = wait_slot('w-slot') LIMIT 1});
	ok($other ne '', "a key of the same wait slot as w-slot: $other");
	my $f1 = $w->hold('w-slot');
	my $f2 = $w->hold($other);
	my $before = $node->safe_psql('postgres', q{SELECT commits || ' ' || woken || ' ' || unchanged FROM wait_counts()});
	my ($c0, $w0, $u0) = split ' ', $before;
	$waiter = $w->start_waiter('w-slot');
	$w->wait_until_sleeping(1);
	$w->holder_call('slot-other', "SELECT idempotency.complete('$other', $f2, '1')");
	$node->poll_query_until('postgres', qq{SELECT unchanged > $u0 FROM wait_counts()})
	  or die 'the waiter was not woken for the other key';
	$w->wait_until_sleeping(1);
	is(scalar($w->waiter_pids), 1, "another key of the slot commits: the waiter sleeps again");
	$w->holder_call('slot', "SELECT idempotency.complete('w-slot', $f1, '2')");
	is(($w->answer_of($waiter))[0], 'replay|false|2', "its own key's commit: the waiter replays");
	is($node->safe_psql('postgres', qq{
SELECT (commits - $c0) || ' ' || (woken - $w0) || ' ' || (unchanged - $u0) FROM wait_counts()}),
		'2 2 1', 'counts: 2 commits woke the slot, 2 wake-ups, 1 of them for the other key');
}

$node->stop;
done_testing();
