# test/pooler/package.bash: sourced by the client packages' pooler tests
# (test/pooler/node.sh, python.sh, go.sh, java.sh), not run.  It sources
# scripts/lib.sh, pooler.bash and the integration tests' readme_block.bash,
# wait_burst/wait_burst.bash and fresh_db.bash, and sets $IDEM_TOP and
# $it (test/integration).
#
# pooler_package_setup WHAT DB: for the host's run only (in a chroot it
#   says WHAT is the host's and exits); the fresh database DB, a temporary
#   directory $tmp, and PgBouncer in transaction mode in front of DB with
#   pools of 4 ($port4) and 2 ($port2); on exit they are stopped, $server
#   (a process, or a process group, of the test's) is killed and $tmp
#   removed.  $direct is DB's own address as a URL, where the packages'
#   relays LISTEN (the cluster's socket directory is a plain path), and
#   $direct_host, $direct_port the same as libpq parameters; $db is DB.
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
it=$IDEM_TOP/test/integration
for f in "$IDEM_TOP/scripts/lib.sh" "$here/pooler.bash" "$it/readme_block.bash" \
  "$it/wait_burst/wait_burst.bash" "$it/fresh_db.bash"; do
  . "$f"
done

pooler_package_cleanup() {
  [ -z "${server:-}" ] || kill -- -"$server" 2>/dev/null || kill "$server" 2>/dev/null || true
  pooler_stop "$tmp/pool4"
  pooler_stop "$tmp/pool2"
  rm -rf "$tmp"
}

pooler_package_setup() {
  idem_host_only "tests $1 through PgBouncer"
  fresh_db "$2"
  tmp=$(mktemp -d /tmp/idem-pooler-package.XXXXXX)
  chmod 755 "$tmp"	# PgBouncer runs as postgres, in $tmp/pool*
  server=
  trap pooler_package_cleanup EXIT
  db=$PGDATABASE direct_host=$PGHOST direct_port=$PGPORT
  direct="postgresql://$PGUSER@/$PGDATABASE?host=$PGHOST&port=$PGPORT"
  port4=$(idem_free_port)
  pooler_start "$tmp/pool4" "$port4" 4
  port2=$(idem_free_port)
  pooler_start "$tmp/pool2" "$port2" 2
}
