# test/t/081_outbox_bulk.pl: bulk loads into the outbox hold few locks
# (doc/reference.md, "Outbox and inbox"), so that the shared lock table of
# a server with the default max_locks_per_transaction does not run out.
#
# One transaction enqueues 100,000 events of 100,000 aggregates, twice,
# and stays open while 50 others each enqueue 2,000 events of as many
# aggregates (one lock per bucket would be about 900 locks each, 45,000 in
# all: more than the lock table of 100 connections holds).  Meanwhile a
# new connection connects and runs a query, and a relay's claim_events
# answers (with nothing: the loads hold every aggregate back); once they
# commit, every event can be claimed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $loaders = 50;

my $node = PostgreSQL::Test::Cluster->new('bulk');
idem_init($node);
$node->append_conf('postgresql.conf', "max_connections = 100");
$node->start;
idem_install($node, 'postgres');
is($node->safe_psql('postgres', 'SHOW max_locks_per_transaction'),
	'64', 'the default max_locks_per_transaction');

# enqueue_events of "n" events, aggregates "prefix-1" to "prefix-n"
sub bulk
{
	my ($prefix, $n) = @_;
	return qq(SELECT count(*) FROM idempotency.enqueue_events(
  array_fill('order'::text, ARRAY[$n]),
  ARRAY(SELECT '$prefix-' || g FROM generate_series(1, $n) g),
  array_fill('created'::text, ARRAY[$n]),
  array_fill('{}'::jsonb, ARRAY[$n])););
}

my $big = $node->background_psql('postgres');
$big->query_safe('BEGIN');
is($big->query_safe(bulk('big', 100000)), '100000', '100,000 events of 100,000 aggregates');
is($big->query_safe(bulk('big2', 100000)), '100000', 'and as many again in the same transaction');

my @sessions;
my $loaded = 0;
for my $i (1 .. $loaders)
{
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	$session->query('BEGIN');
	my ($out, $failed) = $session->query(bulk("load$i", 2000));
	$loaded++ if !$failed && $out eq '2000';
	push @sessions, $session;
}
is($loaded, $loaders, "$loaders more loads of 2,000 aggregates each, at once");
# the portable edition's "all buckets" is 16 stripes (doc/portable.md,
# "Edition differences"): 64 buckets, 16 stripes and a quiet-commit lock
my $most = idem_portable() ? 64 + 16 + 1 : 65;
cmp_ok(
	$node->safe_psql('postgres',
		q(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1330992194)),
	'<=', $most * ($loaders + 1), "at most $most outbox locks per loading transaction");

# Another session connects and works meanwhile.
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_class WHERE relname = $$outbox_events$$'),
	'1', 'a new connection runs a query');
is($node->safe_psql('postgres', 'SELECT count(*) FROM idempotency.claim_events(10)'),
	'0', 'a claim answers, handing out nothing while the loads are in flight');

$_->query_safe('COMMIT') for @sessions;
$_->quit for @sessions;
$big->query_safe('COMMIT');
$big->quit;
# one claim for all of them: above the default idempotency.outbox_max_batch,
# which the database's setting lifts (both editions read it)
$node->safe_psql('postgres', 'ALTER DATABASE postgres SET idempotency.outbox_max_batch = 1000000');
is($node->safe_psql('postgres', 'SELECT count(*) FROM idempotency.claim_events(1000000)'),
	200000 + 2000 * $loaders, 'once committed, every event is claimed');

$node->stop;
done_testing();
