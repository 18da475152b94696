#!/usr/bin/env bash
# test/portable/run.sh: the regression tests (test/sql), isolation specs
# (test/specs), pgTAP tests (test/pgtap), the update path
# (test/portable/update.sh), dump and restore (test/portable/dump.sh),
# the catalog against the C edition's (test/portable/catalog.sh) and the
# two paths of execute()'s lexer (test/portable/lexer.sh) on
# the portable edition (doc/portable.md), on
# the PostgreSQL major that runs natively here: the host's 15, or 17 and 18
# inside their chroots, where test/run.sh's group "portable" runs it
# (make test; doc/testing.md).
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
# test database (pg_cron runs in "postgres"; doc/portable.md, cron).  The
# pgTAP tests run with pg_prove in a database prepared alike, with pgtap.
#
# Expected output: expected/ at the top level, plus the alternatives of
# test/portable/expected/ (both modes, <test>_8.out; <test>_7.out for the
# same on the majors whose core prints otherwise, as expected/<test>_1.out
# is for the C edition: doc/testing.md) and
# test/portable/expected/<mode>/ (<test>_9.out), which pg_regress takes as
# alternatives, for the documented edition differences only.  Tests that
# cannot run on the edition are skipped with their reason (skip_reason
# below), each where another test covers what it checks.
#
# PORTABLE_MODES="plain tle" (default both), PORTABLE_GROUPS="regress
# isolation pgtap update dump catalog lexer" (default all; TEST_GROUPS when run
# by hand), TESTS="claim tokens" (names, default all), KEEP_WORK=1,
# PORTABLE_C_CATALOG (the C edition's catalog, a file of
# "test/portable/catalog.sh dump": test/run.sh's group portable writes it;
# without it the group catalog is skipped).
# The last line is "N passed, M failed" (skipped tests are not counted).
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"
idem_runs_natively "$PG_MAJOR" ||
  { echo "PostgreSQL $PG_MAJOR runs in its chroot: TEST_GROUPS=portable make test PG=$PG_MAJOR" >&2; exit 2; }
PORTABLE_MODES=${PORTABLE_MODES:-plain tle}
# test/run.sh passes PORTABLE_GROUPS (its own TEST_GROUPS says "portable")
PORTABLE_GROUPS=${PORTABLE_GROUPS:-${TEST_GROUPS:-regress isolation pgtap update dump catalog lexer}}
PORT=${PORTABLE_PORT:-5491}
. "$IDEM_TOP/test/portable/lib.sh"

# skip_reason MODE TEST: why TEST cannot run on the edition (empty: it
# runs), and what covers it instead.  No test is about the C library's
# internals; these create the extension where the edition cannot be had.
skip_reason() {
  case $2 in
  lock_key_encoding)
    echo "creates the extension in a new LATIN1 database (from template0, where the edition is not" \
      "installed); lock_key's bits in LATIN1 and SQL_ASCII: test/portable/compare_hashes.sh" ;;
  state_machine_update)
    echo "creates the extension at 1.2 in a new database and updates it: the edition has no" \
      "script of 1.2, the first version it serves is 1.3 (doc/portable.md); enforcement after" \
      "dump and restore: dump (test/portable/dump.sh)" ;;
  outbox_marks_1_2)
    echo "creates the extension at 1.2 in a new database: the edition has no script of 1.2" \
      "(doc/portable.md); its marks without lease_token are checked against takeovers (1.3)" ;;
  upgrade)
    case $1 in
    plain) echo "no extension to create at 1.0 and update (the plain script has none);" \
      "the plain update scripts: update (test/portable/update.sh)" ;;
    tle) echo "calls the functions on 1.0's and 1.2's tables, which the portable bodies do not" \
      "serve, and grants before the 1.2 to 1.3 update (42501 through pg_tle);" \
      "CREATE EXTENSION VERSION '1.3' and ALTER EXTENSION UPDATE: update (test/portable/update.sh)" ;;
    esac ;;
  esac
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
portable_prepare "$WORK" "$PORTABLE_MODES" || fail_setup "portable set-up failed"
# each mode's expected files go to test/expected (the --inputdir of 15's
# runners); 16 and later read them from ./expected (--expecteddir)
rm -rf "$WORK/repo/test/expected" "$WORK/repo/expected"
ln -s test/expected "$WORK/repo/expected"
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

# run_pgtap MODE: test/pgtap/*.sql with pg_prove, one result per file
run_pgtap() {
  local mode=$1 db=pgtap_regression log=$WORK/$1-pgtap.log t
  ls "$WORK/repo/test/pgtap/"*.sql >/dev/null 2>&1 || return 0
  idem_log "$mode pgtap"
  { prepare_db "$mode" "$db" && psql_as postgres "$db" -c 'CREATE EXTENSION pgtap'; } \
    >"$WORK/$mode-pgtap-setup.log" 2>&1 || {
    cat "$WORK/$mode-pgtap-setup.log"
    results+=("$mode pgtap set-up FAILED"); failed=$((failed + 1))
    return
  }
  (cd "$WORK/repo" && as_postgres pg_prove -d "$db" test/pgtap/*.sql) >"$log" 2>&1
  cat "$log"
  for f in "$WORK/repo/test/pgtap/"*.sql; do
    t=$(basename "$f" .sql)
    if grep -qE "^test/pgtap/$t\.sql \.+ ok$" "$log"; then
      results+=("$mode pgtap $t ok"); passed=$((passed + 1))
    else
      results+=("$mode pgtap $t FAILED"); failed=$((failed + 1))
    fi
  done
}

# run_script MODE NAME: test/portable/NAME.sh (update, dump, lexer), one result
run_script() {
  local mode=$1 name=$2 role=regress_portable_owner log=$WORK/$1-$2.log
  [ "$mode" = tle ] && role=regress_portable_tle
  idem_log "$mode $name"
  if as_postgres env PORTABLE_EDITION="$PORTABLE_EDITION" \
       bash "$WORK/repo/test/portable/$name.sh" "$mode" "$role" >"$log" 2>&1; then
    results+=("$mode $name $name ok"); passed=$((passed + 1))
  else
    results+=("$mode $name $name FAILED"); failed=$((failed + 1))
  fi
  cat "$log"
}

# run_catalog MODE: test/portable/catalog.sh, one result: the catalog of a
# database prepared as the tests' against the C edition's, which
# PORTABLE_C_CATALOG names (a file of "catalog.sh dump", written by
# test/run.sh's group portable; skipped without it)
run_catalog() {
  local mode=$1 db=catalog_regression log=$WORK/$1-catalog.log reason
  if [ -z "${PORTABLE_C_CATALOG:-}" ] || ! [ -s "$PORTABLE_C_CATALOG" ]; then
    reason="no C edition catalog (PORTABLE_C_CATALOG: a file of test/portable/catalog.sh dump,"
    results+=("$mode catalog catalog skipped: $reason which test/run.sh's group portable writes)")
    return
  fi
  idem_log "$mode catalog"
  if prepare_db "$mode" "$db" >"$WORK/$mode-catalog-setup.log" 2>&1 &&
     as_postgres env PSQL="$BIN/psql" bash "$WORK/repo/test/portable/catalog.sh" \
       "$PORTABLE_C_CATALOG" "$db" "$mode" >"$log" 2>&1; then
    results+=("$mode catalog catalog ok"); passed=$((passed + 1))
  else
    cat "$WORK/$mode-catalog-setup.log"
    results+=("$mode catalog catalog FAILED"); failed=$((failed + 1))
  fi
  cat "$log" 2>/dev/null
}

# run_group MODE GROUP: one pg_regress or pg_isolation_regress run, or
# the pgTAP tests, or the update path
run_group() {
  local mode=$1 group=$2 runner db dir ext tests=() t reason log out
  case $group in
  regress) runner=test/regress/pg_regress db=contrib_regression dir=sql ext=sql ;;
  isolation) runner=test/isolation/pg_isolation_regress db=isolation_regression dir=specs ext=spec ;;
  pgtap) run_pgtap "$mode"; return ;;
  update|dump|lexer) run_script "$mode" "$group"; return ;;
  catalog) run_catalog "$mode"; return ;;
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
    # PostgreSQL 15 prints "test x ... ok", 16 and later TAP ("ok 1 - x")
    if grep -qE "^(test )? *$t +\.\.\. ok|^ok +[0-9]+ +[-+] +$t " "$log"; then
      results+=("$mode $group $t ok"); passed=$((passed + 1))
    else
      results+=("$mode $group $t FAILED"); failed=$((failed + 1))
    fi
  done
}

declare -A mode_seconds=()
for mode in $PORTABLE_MODES; do
  mode_start=$SECONDS
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
    # that tests create (state_machine_update)
    psql_as postgres postgres -c 'CREATE EXTENSION pg_tle' \
      -c 'GRANT pgtle_admin TO regress_portable_tle' || fail_setup "tle: pgtle_admin"
    { psql_as postgres template1 -c 'CREATE EXTENSION pg_tle' &&
      psql_as regress_portable_tle template1 -f "$PORTABLE_EDITION/idempotency-tle.sql"; } >/dev/null ||
      fail_setup "tle: idempotency-tle.sql in template1"
  fi
  for group in $PORTABLE_GROUPS; do
    run_group "$mode" "$group"
  done
  idem_stop_cluster "$BIN" "$CLUSTER"
  CLUSTER=
  mode_seconds[$mode]=$((SECONDS - mode_start))
done

echo "---- results"
printf '%s\n' "${results[@]}"
for mode in $PORTABLE_MODES; do
  echo "$mode: $(printf '%s\n' "${results[@]}" | grep -c "^$mode .* ok$") passed," \
    "$(printf '%s\n' "${results[@]}" | grep -c "^$mode .*FAILED$") failed," \
    "$(printf '%s\n' "${results[@]}" | grep -c "^$mode .* skipped: ") skipped" \
    "(${mode_seconds[$mode]:-0}s)"
done
echo "PostgreSQL $PG_MAJOR, in all (set-up included): ${SECONDS}s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
