# purge_expired() commits its batches with synchronous_commit off, yet what
# it deleted is durable once the CALL returns: an immediate shutdown (a
# crash) right after it brings no expired key back, whether the last batch
# deleted rows or nothing (then it takes a transaction id to flush).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('durable');
idem_init($node);
$node->append_conf('postgresql.conf', "wal_writer_delay = 10s\n");
$node->start;
idem_install($node, 'postgres');

# rows: expired keys to load; the batch size is 1000
foreach my $rows (20000, 20500)
{
	$node->safe_psql('postgres', qq{
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, status, fence, created_at, expires_at)
SELECT idempotency.key_hash('', 'k' || g), '', 'k' || g, 'completed', g, now() - interval '2 hours', now() - interval '1 hour'
  FROM generate_series(1, $rows) g;
CHECKPOINT;
});
	$node->safe_psql('postgres', 'CALL idempotency.purge_expired(1000)');
	$node->stop('immediate');
	$node->start;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM idempotency.idempotency_keys'),
		'0', "$rows expired keys purged, none back after a crash");
}

$node->stop;
done_testing();
