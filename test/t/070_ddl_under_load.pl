# test/t/070_ddl_under_load.pl: indexes and triggers come and go on the
# table of keys while clients claim and complete (doc/reference.md,
# "Writes").  Every write goes through the executor, which learns of each
# change when it takes its lock, so:
#   - no backend crashes and no client sees an error;
#   - every index is sound and complete at the end (amcheck's
#     bt_index_check with heapallindexed), a partial index holds only the
#     rows of its predicate;
#   - every trigger fired for every row written after it was created and
#     before it was dropped.
#
#   STRESS_SECONDS  how long the DDL loop runs (default 15)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;
use Time::HiRes qw(time);

my $seconds = $ENV{STRESS_SECONDS} // 15;
my $node = PostgreSQL::Test::Cluster->new('ddl');
idem_init($node);
$node->append_conf('postgresql.conf', "log_min_messages = warning\n");
$node->start;
idem_install($node, 'postgres');
$node->safe_psql('postgres', q{
CREATE EXTENSION amcheck;
-- what the triggers saw: the generation of the trigger and the key.
-- The extension's owner writes the keys, so the triggers run as it; the
-- portable edition runs them under its functions' search_path
-- (doc/portable.md, "Edition differences"): the name is qualified.
CREATE TABLE fired (gen int NOT NULL, op text NOT NULL, key text NOT NULL);
CREATE FUNCTION record_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.fired VALUES (TG_ARGV[0]::int, TG_OP, NEW.idempotency_key);
  RETURN NEW;
END $$;
-- the lifetime of each generation: after "created", before "dropped"
CREATE TABLE generations (gen int PRIMARY KEY, created timestamptz, dropped timestamptz);
});
$node->safe_psql('postgres', 'GRANT INSERT ON fired TO ' . idem_owner());

# Clients: claim a new key, then complete it (two statements, each its own
# transaction), as fast as they can.
my $script = $PostgreSQL::Test::Utils::tmp_check . '/claims.sql';
open my $fh, '>', $script or die $!;
print $fh <<'SQL';
\set n random(1, 1000000000)
SELECT fence AS f FROM idempotency.claim('k-' || :client_id || '-' || :n, '{"n": 1}') \gset
SELECT idempotency.complete('k-' || :client_id || '-' || :n, :f, '{"ok": true}');
SQL
close $fh;
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', $seconds + 2, '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \my $bench_out, '2>', \my $bench_err);

# The DDL loop: each generation adds an expression index, a partial index
# and a trigger, lets the clients write, and drops them again.
my $deadline = time() + $seconds;
my $gen = 0;
while (1)
{
	$gen++;
	$node->safe_psql('postgres', qq{
CREATE INDEX ddl_lower_$gen ON idempotency.idempotency_keys (lower(idempotency_key));
CREATE INDEX ddl_done_$gen ON idempotency.idempotency_keys (updated_at) WHERE status = 'completed';
CREATE TRIGGER ddl_record_$gen AFTER INSERT OR UPDATE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION record_write('$gen');
});
	# the trigger committed above: statements that start from now on see it
	$node->safe_psql('postgres', "INSERT INTO generations VALUES ($gen, clock_timestamp(), NULL)");
	select(undef, undef, undef, 0.3);
	$node->safe_psql('postgres', "UPDATE generations SET dropped = clock_timestamp() WHERE gen = $gen");
	# the last generation stays, for the checks below
	last if time() >= $deadline;
	$node->safe_psql('postgres', qq{
DROP TRIGGER ddl_record_$gen ON idempotency.idempotency_keys;
DROP INDEX idempotency.ddl_lower_$gen, idempotency.ddl_done_$gen;
});
}
$pgbench->finish;
like($bench_out, qr/number of failed transactions: 0/, 'the clients saw no error')
  or diag($bench_err);
cmp_ok($gen, '>=', 3, "$gen generations of indexes and triggers came and went");

my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM idempotency.idempotency_keys');
cmp_ok($rows, '>', 100, "$rows keys were claimed meanwhile");

# Every row a statement wrote while a trigger existed (started after its
# creation committed, ended before its drop began) was seen by it: the
# claim (INSERT) by its created_at, the complete (UPDATE) by its updated_at.
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM generations g
	  JOIN idempotency.idempotency_keys k
	    ON k.created_at > g.created AND k.created_at < g.dropped - interval '50 ms'
	 WHERE NOT EXISTS (SELECT 1 FROM fired f
	                    WHERE f.gen = g.gen AND f.op = 'INSERT' AND f.key = k.idempotency_key)}),
	'0', 'every trigger fired for every key claimed while it existed');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM generations g
	  JOIN idempotency.idempotency_keys k
	    ON k.updated_at > g.created AND k.updated_at < g.dropped - interval '50 ms'
	       AND k.status = 'completed'
	 WHERE NOT EXISTS (SELECT 1 FROM fired f
	                    WHERE f.gen = g.gen AND f.op = 'UPDATE' AND f.key = k.idempotency_key)}),
	'0', 'every trigger fired for every key completed while it existed');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM fired'), '>', 0, 'the triggers fired');

# Every index is sound and holds every row it should.
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT bt_index_check(i.indexrelid, true)
	    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	   WHERE i.indrelid = 'idempotency.idempotency_keys'::regclass) checked}),
	'5', 'bt_index_check(heapallindexed) passes on every index of the keys');
is( $node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM idempotency.idempotency_keys
	 WHERE status = 'completed' AND updated_at > '-infinity'}),
	$node->safe_psql('postgres', q{
	SELECT count(*) FROM idempotency.idempotency_keys WHERE status = 'completed'}),
	'the partial index holds exactly the completed keys');
ok(!(slurp_file($node->logfile) =~ /TRAP|PANIC|terminated by signal/), 'no backend crashed');
done_testing();
