# The outcome counts (idempotency.metrics(), doc/reference.md "Metrics")
# where the regression test cannot look: a server without the library
# preloaded (55000, with the hint; claims still work, uncounted), the row
# of the scopes beyond idempotency.metrics_max_scopes (scope NULL), the
# counts of each database apart, a hot standby counting its own replays,
# and a restart starting from zero.  On the portable edition both
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
done_testing();
