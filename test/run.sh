#!/usr/bin/env bash
# test/run.sh (make test): the whole test suite, from a fresh Debian 12.
#
# Installs what is missing, builds, installs the extension into a private
# copy of the server (the system installation is left alone), starts a
# throwaway cluster as the postgres OS user on a unix socket with pg_cron
# and the extension's library preloaded, runs every test group and stops
# what it started.  Groups:
#   lint          make lint (test/lint.sh: cppcheck and clang-tidy), one
#                 test, on the host's major only (against its headers;
#                 the chroots do not carry the tools)
#   regress       test/sql/*.sql against expected/*.out (pg_regress)
#   isolation     test/specs/*.spec (pg_isolation_regress)
#   pgtap         test/pgtap/*.sql (pg_prove)
#   tap           test/t/*.pl (prove, PostgreSQL::Test::Cluster)
#   integration   test/integration/*.sh (examples, relays, clients)
#   pooler        test/pooler/*.sh: the SQL API, the packages and their
#                 relays through PgBouncer in transaction mode
#                 (doc/poolers.md)
#   portable      the portable edition (doc/portable.md): its hashes against
#                 the C's in this cluster (test/portable/compare_hashes.sh),
#                 scripts/portable.py check (every C function has a portable
#                 body; src/HOT lists the newest version's C symbols) and
#                 the C edition's catalog (test/portable/catalog.sh dump,
#                 in a fresh database), then test/portable/run.sh
#                 (regress, isolation, pgtap, the update path and the
#                 catalog against the C's on clusters of its own, in the
#                 modes of PORTABLE_MODES: doc/testing.md) and
#                 test/portable/tap.sh when it exists, each counted by its
#                 closing line
#   citus         test/citus/*.sh: Citus built offline from the vendored
#                 sources (test/citus/citus.bash, cached under /var/tmp),
#                 a coordinator and two workers on 127.0.0.1; on the
#                 majors of CITUS_MAJORS (default 15: doc/testing.md);
#                 where Citus cannot be built, a "skip: ..." line and no
#                 test counted
# The last line is "N passed, M failed", counting test files.
# TEST_GROUPS="regress isolation" limits the run to some groups;
# INTEGRATION_TESTS="test/integration/docs.sh" (POOLER_TESTS) to some
# integration (pooler, citus) scripts, CITUS_TESTS likewise,
# TAP_TESTS="test/t/120_claim_wait.pl" to some TAP tests.
# PG_MAJOR (default 15) picks the PostgreSQL major.  A major that is not
# this system's own (17 or 18 on Debian 12) is run by test/matrix.sh in
# its Debian chroot, where this script then runs natively; `make test`
# runs 15, 17 and 18 that way in turn.
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"
idem_runs_natively "$PG_MAJOR" || exec bash "$IDEM_TOP/test/matrix.sh" "$PG_MAJOR"

# What the test groups need beyond building and running.
TEST_PACKAGES="redis-server libhiredis-dev python3-psycopg2 python3-flask
  postgresql-$PG_MAJOR-plproxy postgresql-$PG_MAJOR-pgaudit nodejs npm flex
  bison libkrb5-dev pgbouncer"
# Citus's build dependencies, where the citus group runs (test/citus/citus.bash)
[[ " ${CITUS_MAJORS:-15} " == *" $PG_MAJOR "* ]] &&
  TEST_PACKAGES="$TEST_PACKAGES liblz4-dev libzstd-dev libcurl4-gnutls-dev autoconf"
# the Patroni failover test runs on the host's major only (see the test),
# and so does test/integration/monitoring.sh's with Prometheus
[ -f /etc/idempotency-chroot ] || TEST_PACKAGES="$TEST_PACKAGES patroni etcd-server etcd-client
  prometheus prometheus-postgres-exporter gnuplot-nox"
TEST_GROUPS=${TEST_GROUPS:-lint regress isolation pgtap tap integration pooler portable citus}
# the portable edition's install routes, both on every major (doc/testing.md)
PORTABLE_MODES=${PORTABLE_MODES:-plain tle}

test_packages=()
for p in $TEST_PACKAGES; do
  # the machine may have node and npm from elsewhere than apt
  case $p in nodejs) command -v node >/dev/null && continue ;; npm) command -v npm >/dev/null && continue ;; esac
  test_packages+=("$p")
done
idem_ensure_packages $IDEM_PACKAGES "${test_packages[@]}" || exit 1
idem_build || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

WORK=$(mktemp -d /tmp/idempotency-test.XXXXXX)
chmod 755 "$WORK"
BIN=$(idem_private_install "$WORK") || { echo "install failed"; echo "0 passed, 1 failed"; exit 1; }
mkdir -p "$WORK/repo"
tar -C "$IDEM_TOP" --exclude=.git --exclude=node_modules -cf - . | tar -C "$WORK/repo" -xf -
ln -sfn ../expected "$WORK/repo/test/expected"	# see REGRESS_PREP in the Makefile
chown -R postgres: "$WORK"
CLUSTER=$WORK/cluster
# IDEM_TEST_PORT: another port, for a second run beside this one
PORT=${IDEM_TEST_PORT:-5432}

export IDEM_TEST_WORK=$WORK IDEM_TEST_BIN=$BIN IDEM_TOP
export PGHOST=$CLUSTER PGPORT=$PORT PGUSER=postgres

cleanup() {
  idem_stop_cluster "$BIN" "$CLUSTER"
  if [ "${failed:-1}" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then
    rm -rf "$WORK"
  else
    echo "test files and logs kept in $WORK" >&2
  fi
}
trap cleanup EXIT

as_postgres() {
  runuser -u postgres -- env PATH="$BIN:$PATH" PGHOST="$PGHOST" PGPORT="$PGPORT" \
    PGUSER=postgres IDEM_TEST_WORK="$WORK" IDEM_TEST_BIN="$BIN" "$@"
}

# the library preloaded too, for its outcome counts (test/sql/metrics.sql)
idem_start_cluster "$BIN" "$CLUSTER" "$PORT" '' 'pg_cron, idempotency' ||
  { cat "$CLUSTER/server.log"; echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
skipped=0	# groups that cannot run here, named by a "skip: ..." line
count() {	# count LOGFILE OK_PATTERN FAIL_PATTERN EXIT_CODE
  local ok bad
  ok=$(grep -cE "$2" "$1")
  bad=$(grep -cE "$3" "$1")
  # a runner that failed without naming a failed test still counts as one
  [ "${4:-0}" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
  passed=$((passed + ok))
  failed=$((failed + bad))
  idem_log "$(basename "$1" .log): $ok passed, $bad failed ($((SECONDS - group_start)) s since group $group began)"
}

cd "$WORK/repo"
show_diffs() {	# show_diffs [DIR]
  local diffs=${1:-.}/regression.diffs
  [ -s "$diffs" ] && { echo "---- $diffs"; head -400 "$diffs"; }
  return 0
}
# count_closing LOG: add the closing "N passed, M failed" of a runner's log
# (none: one failure)
count_closing() {
  local log=$1 line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  [ -n "$line" ] || line="0 passed, 1 failed"
  set -- $line
  passed=$((passed + $1))
  failed=$((failed + $3))
  idem_log "$(basename "$log" .log): $line"
}
names() { ls "$@" 2>/dev/null | xargs -r -n1 basename | sed 's/\.[a-z]*$//' | sort; }

# regress_group NAME RUNNER DB FILES...: a pg_regress-style group, run
# twice against the same expected files: as the sessions write by default,
# then (NAME-statements, its results in statements/) with
# idempotency.direct_writes off, where every write of the extension's
# tables runs its INSERT or UPDATE statement through SPI (doc/reference.md,
# "Writes"): both ways must give the same outcomes; the second pass runs
# on the majors of STATEMENT_PASS_MAJORS (default "15": SPI statements
# mean the same on every major, where the direct path follows each
# major's executor; doc/testing.md).  TESTS="claim outbox" limits the group to those of its
# tests.
regress_group() {
  local name=$1 runner=$2 db=$3 tests t rc pass passes outdir options
  shift 3
  passes=direct
  [[ " ${STATEMENT_PASS_MAJORS:-15} " == *" $PG_MAJOR "* ]] && passes="direct statements"
  tests=$(names "$@")
  if [ -n "${TESTS:-}" ]; then
    tests=$(for t in $tests; do [[ " $TESTS " == *" $t "* ]] && echo "$t"; done)
  fi
  [ -n "$tests" ] || return 0
  for pass in $passes; do
    if [ "$pass" = direct ]; then
      outdir=. options=${PGOPTIONS:-}
    else
      outdir=statements options="${PGOPTIONS:-} -c idempotency.direct_writes=off"
      mkdir -p "$outdir" && chown postgres: "$outdir"
    fi
    idem_log "$name ($pass): $(echo $tests)"
    as_postgres env PGOPTIONS="$options" "$PGXS_DIR/src/$runner" --bindir="$BIN" \
      --inputdir=test --outputdir="$outdir" \
      --dbname="$db" --load-extension=idempotency $tests >"$WORK/$name-$pass.log" 2>&1
    rc=$?
    cat "$WORK/$name-$pass.log"
    show_diffs "$outdir"
    # PostgreSQL 15 prints "test x ... ok", 16 and later TAP ("ok 1 - x")
    count "$WORK/$name-$pass.log" '\.\.\. ok|^ok +[0-9]+ +[-+] ' \
      '\.\.\. FAILED|\.\.\. failed|^not ok +[0-9]+ +[-+] ' $rc
  done
}

for group in $TEST_GROUPS; do
  group_start=$SECONDS
  case $group in
  lint)
    if [ -f /etc/idempotency-chroot ]; then
      idem_log "lint: run on the host's major only"
      continue
    fi
    idem_log "lint: test/lint.sh"
    if bash "$IDEM_TOP/test/lint.sh" >"$WORK/lint.log" 2>&1; then
      echo "test/lint.sh .. ok" | tee -a "$WORK/lint.log"
    else
      cat "$WORK/lint.log"
      echo "test/lint.sh .. FAILED" | tee -a "$WORK/lint.log"
    fi
    count "$WORK/lint.log" '\.\. ok$' '\.\. FAILED$'
    ;;
  regress)
    regress_group regress test/regress/pg_regress contrib_regression test/sql/*.sql
    ;;
  isolation)
    regress_group isolation test/isolation/pg_isolation_regress isolation_regression test/specs/*.spec
    ;;
  pgtap)
    ls test/pgtap/*.sql >/dev/null 2>&1 || continue
    as_postgres psql -q -X -d postgres -c 'CREATE DATABASE pgtap_regression' &&
    as_postgres psql -q -X -d pgtap_regression \
      -c 'CREATE EXTENSION idempotency; CREATE EXTENSION pgtap;'
    as_postgres pg_prove -d pgtap_regression test/pgtap/*.sql >"$WORK/pgtap.log" 2>&1
    rc=$?
    cat "$WORK/pgtap.log"
    count "$WORK/pgtap.log" '\.\. ok$' '\.\. (Failed|Dubious|not ok)|Parse errors' $rc
    ;;
  tap)
    ls test/t/*.pl >/dev/null 2>&1 || continue
    # PostgreSQL::Test::Utils creates TESTDIR/tmp_check, but not TESTDIR
    mkdir -p "$WORK/tap" && chown postgres: "$WORK/tap"
    as_postgres env TESTDIR="$WORK/tap" PG_REGRESS="$PGXS_DIR/src/test/regress/pg_regress" \
      prove -I "$PGXS_DIR/src/test/perl" ${TAP_TESTS:-test/t/*.pl} >"$WORK/tap.log" 2>&1
    rc=$?
    cat "$WORK/tap.log"
    count "$WORK/tap.log" '\.\. ok$' '\.\. (Failed|Dubious|skipped)|\.\. No subtests' $rc
    ;;
  integration | pooler | citus)
    # each script is one test; INTEGRATION_TESTS / POOLER_TESTS /
    # CITUS_TESTS pick some.  The pooler group runs on the majors of
    # POOLER_MAJORS (default 15, with Debian 12's PgBouncer 1.18, and 18,
    # with a PgBouncer that keeps prepared statements), the citus group on
    # those of CITUS_MAJORS (default 15), for CI's time (doc/testing.md)
    case $group in
    integration) scripts=${INTEGRATION_TESTS:-test/integration/*.sh} ;;
    pooler) scripts=${POOLER_TESTS:-test/pooler/*.sh} majors=${POOLER_MAJORS:-15 18} ;;
    citus) scripts=${CITUS_TESTS:-test/citus/*.sh} majors=${CITUS_MAJORS:-15} ;;
    esac
    if [ "$group" != integration ] && [[ " $majors " != *" $PG_MAJOR "* ]]; then
      idem_log "$group: not run on $PG_MAJOR (${group^^}_MAJORS=$majors)"
      continue
    fi
    if [ "$group" = citus ]; then
      # built once per Citus and server version (kept under /var/tmp), then
      # copied into this run's server copy
      . "$IDEM_TOP/test/citus/citus.bash"
      if ! citus_install "$BIN" 2>"$WORK/citus-build.err"; then
        cat "$WORK/citus-build.err"
        echo "skip: citus: Citus cannot be built here: $(tail -1 "$WORK/citus-build.err")"
        skipped=$((skipped + 1))
        continue
      fi
    fi
    : >"$WORK/$group.log"
    for t in $scripts; do
      [ -e "$t" ] || continue
      idem_log "$group: $t"
      if bash "$t" >>"$WORK/$group.log" 2>&1; then
        echo "$t .. ok" | tee -a "$WORK/$group.log"
      else
        echo "$t .. FAILED" | tee -a "$WORK/$group.log"
      fi
    done
    count "$WORK/$group.log" '\.\. ok$' '\.\. FAILED$'
    ;;
  portable)
    idem_log "portable: test/portable/compare_hashes.sh"
    if as_postgres env PSQL="$BIN/psql" bash test/portable/compare_hashes.sh >"$WORK/portable.log" 2>&1; then
      echo "test/portable/compare_hashes.sh .. ok" | tee -a "$WORK/portable.log"
    else
      tail -40 "$WORK/portable.log"
      echo "test/portable/compare_hashes.sh .. FAILED" | tee -a "$WORK/portable.log"
    fi
    # every C function has a portable body, and every C symbol of the
    # newest version is on the hot list (src/HOT) with its reason
    idem_log "portable: scripts/portable.py check"
    if python3 scripts/portable.py check >>"$WORK/portable.log" 2>&1; then
      echo "scripts/portable.py check .. ok" | tee -a "$WORK/portable.log"
    else
      tail -20 "$WORK/portable.log"
      echo "scripts/portable.py check .. FAILED" | tee -a "$WORK/portable.log"
    fi
    # the C edition's catalog, which test/portable/run.sh's group catalog
    # compares with each mode's (a failure here counts; that group then
    # skips)
    idem_log "portable: the C edition's catalog (test/portable/catalog.sh dump)"
    if ! { as_postgres psql -q -X -d postgres -c 'DROP DATABASE IF EXISTS catalog_regression' \
             -c 'CREATE DATABASE catalog_regression' &&
           as_postgres psql -q -X -d catalog_regression -c 'CREATE EXTENSION idempotency' &&
           as_postgres env PSQL="$BIN/psql" bash test/portable/catalog.sh dump -d catalog_regression \
             >"$WORK/portable-c-catalog.tsv"; } >>"$WORK/portable.log" 2>&1; then
      rm -f "$WORK/portable-c-catalog.tsv"
      echo "test/portable/catalog.sh dump .. FAILED" | tee -a "$WORK/portable.log"
    fi
    count "$WORK/portable.log" '\.\. ok$' '\.\. FAILED$'
    for t in run tap; do
      [ -f "$IDEM_TOP/test/portable/$t.sh" ] || continue
      # the TAP tests, twice (both modes), are the heavy part: on the majors
      # of PORTABLE_TAP_MAJORS only (doc/testing.md)
      if [ $t = tap ] && [[ " ${PORTABLE_TAP_MAJORS:-15 18} " != *" $PG_MAJOR "* ]]; then
        idem_log "portable: test/portable/tap.sh not run on $PG_MAJOR (PORTABLE_TAP_MAJORS=${PORTABLE_TAP_MAJORS:-15 18})"
        continue
      fi
      idem_log "portable: test/portable/$t.sh ($PORTABLE_MODES)"
      env -u TEST_GROUPS PORTABLE_MODES="$PORTABLE_MODES" PORTABLE_GROUPS="regress isolation pgtap update dump catalog lexer" \
        PORTABLE_C_CATALOG="$WORK/portable-c-catalog.tsv" bash "$IDEM_TOP/test/portable/$t.sh" >"$WORK/portable-$t.log" 2>&1
      cat "$WORK/portable-$t.log"
      count_closing "$WORK/portable-$t.log"
    done
    ;;
  esac
done

[ "$skipped" -eq 0 ] || idem_log "$skipped group(s) skipped (see their skip: lines)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && { [ "$passed" -gt 0 ] || [ "$skipped" -gt 0 ]; }
