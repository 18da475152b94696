# test/t/IdemEdition.pm: how the TAP tests install the extension, by
# edition (doc/portable.md), chosen by the environment variable
# IDEM_EDITION:
#
#   c      (default) CREATE EXTENSION idempotency, as the superuser;
#   plain  the portable edition's plain script, idempotency--<v>.sql, run
#          with psql -f by regress_idem_owner, a role that has CREATE on
#          the database and nothing more;
#   tle    pg_tle preloaded (idem_init); regress_idem_tle, a role with
#          pgtle_admin and CREATE on the database only, runs the installer
#          idempotency-tle.sql, then CREATE EXTENSION idempotency.
#
# The portable scripts are taken from IDEM_EDITION_DIR (default
# build/portable of this repository, `make portable`); psql from PATH,
# like the clusters' binaries.
#
#   idem_edition()                 c, plain or tle
#   idem_portable()                true on the portable edition
#   idem_init($node, %params)      $node->init(%params), pg_tle preloaded
#                                  for tle
#   idem_preload(@libraries)       the value of shared_preload_libraries
#                                  with @libraries (and pg_tle for tle)
#   idem_install($node, $db)       the edition into database $db
#   idem_owner()                   the role that owns the installed objects
package IdemEdition;
use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use PostgreSQL::Test::Utils;

our @EXPORT = qw(idem_edition idem_portable idem_init idem_preload idem_install idem_owner);

my $top = dirname(dirname(dirname(__FILE__)));
my $edition = $ENV{IDEM_EDITION} || 'c';
die "IDEM_EDITION must be c, plain or tle, not \"$edition\"\n"
  unless $edition =~ /^(c|plain|tle)$/;
my %owner = (c => 'postgres', plain => 'regress_idem_owner', tle => 'regress_idem_tle');

sub idem_edition { return $edition; }
sub idem_portable { return $edition ne 'c'; }
sub idem_owner { return $owner{$edition}; }

sub idem_preload
{
	my @libraries = ($edition eq 'tle' ? ('pg_tle') : (), @_);
	return "'" . join(', ', @libraries) . "'";
}

sub idem_init
{
	my ($node, %params) = @_;
	$node->init(%params);
	$node->append_conf('postgresql.conf', 'shared_preload_libraries = ' . idem_preload())
	  if $edition eq 'tle';
	return;
}

# psql as ROLE in DB: the arguments @what (-f FILE or -c STATEMENT)
sub run_as
{
	my ($node, $db, $role, @what) = @_;
	PostgreSQL::Test::Utils::system_or_bail('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-o', '/dev/null',
		'-U', $role, '-d', $node->connstr($db), @what);
	return;
}

sub idem_install
{
	my ($node, $db) = @_;
	if ($edition eq 'c')
	{
		$node->safe_psql($db, 'CREATE EXTENSION idempotency');
		return;
	}
	my $dir = $ENV{IDEM_EDITION_DIR} || "$top/build/portable";
	my ($version) = slurp_file("$top/idempotency.control") =~ /^default_version = '([^']+)'/m
	  or die "no default_version in $top/idempotency.control";
	my $role = idem_owner();
	my $setup = qq(DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$role') THEN CREATE ROLE $role LOGIN; END IF;
END \$\$;
GRANT CREATE ON DATABASE "$db" TO $role;);
	if ($edition eq 'plain')
	{
		$node->safe_psql($db, $setup);
		run_as($node, $db, $role, '-f', "$dir/idempotency--$version.sql");
		return;
	}
	# pgtle_admin exists once pg_tle is created in some database
	$node->safe_psql($db, "CREATE EXTENSION IF NOT EXISTS pg_tle;\n$setup\nGRANT pgtle_admin TO $role;");
	run_as($node, $db, $role, '-f', "$dir/idempotency-tle.sql");
	run_as($node, $db, $role, '-c', 'CREATE EXTENSION idempotency');
	return;
}

1;
