# purge_expired() at a million keys: every purge walk is driven by its
# index (the statistics count index scans and no sequential scan), one batch
# is quick, and the live rows stay.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('scale');
idem_init($node);
$node->start;
idem_install($node, 'postgres');
$node->safe_psql('postgres', q{
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, status, fence, created_at, expires_at)
SELECT idempotency.key_hash('', 'k' || g), '', 'k' || g, 'completed', g, now(),
       now() + CASE WHEN g % 2 = 0 THEN interval '-1 hour' ELSE interval '1 hour' END
  FROM generate_series(1, 1000000) g;
INSERT INTO idempotency.tokens (token, created_at, expires_at, consumed_at)
SELECT gen_random_uuid(), now(),
       now() + CASE WHEN g % 2 = 0 THEN interval '-1 hour' ELSE interval '1 hour' END,
       CASE WHEN g % 5 = 1 THEN now() END
  FROM generate_series(1, 100000) g;
INSERT INTO idempotency.processed_events (consumer, event_id, processed_at)
SELECT 'c', g::text, now() - CASE WHEN g % 2 = 0 THEN interval '8 days' ELSE interval '1 day' END
  FROM generate_series(1, 100000) g;
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
SELECT 'o', g::text, 'e', '{}',
       CASE WHEN g % 4 = 0 THEN NULL WHEN g % 2 = 0 THEN now() - interval '8 days' ELSE now() END
  FROM generate_series(1, 100000) g;
ANALYZE;
});

# Scans of the purged relations and their indexes so far, from the
# statistics (flushed at the end of each statement of a session).
sub scans
{
	return $node->safe_psql('postgres', q{
SELECT string_agg(relname || ':' || coalesce(seq_scan, 0), ' ' ORDER BY relname)
  FROM pg_stat_user_tables WHERE schemaname = 'idempotency';
SELECT string_agg(indexrelname || ':' || idx_scan, ' ' ORDER BY indexrelname)
  FROM pg_stat_user_indexes WHERE schemaname = 'idempotency';
});
}

# one batch
my ($seq_before, $idx_before) = split /\n/, scans();
my $start = time;
my ($ret, $out, $err) = $node->psql('postgres', q{
SELECT relation || '=' || deleted FROM idempotency.purge_expired_batch(5000);
});
my $batch_ms = (time - $start) * 1000;
is($ret, 0, 'one batch ran');
is($out, "idempotency_keys=5000\ntokens=5000\nprocessed_events=5000\noutbox_events=5000\nidempotency_keys.response_body=0",
	'at most batch_size rows per relation');
my ($seq_after, $idx_after) = split /\n/, scans();
is($seq_after, $seq_before, 'no sequential scan');
my %before = map { split /:/ } split / /, $idx_before;
my %after = map { split /:/ } split / /, $idx_after;
for my $index (qw(idempotency_keys_expires_at_idx tokens_expires_at_idx
	processed_events_processed_at_idx outbox_events_published_at_idx))
{
	cmp_ok($after{$index}, '>', $before{$index}, "driven by $index");
}

# the consumed tokens, when the expired ones leave room
$node->safe_psql('postgres', 'DELETE FROM idempotency.tokens WHERE expires_at <= now()');
($seq_before, $idx_before) = split /\n/, scans();
$out = $node->safe_psql('postgres', q{
SELECT deleted FROM idempotency.purge_expired_batch(5000) WHERE relation = 'tokens'});
cmp_ok($out, '>', 0, 'consumed tokens purged');
($seq_after, $idx_after) = split /\n/, scans();
%before = map { split /:/ } split / /, $idx_before;
%after = map { split /:/ } split / /, $idx_after;
cmp_ok($after{tokens_consumed_at_idx}, '>', $before{tokens_consumed_at_idx},
	'consumed tokens by their partial index');
is($seq_after, $seq_before, 'no sequential scan for consumed tokens');

# the whole purge, batch after batch
$start = time;
$node->safe_psql('postgres', 'CALL idempotency.purge_expired(10000)');
my $purge_s = time - $start;
$node->safe_psql('postgres', q{SELECT idempotency.claim('after-purge')});

is($node->safe_psql('postgres', q{
SELECT count(*) FILTER (WHERE expires_at <= now()) || ' ' || count(*)
  FROM idempotency.idempotency_keys}), '0 500001', 'expired keys gone, 500000 live ones kept');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL}), '25000',
	'no unpublished event touched');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM idempotency.tokens WHERE expires_at <= now() OR consumed_at IS NOT NULL}), '0',
	'expired and consumed tokens gone');

my ($stats_ms, $t0);
$t0 = time;
$node->safe_psql('postgres', 'SELECT * FROM idempotency.stats');
$stats_ms = (time - $t0) * 1000;
diag(sprintf('one batch of 5000 per relation: %.0f ms; purge_expired(10000) of the rest '
	  . '(495000 keys, ~15000 tokens, 45000 inbox marks, 45000 events): %.1f s; '
	  . 'stats at 500000 keys: %.0f ms',
	  $batch_ms, $purge_s, $stats_ms));

$node->stop;
done_testing();
