# schedule_cleanup() on a real pg_cron: 0A000 without it, then a job that
# runs purge_expired() from pg_cron's database ("postgres") in database
# "app", removes what expired and keeps what is live; the same-database
# path, the one-job-per-user rule and the non-superuser password rule (on
# the portable edition: the statement to run in pg_cron's database).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('cron');
idem_init($node);
$node->start;

# without pg_cron loaded: 0A000, with a hint on installing it
idem_install($node, 'postgres');
my ($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT idempotency.schedule_cleanup()");
like($err, qr/ERROR:\s+0A000: pg_cron is not loaded/, 'no pg_cron: 0A000');
like($err, qr/HINT:.*postgresql-15-cron.*shared_preload_libraries/,
	'the hint says how to install it');
($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT idempotency.unschedule_cleanup()");
like($err, qr/0A000/, 'unschedule without pg_cron: 0A000');

# pg_cron preloaded, its jobs connect over our socket
my $host = $node->host;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = @{[ idem_preload('pg_cron') ]}
cron.database_name = 'postgres'
cron.host = '$host'
});
$node->restart;

$node->safe_psql('postgres', 'CREATE DATABASE app');
idem_install($node, 'app');
$node->safe_psql('app', q{
SELECT idempotency.claim('live');
SELECT idempotency.claim('old-' || g) FROM generate_series(1, 100) g;
UPDATE idempotency.idempotency_keys
   SET expires_at = now() - interval '1 minute', locked_until = NULL, status = 'completed'
 WHERE idempotency_key LIKE 'old-%';
SELECT idempotency.issue_token();
SELECT idempotency.consume_token(idempotency.issue_token());
INSERT INTO idempotency.processed_events (consumer, event_id, processed_at)
VALUES ('c', 'old', now() - interval '30 days'), ('c', 'new', now());
});

# The portable edition reaches pg_cron's database only through dblink
# (doc/portable.md, "Edition differences"): without it, 0A000 with a hint
# that gives the statement to run there; then dblink is installed in app.
if (idem_portable())
{
	($ret, $out, $err) = $node->psql('app',
		"\\set VERBOSITY verbose\nSELECT idempotency.schedule_cleanup('* * * * *')");
	like($err, qr/ERROR:\s+0A000: pg_cron runs in database "postgres", which this edition reaches only through dblink/,
		'portable edition without dblink: 0A000');
	like($err, qr/HINT:\s+Run CREATE EXTENSION dblink in this database, or run in database "postgres": SELECT cron\.schedule_in_database\('idempotency-cleanup', '\*\/5 \* \* \* \*', 'CALL idempotency\.purge_expired\(\)', 'app'\);/,
		'the hint gives the statement to run in pg_cron\'s database');
	$node->safe_psql('app', 'CREATE EXTENSION dblink');
}

# pg_cron lives in "postgres": the job is written there, and pg_cron is
# created there on the way (the library is loaded)
my $jobid = $node->safe_psql('app', q{SELECT idempotency.schedule_cleanup('* * * * *')});
ok($jobid > 0, "scheduled job $jobid");
is($node->safe_psql('app', q{SELECT idempotency.schedule_cleanup('* * * * *')}),
	$jobid, 'scheduling again returns the same job');
is( $node->safe_psql('postgres',
		"SELECT jobname || ' ' || database || ' ' || command FROM cron.job WHERE jobid = $jobid"),
	'idempotency-cleanup app CALL idempotency.purge_expired()',
	'the job runs purge_expired in app');

# pg_cron 1.4 runs jobs at minute boundaries
my $ran = $node->poll_query_until('postgres', qq{
SELECT EXISTS (SELECT 1 FROM cron.job_run_details WHERE jobid = $jobid AND status = 'succeeded')});
ok($ran, 'pg_cron ran the job and it succeeded');
diag($node->safe_psql('postgres',
	"SELECT status, return_message FROM cron.job_run_details WHERE jobid = $jobid"))
  unless $ran;

is($node->safe_psql('app',
		q{SELECT string_agg(idempotency_key, ',' ORDER BY idempotency_key) FROM idempotency.idempotency_keys}),
	'live', 'expired keys gone, the live key kept');
is($node->safe_psql('app', q{SELECT count(*) FROM idempotency.tokens WHERE consumed_at IS NULL}),
	'1', 'the live token kept');
is($node->safe_psql('app', q{SELECT count(*) FROM idempotency.tokens}),
	'1', 'the consumed token gone');
is($node->safe_psql('app', q{SELECT string_agg(event_id, ',') FROM idempotency.processed_events}),
	'new', 'old inbox marks gone, recent ones kept');

# one job per user: another database cannot take it over silently
($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT idempotency.schedule_cleanup()");
like($err, qr/42710: pg_cron job "idempotency-cleanup" of this user already runs in database "app"/,
	'a second database is told the job is taken');
is($node->safe_psql('app', 'SELECT idempotency.unschedule_cleanup()'), 't', 'unscheduled');
is($node->safe_psql('app', 'SELECT idempotency.unschedule_cleanup()'), 'f',
	'unscheduling again: false');

# in pg_cron's own database the job is written in the caller's transaction
my $local = $node->safe_psql('postgres', q{SELECT idempotency.schedule_cleanup('0 4 * * *')});
ok($local > 0, 'scheduled from pg_cron\'s own database');
$node->safe_psql('postgres',
	q{BEGIN; SELECT idempotency.schedule_cleanup('5 4 * * *'); ROLLBACK;});
is($node->safe_psql('postgres', "SELECT schedule || ' ' || database FROM cron.job WHERE jobid = $local"),
	'0 4 * * * postgres', 'a rolled back reschedule leaves the job as it was');
is($node->safe_psql('postgres', 'SELECT idempotency.unschedule_cleanup()'), 't',
	'unscheduled in pg_cron\'s own database');

# a non-superuser to whom the owner granted schedule_cleanup may not reach
# pg_cron's database through the server's own (trust) authentication
$node->safe_psql('app', q{
CREATE ROLE regress_ops LOGIN;
GRANT USAGE ON SCHEMA idempotency TO regress_ops;
GRANT EXECUTE ON FUNCTION idempotency.schedule_cleanup(text) TO regress_ops;
});
# the portable schedule_cleanup() runs its helper with the caller's rights
# (doc/portable.md, "Helpers and grants"), and reaches pg_cron's database
# through dblink for a superuser only: anyone else is told what to run there
$node->safe_psql('app',
	'GRANT EXECUTE ON FUNCTION idempotency.portable_cron_query(text) TO regress_ops')
  if idem_portable();
($ret, $out, $err) = $node->psql('app',
	"\\set VERBOSITY verbose\nSET ROLE regress_ops;\nSELECT idempotency.schedule_cleanup()");
if (idem_portable())
{
	like($err, qr/0A000: pg_cron runs in database "postgres", which this edition reaches only through dblink/,
		'non-superuser: 0A000, not through dblink');
	like($err, qr/HINT:  As this role, run in database "postgres": SELECT cron\.schedule_in_database\('idempotency-cleanup', '\*\/5 \* \* \* \*', 'CALL idempotency\.purge_expired\(\)', 'app'\);/,
		'non-superuser: the hint gives the statement to run in pg_cron\'s database');
}
else
{
	like($err, qr/2F003: password is required/, 'non-superuser without a password: refused');
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM cron.job'), '0', 'no job left behind');

$node->safe_psql('app', 'DROP OWNED BY regress_ops; DROP ROLE regress_ops');
$node->stop;
done_testing();
