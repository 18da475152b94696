# test/integration/lib.bash: the set-up and cleanup that the integration
# scripts share.  Sourced first, not run:
#
#   . "$(dirname "$0")/lib.bash"
#
# It turns on -euo pipefail, sets IDEM_TOP (and TOP, the same) and sources
# scripts/lib.sh (PG_MAJOR, PG_BIN, idem_start_cluster, ...).  BIN is the
# test run's server copy with the extension installed (IDEM_TEST_BIN, set by
# test/run.sh), or empty.  Then:
#
#   work_dir NAME    WORK: a new directory NAME.XXXXXX under the test run's
#                    work directory (IDEM_TEST_WORK, else /tmp), readable by
#                    all and, when run as root, owned by postgres.  It is
#                    removed at exit when the script succeeded and
#                    KEEP_WORK is unset, else kept and named on stderr.
#   at_exit COMMAND  run COMMAND (a string, evaluated then) when the script
#                    exits, whatever its outcome, the last one given first;
#                    the work directory goes after them all.  A failing
#                    COMMAND neither stops the others nor changes the exit
#                    status.
#   fail MESSAGE     print "FAIL: MESSAGE" and exit 1
#   skip MESSAGE     print "skipped: MESSAGE" and exit 0 (a test that
#                    cannot run here)
#   as_pg CMD...     CMD as the postgres OS user against the test cluster
#                    (PGHOST, PGPORT), user postgres, warnings only
#   psql_pg ARG...   psql on the test cluster as postgres, unaligned, tuples
#                    only, stopping at the first error, with ARG...
#   q DB SQL         psql_pg in database DB, running SQL
#   install_test_module NAME  builds test/modules/NAME (PGXS) in WORK
#                    against the system's headers and installs it into BIN's
#                    server copy (as idem_private_install does for the
#                    extension)
set -euo pipefail
IDEM_TOP=${IDEM_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TOP=$IDEM_TOP
export IDEM_TOP
. "$IDEM_TOP/scripts/lib.sh"
BIN=${IDEM_TEST_BIN:-}
WORK=

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "skipped: $*"; exit 0; }

as_pg() {
  runuser -u postgres -- env PGHOST="${PGHOST:-}" PGPORT="${PGPORT:-}" PGUSER=postgres \
    PGOPTIONS='-c client_min_messages=warning' "$@"
}
psql_pg() { as_pg "${BIN:+$BIN/}psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
q() { psql_pg -d "$1" -c "$2"; }

work_dir() {
  WORK=$(mktemp -d "${IDEM_TEST_WORK:-/tmp}/$1.XXXXXX")
  chmod 755 "$WORK"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$WORK"
}

_at_exit=()
at_exit() { _at_exit+=("$1"); }
_exit_steps() {
  local rc=$? i
  set +e
  for ((i = ${#_at_exit[@]} - 1; i >= 0; i--)); do
    eval "${_at_exit[i]}"
  done
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    if [ "$rc" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then
      rm -rf "$WORK"
    else
      echo "work kept in $WORK" >&2
    fi
  fi
  return "$rc"
}
trap _exit_steps EXIT

install_test_module() {
  cp -r "$IDEM_TOP/test/modules/$1" "$WORK/"
  make -s -C "$WORK/$1" PG_CONFIG="$PG_BIN/pg_config" >/dev/null ||
    fail "building test/modules/$1"
  make -s -C "$WORK/$1" PG_CONFIG="$BIN/pg_config" install >/dev/null ||
    fail "installing test/modules/$1"
}
