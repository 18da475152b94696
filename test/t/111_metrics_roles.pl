# The rows of idempotency.metrics() per role (doc/reference.md,
# "Metrics"): the rows are the cluster's, and before 1.8 one role counting
# calls in ever new scopes took them all until the next restart, so every
# later scope's calls went to the row of scope NULL.  Now a role adds at
# most idempotency.metrics_max_scopes_per_role rows; its further scopes
# count in the row of scope NULL, and another role's new scopes still get
# rows of their own.  The setting takes effect at a reload.  The portable
# edition has no counts (sql/portable/metrics.sql).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use IdemEdition;
use Test::More;

plan skip_all => 'the portable edition has no counts' if idem_portable();

my $node = PostgreSQL::Test::Cluster->new('metrics_roles');
idem_init($node);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = @{[ idem_preload('idempotency') ]}
idempotency.metrics_max_scopes = 6
idempotency.metrics_max_scopes_per_role = 2
});
$node->start;
idem_install($node, 'postgres');
$node->safe_psql('postgres', q{
CREATE ROLE regress_greedy;
CREATE ROLE regress_other;
SELECT idempotency.grant_usage('regress_greedy'), idempotency.grant_usage('regress_other');
});

my $rows = q(SELECT string_agg(coalesce(scope, 'NULL') || ' ' || claimed, ', ') FROM idempotency.metrics);

# The greedy role counts in five scopes: two get rows, three go to NULL.
$node->safe_psql('postgres', q{
SET ROLE regress_greedy;
SELECT idempotency.claim('k', scope => 'g' || i) FROM generate_series(1, 5) i;
});
is($node->safe_psql('postgres', $rows), 'g1 1, g2 1, NULL 3',
	'a role adds at most metrics_max_scopes_per_role rows; its further scopes count in the row of scope NULL');

# Another role, later: the table still has room for its scopes, also for
# one that the greedy role could not add.
$node->safe_psql('postgres', q{
SET ROLE regress_other;
SELECT idempotency.claim('ko', scope => s) FROM unnest(ARRAY['o1', 'g3']) s;
SELECT idempotency.claim('k2', scope => 'g1');
});
is($node->safe_psql('postgres', $rows), 'g1 2, g2 1, g3 1, o1 1, NULL 3',
	'another role\'s scopes get rows of their own; a row counts every role\'s calls');

# Its third scope is one too many for it as well.
$node->safe_psql('postgres',
	q{SET ROLE regress_other; SELECT idempotency.claim('k', scope => 'o2');});
is($node->safe_psql('postgres', $rows), 'g1 2, g2 1, g3 1, o1 1, NULL 4',
	'each role has its own share');

# A SECURITY DEFINER function of a superuser does not lift the share: the
# role is the session's.
$node->safe_psql('postgres', q{
CREATE FUNCTION public.claim_as_owner(s text) RETURNS text
LANGUAGE sql SECURITY DEFINER AS $$ SELECT outcome FROM idempotency.claim('k', scope => s) $$;
GRANT EXECUTE ON FUNCTION public.claim_as_owner(text) TO regress_greedy;
SET ROLE regress_greedy;
SELECT public.claim_as_owner('g6');
});
is($node->safe_psql('postgres', $rows), 'g1 2, g2 1, g3 1, o1 1, NULL 5',
	'counted as the session\'s role inside a SECURITY DEFINER function');

# A reload raises the share.
$node->safe_psql('postgres', 'ALTER SYSTEM SET idempotency.metrics_max_scopes_per_role = 3');
$node->reload;
$node->poll_query_until('postgres', 'SHOW idempotency.metrics_max_scopes_per_role', '3')
  or die 'the reload did not take';
$node->safe_psql('postgres',
	q{SET ROLE regress_greedy; SELECT idempotency.claim('k2', scope => 'g4');});
is($node->safe_psql('postgres', $rows), 'g1 2, g2 1, g3 1, g4 1, o1 1, NULL 5',
	'after a reload the role may add one more row');

# Only a superuser sets it.
my ($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE regress_greedy;\nSET idempotency.metrics_max_scopes_per_role = 100");
like($err, qr/cannot be changed now|permission denied/, 'a session cannot change it');

$node->stop;
done_testing();
