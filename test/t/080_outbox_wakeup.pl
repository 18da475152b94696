# test/t/080_outbox_wakeup.pl: no lost wake-up, however long a commit
# takes (doc/reference.md, "Waking relays").
#
# A producer commits an event that notifies, then at once one that stays
# quiet (within idempotency.outbox_notify_interval of the first); the quiet
# one's commit waits for a synchronous standby that does not exist, long
# past the relay's first look again.  A relay that follows the documented
# rule (test/t/outbox_relay.py) keeps looking while outbox_quiet_commits()
# counts it, and claims the event at its next look once the standby
# requirement is dropped and the commit becomes visible, without a
# notification and long before its poll.
use strict;
use warnings;
use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;
use Time::HiRes qw(time);

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
plan skip_all => 'the relay needs python3 with psycopg2'
  if system($python, '-c', 'import psycopg2') != 0;

my $node = PostgreSQL::Test::Cluster->new('wakeup');
idem_init($node, allows_streaming => 1);
$node->start;
idem_install($node, 'postgres');

# The relay: looks again every 2 s (the producer's interval is 1 s), polls
# only after 10 minutes.
my ($relay_out, $relay_err) = ('', '');
my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
my $relay = IPC::Run::start(
	[ $python, dirname(__FILE__) . '/outbox_relay.py', $node->connstr('postgres'), '1000', '600' ],
	'>', \$relay_out, '2>', \$relay_err, $timer);
pump_until($relay, $timer, \$relay_out, qr/^listening$/m)
  or die "the relay did not start: $relay_err";

# The producers' interval, 1 s, for the database, before commits wait for
# a standby: since 1.7 a session cannot lengthen it (the C edition: a
# superuser may SET it; the portable edition takes it from the database
# only).
$node->safe_psql('postgres',
	q(ALTER DATABASE postgres SET idempotency.outbox_notify_interval = '1s'));

# Commits that wait for a standby from now on (the relay's do not).
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'ghost'");
$node->reload;

my $producer = $node->background_psql('postgres');
$producer->query_safe(q(SET idempotency.outbox_notify_interval = '1s'));
$producer->query_until(
	qr/first committed/, q(
SET synchronous_commit = local;
SELECT idempotency.enqueue_event('order', 'A', 'loud', '{}');
\echo first committed
SET synchronous_commit = on;
SELECT idempotency.enqueue_event('order', 'B', 'quiet', '{}');
));

ok(pump_until($relay, $timer, \$relay_out, qr/^claimed \d+ loud notification$/m),
	'the first commit notifies, the relay claims its event');
ok( $node->poll_query_until(
		'postgres', q(
SELECT idempotency.outbox_quiet_commits() = 1
   AND EXISTS (SELECT FROM pg_stat_activity WHERE wait_event = 'SyncRep'))),
	'the second commit stays quiet and waits for the standby, counted');

# Past the relay's first look again: it is still looking.
sleep 5;
unlike($relay_out, qr/quiet/, 'the quiet event is not visible yet');
is($node->safe_psql('postgres', 'SELECT idempotency.outbox_quiet_commits()'),
	'1', 'the quiet commit is still in flight');

# The commit becomes visible: the relay's next look finds it.
$node->append_conf('postgresql.conf', "synchronous_standby_names = ''");
my $released = time;
$node->reload;
ok(pump_until($relay, $timer, \$relay_out, qr/^claimed \d+ quiet look$/m),
	'the relay claims the quiet event at a look again');
my $waited = time - $released;
cmp_ok($waited, '<', 30, "claimed ${waited}s after the commit was released, not at the poll");
is(scalar(() = $relay_out =~ /^notified /mg), 1, 'the quiet commit sent no notification');
is($node->safe_psql('postgres', 'SELECT idempotency.outbox_quiet_commits()'),
	'0', 'no quiet commit in flight any more');

$producer->quit;
$relay->kill_kill;
$node->stop;
done_testing();
