#!/usr/bin/env bash
# bench/profile.sh (make profile): instructions per transaction of the bench
# workloads, counted by callgrind, which is stable where timings on a busy
# machine are not.
#
# Starts a throwaway cluster whose backends run under callgrind, loads the
# bench schema and PROFILE_ROWS completed keys, then runs each pgbench
# script of bench/pgbench named on the command line (default: the phased
# request, its floor, replay and execute) twice with one client, for
# PROFILE_TX and 3 x PROFILE_TX transactions.  The difference of the two
# backends' instruction totals, divided by 2 x PROFILE_TX, is the cost of
# one transaction without the connection's start and end.  Then, from the
# same callgrind files, bench/profile_doc.py splits each transaction by
# phase (the client's statement, the executor's start, run and end, SPI,
# index inserts, WAL, commit), beside the script's baseline where both ran.
#
#   bench/profile.sh [SCRIPT.sql ...]
#   PROFILE_KEEP=1     keep the callgrind files (annotate them with
#                      callgrind_annotate --inclusive=yes FILE)
#   PROFILE_DOC=1      also write doc/profile.md from this run
#   IDEM_TEST_PORT=N   the throwaway cluster's port (default 5432; its socket
#                      is in a private directory, TCP is off)
#   PROFILE_EDITION=portable  the portable edition (doc/portable.md) instead:
#                      its plain script installed by a role that is no
#                      superuser, every script run as an application role
#                      (bench/grant_app.sql); the phases only, without the
#                      C symbols' rows
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"

PROFILE_TX=${PROFILE_TX:-300}
PROFILE_ROWS=${PROFILE_ROWS:-10000}
SCRIPTS=${*:-phased.sql floor.sql replay.sql replay_pk.sql e2e_execute.sql e2e_floor.sql e2e_seeds.sql}
REQ='{"amount": 100, "currency": "EUR"}'

idem_ensure_packages $IDEM_PACKAGES valgrind || exit 1
idem_build || { echo "build failed" >&2; exit 1; }
WORK=$(mktemp -d /tmp/idempotency-profile.XXXXXX)
chmod 755 "$WORK"
BIN=$(idem_private_install "$WORK") || { echo "install failed" >&2; exit 1; }
CLUSTER=$WORK/cluster
PGPID=

cleanup() {
  if [ -n "$PGPID" ]; then
    runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -m fast -w -s stop
    wait "$PGPID" 2>/dev/null
  fi
  if [ -n "${PROFILE_KEEP:-}" ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# A cluster as usual, loaded, then restarted under callgrind; fsync off,
# since only instructions count here.
# IDEM_TEST_PORT: another port (its socket is in the cluster's directory),
# as for test/run.sh
export PGPORT=${IDEM_TEST_PORT:-5432}
idem_start_cluster "$BIN" "$CLUSTER" "$PGPORT" '' || exit 1
printf 'fsync = off\nautovacuum = off\n' >>"$CLUSTER/data/postgresql.conf"
q() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -U postgres -d bench "$@"; }
"$BIN/psql" -X -q -h "$CLUSTER" -U postgres -d postgres -c 'CREATE DATABASE bench' || exit 1
PROFILE_EDITION=${PROFILE_EDITION:-c}
PROFILE_USER=postgres
if [ "$PROFILE_EDITION" = portable ]; then
  # as bench/run.sh installs it: by the database's owner-to-be, no superuser
  . "$IDEM_TOP/test/portable/lib.sh"
  portable_build_edition "$WORK" || { echo "portable build failed" >&2; exit 1; }
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -U postgres -d postgres \
    -c 'CREATE ROLE bench_owner LOGIN' -c 'CREATE ROLE bench_app LOGIN' \
    -c 'GRANT CREATE ON DATABASE bench TO bench_owner' || exit 1
  PATH=$BIN:$PATH portable_install plain bench bench_owner -h "$CLUSTER" || exit 1
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -U bench_owner -d bench \
    -f "$IDEM_TOP/bench/setup.sql" -v rows="$PROFILE_ROWS" -v req="$REQ" -f "$IDEM_TOP/bench/load.sql" \
    -v app=bench_app -f "$IDEM_TOP/bench/grant_app.sql" >/dev/null || exit 1
  PROFILE_USER=bench_app
else
  q -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/bench/setup.sql" >/dev/null || exit 1
  q -v rows="$PROFILE_ROWS" -v req="$REQ" -f "$IDEM_TOP/bench/load.sql" >/dev/null || exit 1
fi
if [ "$PROFILE_EDITION" = portable ]; then
  # Every script once before the counted runs, then statistics: the portable
  # edition's statements are planned from them, and a plan made while a
  # table (processed_events, outbox_events) is empty scans it whole, as a
  # fresh installation's first sessions do until autovacuum's ANALYZE.
  for script in $SCRIPTS; do
    (cd "$WORK" && "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U "$PROFILE_USER" -c 1 -t "$PROFILE_TX" \
      -D n=0 -D rows="$PROFILE_ROWS" -f "$IDEM_TOP/bench/pgbench/$script" bench >/dev/null 2>&1)
  done
fi
q -c "VACUUM ANALYZE" || exit 1
# the C symbols of the extension's SQL functions, t for trigger functions
q -At -F "$(printf '\t')" -c "SELECT DISTINCT prosrc, prorettype = 'trigger'::regtype FROM pg_proc
  WHERE probin LIKE '%/idempotency'" >"$WORK/functions.tsv" || exit 1

runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -w -s stop || exit 1
mkdir -p "$WORK/cg" && chown postgres: "$WORK/cg"
runuser -u postgres -- valgrind --tool=callgrind --trace-children=yes \
  --callgrind-out-file="$WORK/cg/callgrind.out.%p" --log-file="$WORK/cg/valgrind.%p.log" \
  "$BIN/postgres" -D "$CLUSTER/data" >"$CLUSTER/server.log" 2>&1 &
PGPID=$!
for i in $(seq 120); do
  "$BIN/pg_isready" -q -h "$CLUSTER" -U postgres && break
  sleep 1
done
sleep 3

# instructions of the backend that ran "pgbench -t TX" with SCRIPT: the
# largest of the callgrind files that appeared meanwhile, kept as
# runs/SCRIPT.RUN for bench/profile_doc.py
backend_instructions() {
  local script=$1 tx=$2 run=$3 f best=0 n file=
  ls "$WORK/cg" >"$WORK/before"
  (cd "$WORK" && "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U "$PROFILE_USER" -c 1 -t "$tx" \
    -D n=0 -D rows="$PROFILE_ROWS" -f "$IDEM_TOP/bench/pgbench/$script" bench >"$WORK/pgbench.log" 2>&1) ||
    { cat "$WORK/pgbench.log" >&2; echo 0; return; }
  sleep 2
  for f in $(ls "$WORK/cg" | grep '^callgrind.out' | grep -vxFf "$WORK/before"); do
    for i in $(seq 60); do
      grep -q '^totals:' "$WORK/cg/$f" && break
      sleep 1
    done
    n=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$WORK/cg/$f")
    [ "${n:-0}" -gt "$best" ] && best=$n && file=$f
  done
  [ -n "$file" ] && cp "$WORK/cg/$file" "$WORK/runs/$script.$run"
  echo "$best"
}

mkdir -p "$WORK/runs"
printf '%-22s %14s\n' script instructions/tx
for script in $SCRIPTS; do
  a=$(backend_instructions "$script" "$PROFILE_TX" short)
  b=$(backend_instructions "$script" $((3 * PROFILE_TX)) long)
  printf '%-22s %14d\n' "$script" $(((b - a) / (2 * PROFILE_TX)))
done

echo
page=()
if [ "${PROFILE_DOC:-0}" = 1 ] && [ "$PROFILE_EDITION" != c ]; then
  echo "doc/profile.md is the C edition's: not written from PROFILE_EDITION=$PROFILE_EDITION" >&2
elif [ "${PROFILE_DOC:-0}" = 1 ]; then
  page=("$IDEM_TOP/doc/profile.md")
  command="PROFILE_DOC=1 make profile PROFILE_SCRIPTS=\"$SCRIPTS\""
  [ "$PROFILE_TX" = 300 ] || command="PROFILE_TX=$PROFILE_TX $command"
  [ "$PROFILE_ROWS" = 10000 ] || command="PROFILE_ROWS=$PROFILE_ROWS $command"
  commit=$(idem_commit)
  [ -n "$(git -C "$IDEM_TOP" status --porcelain -- src sql 2>/dev/null)" ] && commit="$commit with uncommitted changes to src/ or sql/"
  export PROFILE_COMMAND=$command PROFILE_COMMIT=$commit PROFILE_PG="PostgreSQL $(idem_server_version "$BIN")"
fi
/usr/bin/python3 "$IDEM_TOP/bench/profile_doc.py" "$WORK/runs" "$PROFILE_TX" "$WORK/functions.tsv" \
  "${page[@]}" || exit 1
[ ${#page[@]} -eq 0 ] || echo "wrote doc/profile.md"
