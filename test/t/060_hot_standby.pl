# test/t/060_hot_standby.pl: the extension on a streaming hot standby
# (doc/reference.md, "Read-only transactions and hot standbys").
#
# A claim that only reads (replay, in_progress, mismatch), execute() of a
# completed key and lookup() answer on the standby, so replays can be
# served by read replicas; every call that must write raises 25006 there,
# never XX000, and the standby stays in recovery.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
idem_init($primary, allows_streaming => 1);
$primary->start;
idem_install($primary, 'postgres');
$primary->safe_psql('postgres', q(
SELECT idempotency.complete('done', fence, '{"paid": 100}', 201)
  FROM idempotency.claim('done', '{"amount": 100}');
SELECT idempotency.claim('held', '{"amount": 5}', lease => '1 hour');
SELECT idempotency.claim('crashed', '{"amount": 7}', lease => '1 second');
SELECT idempotency.enqueue_event('order', 'o1', 'created', '{}');
SELECT idempotency.process_once('consumer', 'seen');
CREATE TABLE orders (id text PRIMARY KEY, state text NOT NULL);
INSERT INTO orders VALUES ('o1', 'PENDING');
));
my $held_fence = $primary->safe_psql('postgres',
	q(SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'held'));
my $token = $primary->safe_psql('postgres', q(SELECT idempotency.issue_token()));
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');

# What only reads answers on the standby.
is( $standby->safe_psql('postgres',
		q(SELECT outcome || ' ' || response_code || ' ' || response_body FROM idempotency.claim('done', '{"amount": 100}'))),
	'replay 201 {"paid": 100}', 'a completed key replays on the standby');
is( $standby->safe_psql('postgres',
		q(SELECT outcome || ' ' || (retry_after > '0') FROM idempotency.claim('held', '{"amount": 5}'))),
	'in_progress true', 'a held key answers in_progress on the standby');
is( $standby->safe_psql('postgres',
		q(SELECT outcome FROM idempotency.claim('done', '{"amount": 999}'))),
	'mismatch', 'another request under a key answers mismatch on the standby');
is( $standby->safe_psql('postgres',
		q(SELECT outcome || ' ' || response_body FROM idempotency.execute('done', '{"amount": 100}', 'SELECT 1'))),
	'replay {"paid": 100}', 'execute() of a completed key replays on the standby');
is($standby->safe_psql('postgres', q(SELECT status FROM idempotency.lookup('done'))),
	'completed', 'lookup() reads on the standby');
is($standby->safe_psql('postgres', q(SELECT count(*) FROM idempotency.stats)) > 0 ? 1 : 0,
	1, 'the stats view reads on the standby');

# Every call that must write raises 25006.
sleep 1;    # the lease of "crashed" runs out
my %writers = (
	'claim of a new key' => q(SELECT idempotency.claim('new')),
	'claim that resumes an expired lease' => q(SELECT idempotency.claim('crashed', '{"amount": 7}')),
	'execute of a new key' => q(SELECT idempotency.execute('new', NULL, 'SELECT 1')),
	'complete' => qq(SELECT idempotency.complete('held', $held_fence, '{}')),
	'fail' => qq(SELECT idempotency.fail('held', $held_fence)),
	'checkpoint' => qq(SELECT idempotency.checkpoint('held', $held_fence, 'step')),
	'release' => qq(SELECT idempotency.release('held', $held_fence)),
	'issue_token' => q(SELECT idempotency.issue_token()),
	'consume_token' => qq(SELECT idempotency.consume_token('$token')),
	'enqueue_event' => q(SELECT idempotency.enqueue_event('order', 'o1', 'paid', '{}')),
	'emit_event' => q(SELECT idempotency.emit_event('order', 'o1', 'paid', '{}')),
	'claim_events' => q(SELECT idempotency.claim_events()),
	'mark_published' => q(SELECT idempotency.mark_published('{1}')),
	'mark_failed' => q(SELECT idempotency.mark_failed('{1}', 'down')),
	'process_once of a new event' => q(SELECT idempotency.process_once('consumer', 'new')),
	'process_once of a duplicate' => q(SELECT idempotency.process_once('consumer', 'seen')),
	'purge_expired_batch' => q(SELECT idempotency.purge_expired_batch()),
	'purge_expired' => q(CALL idempotency.purge_expired()),
	'transition' => q(SELECT idempotency.transition('orders', 'id', 'o1', 'state', 'PENDING', 'PAID')),
	'define_state_machine' => q(SELECT idempotency.define_state_machine('m', '{}')),
);
for my $name (sort keys %writers)
{
	my ($ret, $stdout, $stderr) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$writers{$name};");
	like($stderr, qr/ERROR:  25006: cannot execute/, "$name raises 25006 on the standby");
}
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is still in recovery');
ok(!(slurp_file($standby->logfile) =~ /TRAP|PANIC|server process .* was terminated/),
	'the standby log shows no crash');

# The primary goes on, and the standby follows it.
$primary->safe_psql('postgres',
	qq(SELECT idempotency.complete('held', $held_fence, '{"paid": 5}')));
$primary->wait_for_catchup($standby);
is( $standby->safe_psql('postgres',
		q(SELECT outcome || ' ' || response_body FROM idempotency.claim('held', '{"amount": 5}'))),
	'replay {"paid": 5}', 'a key completed on the primary replays on the standby');
done_testing();
