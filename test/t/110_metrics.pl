# The outcome counts (idempotency.metrics(), doc/reference.md "Metrics")
# where the regression test cannot look: a server without the library
# preloaded (55000, with the hint; claims still work, uncounted), the row
# of the scopes beyond idempotency.metrics_max_scopes (scope NULL), the
# counts of each database apart, a hot standby counting its own replays,
# a restart starting from zero, a crash restart (reset_at moves) and the
# rows of dropped databases freed.  On the portable edition both
# functions raise 0A000 (sql/portable/metrics.sql).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('metrics');
idem_init($primary, allows_streaming => 1);
$primary->start;
idem_install($primary, 'postgres');

# Not preloaded: the functions refuse, the calls they would count work.
my $code = idem_portable() ? '0A000' : '55000';
for my $call ('SELECT * FROM idempotency.metrics', 'SELECT idempotency.metrics_reset()')
{
	my ($ret, $out, $err) = $primary->psql('postgres', "\\set VERBOSITY verbose\n$call");
	like($err, qr/ERROR:\s+$code:/, "not preloaded: $call raises $code");
}
if (idem_portable())
{
	my ($ret, $out, $err) = $primary->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT * FROM idempotency.metrics()");
	like($err, qr/HINT:\s+Use the C edition with idempotency in shared_preload_libraries/,
		'the portable edition names the C edition');
	done_testing();
	exit;
}
my ($ret, $out, $err) = $primary->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT * FROM idempotency.metrics()");
like($err, qr/HINT:\s+Add idempotency to shared_preload_libraries and restart the server\./,
	'the hint says how to enable them');
is($primary->safe_psql('postgres', q(SELECT outcome FROM idempotency.claim('unpreloaded'))),
	'claimed', 'claims work without the counts');

# Preloaded, with room for two scopes.
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = @{[ idem_preload('idempotency') ]}
idempotency.metrics_max_scopes = 2
});
$primary->restart;
is($primary->safe_psql('postgres', 'SHOW idempotency.metrics_max_scopes'), '2',
	'metrics_max_scopes is set at start');
is( $primary->safe_psql('postgres',
		q(SELECT count(*) || ' ' || coalesce(sum(claimed), 0) FROM idempotency.metrics)),
	'1 0', 'after a restart only the row of scope NULL, at zero');

$primary->safe_psql('postgres', q{
SELECT idempotency.claim('k' || g, scope => s, lease => '1 hour')
  FROM unnest(ARRAY['s1', 's2', 's3', 's4']) s, generate_series(1, 3) g;
SELECT idempotency.complete('k1', fence, '{}', scope => scope)
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'k1';
SELECT idempotency.claim('k1', scope => s) FROM unnest(ARRAY['s1', 's3']) s;
});
is( $primary->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed || ' ' || replay, ', ')
		    FROM idempotency.metrics)),
	's1 3 1, s2 3 0, NULL 6 1',
	'two scopes have rows, the others count in the row whose scope is NULL');

# Another database: its scopes find the table full too, and go to its
# own row of scope NULL; it sees none of the other database's rows.
$primary->safe_psql('postgres', 'CREATE DATABASE other');
idem_install($primary, 'other');
$primary->safe_psql('other', q(SELECT idempotency.claim('k1', scope => 's1')));
is( $primary->safe_psql('other',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed, ', ') FROM idempotency.metrics)),
	'NULL 1', 'another database has its own rows');
$primary->safe_psql('other', 'SELECT idempotency.metrics_reset()');
is( $primary->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed, ', ') FROM idempotency.metrics)),
	's1 3, s2 3, NULL 6',
	'a reset of all in another database leaves this one\'s rows');

# A hot standby counts its own replays; the primary's counts stay.
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('metrics_standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is( $standby->safe_psql('postgres',
		q(SELECT outcome FROM idempotency.claim('k1', scope => 's1'))),
	'replay', 'a replay on the standby');
is( $standby->safe_psql('postgres',
		q(SELECT outcome FROM idempotency.claim('k2', scope => 's1'))),
	'in_progress', 'an in_progress on the standby');
is( $standby->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || replay || ' ' || in_progress, ', ') FROM idempotency.metrics)),
	's1 1 1, NULL 0 0', 'the standby counted them');
$standby->safe_psql('postgres', q(SELECT idempotency.metrics_reset('s1')));
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'a reset on the standby: still in recovery');
is( $primary->safe_psql('postgres',
		q(SELECT replay || ' ' || in_progress FROM idempotency.metrics WHERE scope = 's1')),
	'1 0', 'the primary\'s counts are its own');
$standby->stop;

ok(!(slurp_file($primary->logfile) =~ /TRAP|PANIC|server process .* was terminated/),
	'the primary log shows no crash');

# A crash restart (a backend killed with SIGKILL makes the postmaster
# restart every backend and set up the shared memory again): the counts
# start from zero, and reset_at says when they did, not the server's start
# (pg_postmaster_start_time() does not move).
$primary->append_conf('postgresql.conf', "restart_after_crash = on\n");
$primary->reload;
my $before_crash = $primary->safe_psql('postgres', 'SELECT clock_timestamp()');
my $victim = $primary->background_psql('postgres');
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
my $log_offset = -s $primary->logfile;
kill 'KILL', $victim_pid or die "could not kill backend $victim_pid: $!";
eval { $victim->quit; };
$primary->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
$primary->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back after the crash';
is( $primary->safe_psql('postgres', qq(
		SELECT count(*) || ' ' || sum(claimed + replay) || ' ' || bool_and(reset_at > '$before_crash')
		       || ' ' || (pg_postmaster_start_time() < '$before_crash')
		  FROM idempotency.metrics)),
	'1 0 true true', 'after a crash restart: zero, and reset_at is when counting restarted');
$primary->safe_psql('postgres', q(SELECT idempotency.claim('k1', scope => 's1')));
is( $primary->safe_psql('postgres', qq(
		SELECT string_agg(coalesce(scope, 'NULL') || ' ' || replay || ' ' || (reset_at > '$before_crash'), ', ')
		  FROM idempotency.metrics)),
	's1 1 true, NULL 0 true', 'and counts again');

# The rows of a dropped database are freed.  Database "other" takes the
# last row of a scope; a session here, finding the table full, counts
# scope p1 in the row of scope NULL.
$primary->safe_psql('other', q(SELECT idempotency.claim('k1', scope => 'o1')));
my $session = $primary->background_psql('postgres');
$session->query_safe(q(SELECT idempotency.claim('p1', scope => 'p1')));
is( $primary->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed, ', ') FROM idempotency.metrics)),
	's1 0, NULL 1', 'the table is full: p1 is counted in the row of scope NULL');
# DROP DATABASE frees its rows (no metrics() is read before the claim);
# the session that counted p1 in the row of scope NULL finds room now.
$primary->safe_psql('postgres', 'DROP DATABASE other');
$session->query_safe(q(SELECT idempotency.claim('p1', scope => 'p1')));
$session->quit;
is( $primary->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed || ' ' || in_progress, ', ')
		    FROM idempotency.metrics)),
	'p1 0 1, s1 0 0, NULL 1 0',
	'the rows of the dropped database are freed: p1 has its row');

# On a hot standby a drop arrives by the WAL, where no hook of the
# library runs: the rows of databases gone from pg_database are freed
# when metrics() is read.  (A new standby: the first one, stopped, may
# have lost the WAL it needs by now.)
$primary->safe_psql('postgres', 'CREATE DATABASE metrics_template');
idem_install($primary, 'metrics_template');
$primary->safe_psql('postgres', 'CREATE DATABASE metrics_standby TEMPLATE metrics_template');
for my $db ('metrics_standby', 'postgres')
{
	my @scopes = $db eq 'postgres' ? ('z1', 'z2') : ('x1', 'x2');
	$primary->safe_psql($db, qq{
SELECT idempotency.claim('r', scope => s) FROM unnest(ARRAY['$scopes[0]', '$scopes[1]']) s;
SELECT idempotency.complete('r', fence, '{}', scope => scope)
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'r';
});
}
$primary->backup('base2');
my $standby2 = PostgreSQL::Test::Cluster->new('metrics_standby2');
$standby2->init_from_backup($primary, 'base2', has_streaming => 1);
$standby2->start;
$primary->wait_for_catchup($standby2);
$standby2->safe_psql('metrics_standby',
	q(SELECT idempotency.claim('r', scope => s) FROM unnest(ARRAY['x1', 'x2']) s));
$primary->safe_psql('postgres', 'DROP DATABASE metrics_standby');
$primary->wait_for_catchup($standby2);
$standby2->safe_psql('postgres', q(SELECT idempotency.claim('r', scope => 'z1')));
is( $standby2->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || replay, ', ') FROM idempotency.metrics)),
	'NULL 1', 'on the standby the dropped database\'s rows stay until metrics() is read');
$standby2->safe_psql('postgres', q(SELECT idempotency.claim('r', scope => 'z2')));
is( $standby2->safe_psql('postgres',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || replay, ', ') FROM idempotency.metrics)),
	'z2 1, NULL 1', 'then they are freed: z2 has its row');
$standby2->stop;

# The rows of scope NULL: room for 64 databases here.  Databases that
# counted in theirs and were dropped leave room for new ones.
for my $i (1 .. 70)
{
	$primary->safe_psql('postgres', "CREATE DATABASE metrics_$i TEMPLATE metrics_template");
	# adds the database's row of scope NULL, for its reset_at
	$primary->safe_psql("metrics_$i", 'SELECT idempotency.metrics_reset()');
	$primary->safe_psql('postgres', "DROP DATABASE metrics_$i");
}
$primary->safe_psql('postgres', 'CREATE DATABASE metrics_last TEMPLATE metrics_template');
$primary->safe_psql('metrics_last',
	q(SELECT idempotency.claim('k' || g, scope => 'q1') FROM generate_series(1, 2) g));
is( $primary->safe_psql('metrics_last',
		q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed, ', ') FROM idempotency.metrics)),
	'NULL 2', 'after 70 databases came and went, a new one has its row of scope NULL');

done_testing();
