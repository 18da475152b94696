# test/t/100_logical_replication.pl: the extension's tables under logical
# replication, and a switch of writes to the subscriber (doc/operations.md,
# "Major upgrade with logical replication").
#
# A publisher (wal_level logical) and a subscriber, both with CREATE
# EXTENSION idempotency (the subscriber's tables come from the extension).
# The publication lists every table of the extension (found in pg_depend);
# the subscription copies what is there, then the publisher runs every
# kind of write: phased claims, a take-over after a lease, checkpoint,
# completions, fail (retryable and final), release, purge_expired_batch
# of expired keys, tokens, inbox marks and published events, tokens issued
# and consumed, state machines, outbox enqueue, claim_events,
# mark_published and mark_failed, inbox process_once.  After each phase
# the subscriber must catch up without an apply error and hold the same
# rows as the publisher, table by table.  Then writes move to the
# subscriber: the sequences are set from the publisher's (logical
# replication does not carry them), and there every completed key replays
# its stored answer, a key whose lease ran out is resumed with a fence
# larger than any the publisher gave, and new outbox ids and lease tokens
# are larger than the publisher's.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;
use Time::HiRes qw(usleep);

my $pub = PostgreSQL::Test::Cluster->new('publisher');
idem_init($pub, allows_streaming => 'logical');
$pub->start;
my $sub = PostgreSQL::Test::Cluster->new('subscriber');
idem_init($sub);
$sub->start;

sub on_pub { return $pub->safe_psql('postgres', $_[0]); }
sub on_sub { return $sub->safe_psql('postgres', $_[0]); }

idem_install($pub, 'postgres');
idem_install($sub, 'postgres');

# The extension's tables and sequences: its members in pg_depend.  The
# plain script of the portable edition makes no extension (doc/portable.md,
# "Edition differences"): there they are those of schema idempotency but
# plain_version, where each node keeps the version installed on it.
my $members = q(
SELECT c.oid::regclass::text
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
   AND d.deptype = 'e' AND c.relkind = '%s'
 ORDER BY c.oid::regclass::text COLLATE "C");
my @own;    # tables of schema idempotency that are not published
if (idem_edition() eq 'plain')
{
	is(on_pub(q(SELECT count(*) FROM pg_extension WHERE extname = 'idempotency')),
		'0', 'the plain script makes no extension');
	is(on_sub(q(SELECT version FROM idempotency.plain_version)),
		on_pub(q(SELECT version FROM idempotency.plain_version)),
		'both nodes have the same version of the plain script');
	$members = q(
SELECT c.oid::regclass::text FROM pg_class c
 WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = '%s'
   AND c.relname <> 'plain_version'
 ORDER BY c.oid::regclass::text COLLATE "C");
	@own = ('idempotency.plain_version');
}
my @tables = split /\n/, on_pub(sprintf($members, 'r'));
my @sequences = split /\n/, on_pub(sprintf($members, 'S'));
for my $t (qw(idempotency_keys tokens state_machines outbox_events processed_events))
{
	ok((grep { $_ eq "idempotency.$t" } @tables), "idempotency.$t is a table of the extension");
}
for my $s (qw(fence_seq outbox_lease_seq outbox_events_id_seq))
{
	ok((grep { $_ eq "idempotency.$s" } @sequences), "idempotency.$s is a sequence of the extension");
}
is(on_sub(sprintf($members, 'r')), join("\n", @tables), 'the subscriber has the same tables, from CREATE EXTENSION');

# FOR ALL TABLES and FOR TABLES IN SCHEMA publish the extension's tables
# too (they are ordinary tables), and those of other extensions (pg_tle's
# through pg_tle) and the plain script's plain_version; the test publishes
# the extension's by name.
my @others = split /\n/, on_pub(q(
SELECT c.oid::regclass::text
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid JOIN pg_extension e ON e.oid = d.refobjid
 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
   AND d.deptype = 'e' AND c.relkind = 'r' AND e.extname <> 'idempotency'));
on_pub(q(
CREATE PUBLICATION probe_all FOR ALL TABLES;
CREATE PUBLICATION probe_schema FOR TABLES IN SCHEMA idempotency;
));
my $published = q(SELECT string_agg(schemaname || '.' || tablename, E'\n' ORDER BY schemaname || '.' || tablename COLLATE "C")
	FROM pg_publication_tables WHERE pubname = '%s');
is(on_pub(sprintf($published, 'probe_all')), join("\n", sort(@tables, @own, @others)),
	'FOR ALL TABLES publishes every table of the extension');
is(on_pub(sprintf($published, 'probe_schema')), join("\n", sort(@tables, @own)),
	'FOR TABLES IN SCHEMA idempotency publishes every table of the extension');
on_pub('DROP PUBLICATION probe_all; DROP PUBLICATION probe_schema');

# Rows that exist before the subscription: copy_data brings them over.
on_pub(q(
SELECT idempotency.complete('pre', fence, '{"pre": true}', 201)
  FROM idempotency.claim('pre', '{"n": 0}');
SELECT idempotency.issue_token(scope => 'pre');
SELECT idempotency.define_state_machine('order', '{"PENDING": ["PAID"]}');
SELECT idempotency.enqueue_event('order', 'o0', 'created', '{"n": 0}');
SELECT idempotency.process_once('billing', 'pre-e1');
));

on_pub('CREATE PUBLICATION idem_pub FOR TABLE ' . join(', ', @tables));
my $connstr = $pub->connstr . ' dbname=postgres';
on_sub("CREATE SUBSCRIPTION idem_sub CONNECTION '$connstr' PUBLICATION idem_pub WITH (copy_data = true)");
$sub->wait_for_subscription_sync($pub, 'idem_sub');

# catch_up: wait until the subscriber has applied everything the publisher
# wrote so far, or give up at the first apply error (a stalled
# subscription retries forever; its log says why).
my $log_offset = 0;
sub catch_up
{
	my ($what) = @_;
	my $lsn = $pub->lsn('write');
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		my $log = slurp_file($sub->logfile);
		if (substr($log, $log_offset) =~ /^.*ERROR:\s+(.*)$/m)
		{
			fail("the subscriber applies $what: $1");
			return 0;
		}
		if (on_pub(qq(SELECT count(*) FROM pg_stat_replication
			 WHERE application_name = 'idem_sub' AND state = 'streaming' AND replay_lsn >= '$lsn')) eq '1')
		{
			pass("the subscriber applies $what");
			return 1;
		}
		usleep(100_000);
	}
	fail("the subscriber applies $what: timed out");
	return 0;
}

# same_rows: every table of the extension holds the same rows on both
# (one query per node: a line "#table", its count, then its rows).
my $all_rows = "SET TimeZone = 'UTC';\n" . join(
	'',
	map {
		qq(SELECT '#$_';
		   SELECT count(*) || E'\\n' || coalesce(string_agg(r::text, E'\\n' ORDER BY r::text COLLATE "C"), '')
		     FROM $_ r;
)
	} @tables);
sub same_rows
{
	my ($what) = @_;
	my (undef, %on_pub) = split /^#(\S+)\n/m, on_pub($all_rows);
	my (undef, %on_sub) = split /^#(\S+)\n/m, on_sub($all_rows);
	for my $t (@tables)
	{
		is($on_sub{$t} // 'missing', $on_pub{$t} // 'missing on the publisher',
			"$what: $t has the same rows on the subscriber");
	}
}

# stop: end the test early once the subscription is stuck.
sub stop
{
	my %seen;
	my @lines = grep { !$seen{$_}++ } map { s/^.*?\] //r } grep { /ERROR|DETAIL|CONTEXT/ } split /\n/, slurp_file($sub->logfile);
	diag("the subscriber's log says:\n" . join("\n", @lines[0 .. ($#lines < 5 ? $#lines : 5)]));
	done_testing();
	exit 0;
}

catch_up('the initial copy') or stop();
same_rows('copy_data');

# 1. Phased claims: the claims commit, then the completions.
my %fence;
for my $i (1 .. 10)
{
	my $scope = $i % 2 ? '' : 'shop';
	$fence{"k$i"} = on_pub(qq(SELECT fence FROM idempotency.claim('k$i', '{"n": $i}', scope => '$scope')));
}
catch_up('the claims') or stop();
same_rows('claims');
for my $i (1 .. 10)
{
	my $scope = $i % 2 ? '' : 'shop';
	on_pub(qq(SELECT idempotency.complete('k$i', $fence{"k$i"}, '{"n": $i, "ok": true}', 201, scope => '$scope')));
}
catch_up('the completions') or stop();
same_rows('completions');

# 2. What needs a lease or a ttl to run out: a take-over, a key left held,
# keys, tokens, inbox marks and published events to purge.
my $f1 = on_pub(q(SELECT fence FROM idempotency.claim('takeover', '{"n": 0}', lease => '1 second')));
my $held_fence = on_pub(q(SELECT fence FROM idempotency.claim('held', '{"n": -1}', lease => '1 second')));
on_pub(q(
SELECT idempotency.complete('exp' || i, c.fence, '{"gone": true}', ttl => '1 second')
  FROM generate_series(1, 5) i, idempotency.claim('exp' || i) c;
SELECT idempotency.issue_token(ttl => '1 second') FROM generate_series(1, 2);
SELECT idempotency.process_once('billing', 'old-' || i) FROM generate_series(1, 3) i;
SELECT idempotency.enqueue_event('order', 'old', 'created', '{}') FROM generate_series(1, 2);
));
my $old = on_pub(q(SELECT string_agg(id::text || ' ' || lease_token, ',') FROM idempotency.claim_events(2)));
my ($old_ids, $old_token) = ($old =~ /^(\d+) (\d+),(\d+) \d+$/) ? ("$1,$3", $2) : die "claim_events: $old";
is(on_pub("SELECT idempotency.mark_published('{$old_ids}', $old_token)"), '2', 'the old events are published');
catch_up('short leases and ttls') or stop();
sleep 2;

my $f2 = on_pub(q(SELECT outcome || ' ' || fence FROM idempotency.claim('takeover', '{"n": 0}', lease => '1 minute')));
like($f2, qr/^resumed \d+$/, 'a claim after the lease resumes the key');
$f2 =~ s/^resumed //;
cmp_ok($f2, '>', $f1, 'with a larger fence');
my ($ret, $stdout, $stderr) = $pub->psql('postgres',
	"\\set VERBOSITY sqlstate\nSELECT idempotency.complete('takeover', $f1, '{}')");
like($stderr, qr/ERROR:  55000/, 'the first holder is fenced (55000)');
on_pub(qq(SELECT idempotency.complete('takeover', $f2, '{"taken": "over"}')));
is( on_pub(q(SET idempotency.outbox_retention = '1 second';
		SET idempotency.processed_retention = '1 second';
		SELECT string_agg(relation || ' ' || deleted, ', ' ORDER BY relation) FROM idempotency.purge_expired_batch())),
	'idempotency_keys 5, idempotency_keys.response_body 0, outbox_events 2, processed_events 4, tokens 2',
	'purge_expired_batch deletes the expired keys, tokens, marks and published events');
catch_up('the take-over and the purge') or stop();
same_rows('take-over and purge');

# 3. Holder calls: checkpoint, fail (retryable, then final), release.
on_pub(q(
SELECT idempotency.checkpoint('ck', fence, 'charged', lease => '1 hour')
  FROM idempotency.claim('ck', '{"n": 1}');
SELECT idempotency.fail('fr', fence, '{"error": "timeout"}', 503, retryable => true)
  FROM idempotency.claim('fr', '{"n": 2}');
SELECT idempotency.fail('ff', fence, '{"error": "declined"}', 402, retryable => false)
  FROM idempotency.claim('ff', '{"n": 3}');
SELECT idempotency.release('rel', fence) FROM idempotency.claim('rel', '{"n": 4}');
));
my $fr = on_pub(q(SELECT outcome || ' ' || fence FROM idempotency.claim('fr', '{"n": 2}')));
like($fr, qr/^resumed \d+$/, 'a retryable failure is resumed');
$fr =~ s/^resumed //;
on_pub(qq(SELECT idempotency.complete('fr', $fr, '{"retried": true}')));
is(on_pub(q(SELECT outcome || ' ' || response_code FROM idempotency.claim('ff', '{"n": 3}'))),
	'replay 402', 'a final failure replays');
is(on_pub(q(SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key = 'rel')),
	'0', 'a released key is gone');

# 4. Tokens, state machines, the outbox and the inbox.
my $token = on_pub(q(SELECT idempotency.issue_token()));
my $spent = on_pub(q(SELECT idempotency.issue_token()));
is(on_pub("SELECT idempotency.consume_token('$spent')"), 't', 'a token is consumed');
on_pub(q(
SELECT idempotency.define_state_machine('order', '{"PENDING": ["PAID"], "PAID": ["SHIPPED"]}');
SELECT idempotency.define_state_machine('refund', '{"OPEN": ["DONE"]}');
SELECT idempotency.enqueue_event('order', 'o' || i, 'created', jsonb_build_object('n', i))
  FROM generate_series(1, 4) i;
SELECT idempotency.enqueue_events(ARRAY['order', 'order'], ARRAY['o5', 'o5'],
  ARRAY['created', 'paid'], ARRAY['{"n": 5}', '{"n": 6}']::jsonb[]);
));
my $claimed = on_pub(q(SELECT string_agg(id::text, ',' ORDER BY id) || ' ' || max(lease_token)
	FROM idempotency.claim_events(10)));
my ($ids, $lease_token) = split / /, $claimed;
my @ids = split /,/, $ids;
cmp_ok(scalar(@ids), '>=', 6, 'claim_events leases the pending events');
my $marked = join(',', @ids[0 .. 2]);
my $failed = join(',', @ids[3 .. $#ids]);
is(on_pub("SELECT idempotency.mark_published('{$marked}', $lease_token)"), '3', 'mark_published');
is(on_pub("SELECT idempotency.mark_failed('{$failed}', 'broker down', $lease_token)"),
	scalar(@ids) - 3, 'mark_failed');
is( on_pub(q(SELECT idempotency.process_once('billing', 'e1'), idempotency.process_once('billing', 'e1'))),
	't|f', 'process_once marks an event once');
is( on_pub(q(SELECT string_agg(x, ',') FROM idempotency.process_once('billing', ARRAY['e2', 'e3', 'e1']) x)),
	'e2,e3', 'process_once of a batch marks the new ones');
catch_up('holder calls, tokens, state machines, outbox and inbox') or stop();
same_rows('the whole workload');

# The subscription ran without an error.
is( on_sub(q(SELECT apply_error_count + sync_error_count FROM pg_stat_subscription_stats
		WHERE subname = 'idem_sub')),
	'0', 'pg_stat_subscription_stats counts no apply or sync error');
is(on_sub(q(SELECT count(*) FROM pg_stat_subscription WHERE subname = 'idem_sub' AND pid IS NOT NULL)),
	'1', 'the apply worker is running');
unlike(slurp_file($sub->logfile), qr/publisher did not send replica identity/,
	'the subscriber never missed the replica identity');

# 5. Writes move to the subscriber.  Logical replication does not carry
# sequences: the subscriber's have not moved.  (The portable edition's
# portable_outbox_notified_* hold a session's last notification, no data:
# they are left out.)
is( on_sub(q(SELECT string_agg(sequencename || ' ' || coalesce(last_value::text, 'unused'), ', ' ORDER BY 1)
		FROM pg_sequences WHERE schemaname = 'idempotency'
		 AND sequencename NOT LIKE 'portable\_outbox\_notified\_%')),
	'fence_seq unused, outbox_events_id_seq unused, outbox_lease_seq unused',
	'the subscriber\'s sequences were not replicated');
my %pub_last = map { split / / } split /\n/,
  on_pub(q(SELECT sequencename || ' ' || last_value FROM pg_sequences WHERE schemaname = 'idempotency'));
my $max_fence = on_pub('SELECT max(fence) FROM idempotency.idempotency_keys');
my $max_id = on_pub('SELECT max(id) FROM idempotency.outbox_events');
my $max_token = on_pub('SELECT max(lease_token) FROM idempotency.outbox_events');
cmp_ok($pub_last{fence_seq}, '>=', $max_fence, 'the publisher\'s fence_seq is at or past every fence');

# The procedure of doc/operations.md: with writes stopped on the publisher
# and the subscriber caught up, set every sequence past the publisher's.
catch_up('the last writes') or stop();
my $setvals = on_pub(q(
SELECT format('SELECT pg_catalog.setval(%L, %s);',
              format('%I.%I', schemaname, sequencename), last_value + 1000)
  FROM pg_catalog.pg_sequences
 WHERE last_value IS NOT NULL));
like($setvals, qr/fence_seq/, 'the publisher\'s sequences, as setval statements');
on_sub($setvals);
on_sub('DROP SUBSCRIPTION idem_sub');
is( on_sub(q(SELECT string_agg(sequencename, ', ' ORDER BY 1) FROM pg_sequences
		WHERE schemaname = 'idempotency' AND last_value IS NOT NULL
		  AND sequencename NOT LIKE 'portable\_outbox\_notified\_%')),
	'fence_seq, outbox_events_id_seq, outbox_lease_seq', 'the subscriber\'s sequences are set');

# Every completed key, and the final failure, replay their stored answer.
my $answers = q(SET TimeZone = 'UTC';
SELECT string_agg(scope || '/' || idempotency_key || ' ' || response_code || ' ' || response_body, E'\n'
                  ORDER BY scope, idempotency_key)
  FROM idempotency.idempotency_keys
 WHERE status = 'completed' OR (status = 'failed' AND NOT retryable));
my $expected = on_pub($answers);
is(scalar(() = $expected =~ /\n/g) + 1, 14, 'the publisher has 14 completed or finally failed keys');
is( on_sub(q(SELECT string_agg(k.scope || '/' || k.idempotency_key || ' ' || c.outcome || ' '
                               || c.response_code || ' ' || c.response_body, E'\n'
                               ORDER BY k.scope, k.idempotency_key)
  FROM idempotency.idempotency_keys k, idempotency.claim(k.idempotency_key, NULL, k.scope) c
 WHERE k.status = 'completed' OR (k.status = 'failed' AND NOT k.retryable))),
	join("\n", map { s/^(\S+) /$1 replay /r } split /\n/, $expected),
	'every completed key replays its answer on the subscriber');

# Fences carry on: the key whose lease ran out is resumed with a fence
# larger than any the publisher gave, and its old holder is fenced.
my $resumed = on_sub(q(SELECT outcome || ' ' || fence FROM idempotency.claim('held', '{"n": -1}')));
like($resumed, qr/^resumed \d+$/, 'the key left held is resumed on the subscriber');
$resumed =~ s/^resumed //;
cmp_ok($resumed, '>', $pub_last{fence_seq}, 'with a fence larger than any the publisher gave');
($ret, $stdout, $stderr) = $sub->psql('postgres',
	"\\set VERBOSITY sqlstate\nSELECT idempotency.complete('held', $held_fence, '{}')");
like($stderr, qr/ERROR:  55000/, 'the publisher\'s holder of it is fenced (55000)');
my $new = on_sub(q(SELECT outcome || ' ' || fence FROM idempotency.claim('after', '{"n": 1}')));
like($new, qr/^claimed \d+$/, 'a new key is claimed on the subscriber');
$new =~ s/^claimed //;
cmp_ok($new, '>', $resumed, 'with a larger fence still');
is( on_sub(q(SELECT c.outcome || ' ' || k.recovery_point
		FROM idempotency.claim('ck', '{"n": 1}') c, idempotency.lookup('ck') k)),
	'in_progress charged', 'a key held under a live lease stays in progress, with its checkpoint');

# Tokens, the inbox and the outbox go on.
is(on_sub("SELECT idempotency.consume_token('$token')"), 't', 'an unused token is consumed on the subscriber');
is(on_sub("SELECT idempotency.consume_token('$spent')"), 'f', 'a consumed one is not');
is( on_sub(q(SELECT idempotency.process_once('billing', 'e1'), idempotency.process_once('billing', 'e9'))),
	'f|t', 'the inbox remembers what the publisher processed');
my $event = on_sub(q(SELECT idempotency.enqueue_event('order', 'o9', 'created', '{}')));
cmp_ok($event, '>', $max_id, 'a new outbox event gets an id beyond the publisher\'s');
my $token_after = on_sub(q(SELECT max(lease_token) FROM idempotency.claim_events(100)));
cmp_ok($token_after, '>', $max_token, 'claim_events leases with a token beyond the publisher\'s');
is(on_sub(qq(SELECT published_at IS NULL FROM idempotency.outbox_events WHERE id = $event)),
	't', 'the new event is pending');

$sub->stop;
$pub->stop;
done_testing();
