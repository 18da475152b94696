# `pg_ctl stop -m immediate` in the middle of a pgbench load, then a
# restart (crash recovery).  The load is one-transaction requests
# (BEGIN; claim; side-effect INSERT; complete; COMMIT), and, when the build
# has them, process_once() consumers and enqueue_event() producers.  After
# the restart:
#   - every key whose side effect committed replays its answer, no key has
#     two side effects, and every commit a client saw acknowledged is there;
#   - no event was processed twice, and every processed mark has its effect;
#   - every committed order has exactly one outbox event and every event its
#     order.
# pgbench writes what it saw committed to ack files with \shell, after its
# COMMIT returned (\shell substitutes only whole words, hence bare numbers).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use IPC::Run;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash_immediate');
idem_init($node);
$node->append_conf('postgresql.conf', "max_connections = 40\n");
$node->start;
idem_install($node, 'postgres');
$node->safe_psql('postgres', q{
    CREATE TABLE side_effects (id bigserial, key text, fence bigint);
    CREATE TABLE inbox_effects (id bigserial, event_id text);
    CREATE TABLE orders (id bigserial PRIMARY KEY);
});

my $has_inbox = $node->safe_psql('postgres',
	q{SELECT to_regprocedure('idempotency.process_once(text,text)') IS NOT NULL}) eq 't';
my $has_outbox = $node->safe_psql('postgres',
	q{SELECT to_regprocedure('idempotency.enqueue_event(text,text,text,jsonb,jsonb)') IS NOT NULL}) eq 't';

my $dir = $node->basedir;
my %ack = map { $_ => "$dir/ack_$_.txt" } qw(keys inbox outbox);
open my $fh, '>', $_ or die $! for values %ack;

my %scripts = ("$dir/keys.sql" => qq{
\\set k random(1, 3000)
BEGIN;
SELECT coalesce(fence, 0) AS f, (outcome IN ('claimed', 'resumed'))::int AS run
  FROM idempotency.claim('req-' || :k, '{"amount": 1}') \\gset
\\if :run
INSERT INTO side_effects (key, fence) VALUES ('req-' || :k, :f);
SELECT idempotency.complete('req-' || :k, :f, jsonb_build_object('fence', :f), 201);
\\endif
COMMIT;
\\if :run
\\shell echo :k :f >> $ack{keys}
\\endif
});
$scripts{"$dir/inbox.sql"} = qq{
\\set e random(1, 3000)
BEGIN;
SELECT idempotency.process_once('consumer-1', 'evt-' || :e)::int AS first \\gset
\\if :first
INSERT INTO inbox_effects (event_id) VALUES ('evt-' || :e);
\\endif
COMMIT;
\\if :first
\\shell echo :e >> $ack{inbox}
\\endif
} if $has_inbox;
$scripts{"$dir/outbox.sql"} = qq{
BEGIN;
INSERT INTO orders DEFAULT VALUES RETURNING id AS order_id \\gset
SELECT idempotency.enqueue_event('order', :order_id::text, 'created', jsonb_build_object('order', :order_id)) AS event_id \\gset
COMMIT;
\\shell echo :order_id :event_id >> $ack{outbox}
} if $has_outbox;
while (my ($file, $sql) = each %scripts)
{
	PostgreSQL::Test::Utils::append_to_file($file, $sql);
}
note 'process_once() is not in this build: inbox part skipped' unless $has_inbox;
note 'enqueue_event() is not in this build: outbox part skipped' unless $has_outbox;

# Start the load, let it commit for a while, then stop the server hard.
my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '--no-vacuum', '--client=8', '--jobs=2', '--time=120',
		'--host=' . $node->host, '--port=' . $node->port,
		(map { ('--file', $_) } sort keys %scripts), 'postgres'
	],
	'>', \$out, '2>', \$err);
my $going = 0;
for (1 .. 1200)
{
	last unless $pgbench->pumpable;
	$pgbench->pump_nb;
	$going = $node->safe_psql('postgres', q{SELECT count(*) >= 300 FROM side_effects}) eq 't'
	  and last;
	select(undef, undef, undef, 0.1);
}
$going or die "the load never got going: $err";
sleep 1;
$node->stop('immediate');
$pgbench->finish;
note "pgbench ended with status $? after the immediate stop";
ok(-s $ack{keys} > 0, 'clients saw commits before the stop');
$node->start;

sub lines
{
	my ($file) = @_;
	return grep { /\S/ } split /\n/, slurp_file($file);
}

sub query
{
	return $node->safe_psql('postgres', $_[0]);
}

# Request keys.
my @acked = lines($ack{keys});
note scalar(@acked) . ' requests acknowledged before the stop';
is(query(q{SELECT count(*) FROM (SELECT key FROM side_effects GROUP BY key HAVING count(*) > 1) d}),
	'0', 'no key has two side effects');
is(query(q{
    SELECT count(*) FROM side_effects s
    LEFT JOIN idempotency.idempotency_keys k ON k.idempotency_key = s.key AND k.scope = ''
    WHERE k.status IS DISTINCT FROM 'completed' OR k.fence <> s.fence
       OR k.response_body <> jsonb_build_object('fence', s.fence)}),
	'0', 'every committed side effect has its key completed by the same holder');
is(query(q{
    SELECT count(*) FROM idempotency.idempotency_keys k
    WHERE k.status = 'completed'
      AND NOT EXISTS (SELECT FROM side_effects s WHERE s.key = k.idempotency_key)}),
	'0', 'no key completed without its side effect');
is(query(q{
    SELECT count(*) FROM side_effects s,
        LATERAL idempotency.claim(s.key, '{"amount": 1}') c
    WHERE c.outcome <> 'replay' OR c.response_code <> 201
       OR c.response_body <> jsonb_build_object('fence', s.fence)}),
	'0', 'every key whose side effect committed replays its answer');
my $values = join(',', map { my ($k, $f) = split ' '; "('req-$k', $f)" } @acked) || "('', 0)";
is(query(qq{
    SELECT count(*) FROM (VALUES $values) a(key, fence)
    WHERE a.key <> '' AND NOT EXISTS (SELECT FROM side_effects s WHERE s.key = a.key AND s.fence = a.fence)}),
	'0', 'every acknowledged request is there');
is(query(q{SELECT count(*) FROM idempotency.idempotency_keys WHERE status = 'processing'}),
	'0', 'no claim outlived its rolled-back transaction');

SKIP:
{
	skip 'process_once() is not in this build', 3 unless $has_inbox;
	is(query(q{SELECT count(*) FROM (SELECT event_id FROM inbox_effects GROUP BY 1 HAVING count(*) > 1) d}),
		'0', 'no event processed twice');
	is(query(q{
        SELECT count(*) FROM idempotency.processed_events p
        FULL JOIN inbox_effects e ON e.event_id = p.event_id AND p.consumer = 'consumer-1'
        WHERE p.event_id IS NULL OR e.event_id IS NULL}),
		'0', 'processed marks and side effects match one to one');
	my $acked = join(',', map { "('evt-$_')" } lines($ack{inbox})) || "('')";
	is(query(qq{
        SELECT count(*) FROM (VALUES $acked) a(event_id)
        WHERE a.event_id <> '' AND NOT EXISTS (SELECT FROM inbox_effects e WHERE e.event_id = a.event_id)}),
		'0', 'every acknowledged event is there');
}

SKIP:
{
	skip 'enqueue_event() is not in this build', 3 unless $has_outbox;
	is(query(q{
        SELECT count(*) FROM orders o
        WHERE (SELECT count(*) FROM idempotency.outbox_events e
               WHERE e.aggregate_type = 'order' AND e.aggregate_id = o.id::text) <> 1}),
		'0', 'every committed order has exactly one event');
	is(query(q{
        SELECT count(*) FROM idempotency.outbox_events e
        WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id::text = e.aggregate_id)}),
		'0', 'no event without its order');
	my $acked = join(',', map { my ($o, $e) = split ' '; "($o, $e)" } lines($ack{outbox})) || '(0, 0)';
	is(query(qq{
        SELECT count(*) FROM (VALUES $acked) a(order_id, event_id)
        WHERE a.order_id <> 0 AND NOT EXISTS (
            SELECT FROM idempotency.outbox_events e
            WHERE e.id = a.event_id AND e.aggregate_id = a.order_id::text)}),
		'0', 'every acknowledged order and its event are there');
}

$node->stop;
done_testing();
