#!/usr/bin/env bash
# test/portable/run.sh: the regression tests (test/sql) and isolation specs
# (test/specs) on the portable edition (doc/portable.md), on PostgreSQL 15
# on the host.  Not part of make test yet.
#
# Each mode gets a private copy of the server WITHOUT the C edition's files
# and a throwaway cluster (as test/run.sh's, on its own socket and port):
#   plain  the plain script (build/portable/idempotency--<v>.sql) run with
#          psql -f by regress_portable_owner, a role with CREATE on the
#          database and nothing more;
#   tle    pg_tle built with PGXS from ../shared/vendor into the copy and
#          preloaded (shared_preload_libraries = 'pg_tle, pg_cron');
#          regress_portable_tle, a role with pgtle_admin and CREATE on the
#          database only, runs build/portable/idempotency-tle.sql and then
#          CREATE EXTENSION idempotency (the installer runs in template1
#          too, so that databases created by tests have it).
# Where the C edition's runs let pg_regress create the database and run
# CREATE EXTENSION (--load-extension), this script creates the database as
# pg_regress does, installs the edition into it, and runs pg_regress and
# pg_isolation_regress with --use-existing.  dblink is installed in each
# test database (pg_cron runs in "postgres"; doc/portable.md, cron).
#
# Expected output: expected/ at the top level, plus the alternatives of
# test/portable/expected/ (both modes, <test>_8.out) and
# test/portable/expected/<mode>/ (<test>_9.out), which pg_regress takes as
# alternatives, for the documented edition differences only.  Tests that
# cannot run on the edition would be skipped with their reason
# (skip_reason below).
#
# PORTABLE_MODES="plain tle" (default both), TEST_GROUPS="regress
# isolation", TESTS="claim tokens" (names, default all), KEEP_WORK=1.
# The last line is "N passed, M failed" (skipped tests are not counted).
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
[ "$PG_MAJOR" = 15 ] || { echo "test/portable/run.sh runs on PostgreSQL 15 (the host) only for now" >&2; exit 2; }
PORTABLE_MODES=${PORTABLE_MODES:-plain tle}
TEST_GROUPS=${TEST_GROUPS:-regress isolation}
PORT=${PORTABLE_PORT:-5491}
. "$IDEM_TOP/test/portable/lib.sh"

# skip_reason MODE TEST: why TEST cannot run on the edition (empty: it
# runs).  None today: no regression test or spec is about the C library's
# internals (memory per call is test/memory.sh, not run here).
skip_reason() {
  :
}

idem_ensure_packages $IDEM_PACKAGES $PORTABLE_PACKAGES || exit 1

WORK=$(mktemp -d /tmp/idempotency-portable.XXXXXX)
chmod 755 "$WORK"
CLUSTER=
cleanup() {
  [ -n "$CLUSTER" ] && idem_stop_cluster "$BIN" "$CLUSTER"
  if [ "${failed:-1}" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then
    rm -rf "$WORK"
  else
    echo "test files and logs kept in $WORK" >&2
  fi
}
trap cleanup EXIT
fail_setup() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

# A copy of the server with no file of the C edition, and pg_tle in it.
BIN=$(portable_server_copy "$WORK") || fail_setup "cannot copy the server"
case " $PORTABLE_MODES " in *" tle "*)
  portable_build_tle "$WORK" || fail_setup "pg_tle build failed" ;;
esac
portable_build_edition "$WORK" || fail_setup "portable.py build failed"

mkdir -p "$WORK/repo"
tar -C "$IDEM_TOP" --exclude=.git --exclude=node_modules --exclude=build -cf - . | tar -C "$WORK/repo" -xf -
rm -rf "$WORK/repo/test/expected"
chown -R postgres: "$WORK"
export PGHOST PGPORT=$PORT PGUSER=postgres

as_postgres() {
  runuser -u postgres -- env PATH="$BIN:$PATH" PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres "$@"
}
psql_as() {	# psql_as ROLE DB ARGS...
  local role=$1 db=$2
  shift 2
  as_postgres psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" "$@"
}

# prepare_db MODE DB: the database as pg_regress creates it, with the
# edition installed by its non-superuser role
prepare_db() {
  local mode=$1 db=$2 s role
  s=""
  for g in "lc_messages TO 'C'" "lc_monetary TO 'C'" "lc_numeric TO 'C'" "lc_time TO 'C'" \
           "bytea_output TO 'hex'" "timezone_abbreviations TO 'Default'"; do
    s="$s ALTER DATABASE \"$db\" SET $g;"
  done
  psql_as postgres postgres -c "DROP DATABASE IF EXISTS \"$db\"" \
    -c "CREATE DATABASE \"$db\" TEMPLATE=template0" -c "$s" || return 1
  psql_as postgres "$db" -c 'CREATE EXTENSION dblink' || return 1
  case $mode in
  plain) role=regress_portable_owner ;;
  tle) role=regress_portable_tle; psql_as postgres "$db" -c 'CREATE EXTENSION pg_tle' || return 1 ;;
  esac
  psql_as postgres "$db" -c "GRANT CREATE ON DATABASE \"$db\" TO $role" &&
  as_postgres bash -c 'IDEM_TOP=$1 && . "$1/scripts/lib.sh" && . "$1/test/portable/lib.sh" && PORTABLE_EDITION=$2 portable_install "$3" "$4" "$5"' \
    - "$WORK/repo" "$PORTABLE_EDITION" "$mode" "$db" "$role"
}

passed=0
failed=0
declare -a results=()

# run_group MODE GROUP: one pg_regress or pg_isolation_regress run
run_group() {
  local mode=$1 group=$2 runner db dir ext tests=() t reason log out
  case $group in
  regress) runner=test/regress/pg_regress db=contrib_regression dir=sql ext=sql ;;
  isolation) runner=test/isolation/pg_isolation_regress db=isolation_regression dir=specs ext=spec ;;
  *) echo "unknown group $group" >&2; return ;;
  esac
  for f in "$WORK/repo/test/$dir"/*.$ext; do
    t=$(basename "$f" .$ext)
    if [ -n "${TESTS:-}" ] && ! [[ " $TESTS " == *" $t "* ]]; then continue; fi
    reason=$(skip_reason "$mode" "$t")
    if [ -n "$reason" ]; then
      results+=("$mode $group $t skipped: $reason")
      continue
    fi
    tests+=("$t")
  done
  [ ${#tests[@]} -gt 0 ] || return 0
  idem_log "$mode $group: ${tests[*]}"
  prepare_db "$mode" "$db" >"$WORK/$mode-$group-setup.log" 2>&1 || {
    cat "$WORK/$mode-$group-setup.log"
    results+=("$mode $group set-up FAILED")
    failed=$((failed + 1))
    return
  }
  out=$WORK/out/$mode-$group
  mkdir -p "$out" && chown postgres: "$out"
  log=$WORK/$mode-$group.log
  (cd "$WORK/repo" && as_postgres nice -n 19 "$PGXS_DIR/src/$runner" --bindir="$BIN" \
    --inputdir=test --outputdir="$out" --use-existing --dbname="$db" "${tests[@]}") >"$log" 2>&1
  cat "$log"
  for t in "${tests[@]}"; do
    if grep -qE "^(test )? *$t +\.\.\. ok" "$log"; then
      results+=("$mode $group $t ok"); passed=$((passed + 1))
    else
      results+=("$mode $group $t FAILED"); failed=$((failed + 1))
    fi
  done
}

for mode in $PORTABLE_MODES; do
  # expected/ with the edition's alternatives
  rm -rf "$WORK/repo/test/expected"
  cp -r "$IDEM_TOP/expected" "$WORK/repo/test/expected"
  cp "$IDEM_TOP/test/portable/expected/"*.out "$WORK/repo/test/expected/" 2>/dev/null
  cp "$IDEM_TOP/test/portable/expected/$mode/"*.out "$WORK/repo/test/expected/" 2>/dev/null
  chown -R postgres: "$WORK/repo/test/expected"

  CLUSTER=$WORK/cluster-$mode
  PGHOST=$CLUSTER
  idem_start_cluster "$BIN" "$CLUSTER" "$PORT" '' || { cat "$CLUSTER/server.log"; fail_setup "$mode: cluster did not start"; }
  if [ "$mode" = tle ]; then
    echo "shared_preload_libraries = 'pg_tle, pg_cron'" >>"$CLUSTER/data/postgresql.conf"
    runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w -s restart ||
      { cat "$CLUSTER/server.log"; fail_setup "tle: cluster did not start with pg_tle"; }
  fi
  psql_as postgres postgres \
    -c 'CREATE ROLE regress_portable_owner LOGIN' -c 'CREATE ROLE regress_portable_tle LOGIN' ||
    fail_setup "$mode: roles"
  if [ "$mode" = tle ]; then
    # pgtle_admin exists once pg_tle is created in some database
    # and the extension registered in template1 too, for the databases
    # that tests create (upgrade, state_machine_partitions)
    psql_as postgres postgres -c 'CREATE EXTENSION pg_tle' \
      -c 'GRANT pgtle_admin TO regress_portable_tle' || fail_setup "tle: pgtle_admin"
    { psql_as postgres template1 -c 'CREATE EXTENSION pg_tle' &&
      psql_as regress_portable_tle template1 -f "$PORTABLE_EDITION/idempotency-tle.sql"; } >/dev/null ||
      fail_setup "tle: idempotency-tle.sql in template1"
  fi
  for group in $TEST_GROUPS; do
    run_group "$mode" "$group"
  done
  idem_stop_cluster "$BIN" "$CLUSTER"
  CLUSTER=
done

echo "---- results"
printf '%s\n' "${results[@]}"
for mode in $PORTABLE_MODES; do
  echo "$mode: $(printf '%s\n' "${results[@]}" | grep -c "^$mode .* ok$") passed," \
    "$(printf '%s\n' "${results[@]}" | grep -c "^$mode .*FAILED$") failed," \
    "$(printf '%s\n' "${results[@]}" | grep -c "^$mode .* skipped: ") skipped"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
