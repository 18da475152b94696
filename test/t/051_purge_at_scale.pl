# purge_expired() at a million keys: every purge statement is driven by an
# index (plans from auto_explain, no sequential scan), one batch is quick,
# and the live rows stay.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('scale');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION idempotency;
INSERT INTO idempotency.idempotency_keys (scope, idempotency_key, status, fence, created_at, expires_at)
SELECT '', 'k' || g, 'completed', g, now(),
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

# one batch, with the plan of every statement it runs
my $start = time;
my ($ret, $out, $err) = $node->psql('postgres', q{
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET client_min_messages = log;
SELECT relation || '=' || deleted FROM idempotency.purge_expired_batch(5000);
});
my $batch_ms = (time - $start) * 1000;
is($ret, 0, 'one batch ran');
is($out, "idempotency_keys=5000\ntokens=5000\nprocessed_events=5000\noutbox_events=5000",
	'at most batch_size rows per relation');
for my $index (qw(idempotency_keys_expires_at_idx tokens_expires_at_idx
	processed_events_processed_at_idx outbox_events_published_at_idx))
{
	like($err, qr/Index Scan using $index/, "driven by $index");
}
unlike($err, qr/Seq Scan/, 'no sequential scan');
like($err, qr/Tid Scan/, 'rows deleted by ctid');

# the consumed-token statement, when the expired ones leave room
($ret, $out, $err) = $node->psql('postgres', q{
DELETE FROM idempotency.tokens WHERE expires_at <= now();
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET client_min_messages = log;
SELECT deleted FROM idempotency.purge_expired_batch(5000) WHERE relation = 'tokens';
});
like($err, qr/Index Scan using tokens_consumed_at_idx/, 'consumed tokens by their partial index');
unlike($err, qr/Seq Scan/, 'no sequential scan for consumed tokens');

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
