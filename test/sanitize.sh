#!/usr/bin/env bash
# test/sanitize.sh (make sanitize): the regression tests under run-time
# checkers, each on a cluster of its own.  Runs as root, like `make test`.
#
#   ubsan     the extension built with -fsanitize=undefined, the server
#             started with libubsan preloaded: undefined behaviour in our
#             code (overflow, bad shifts, null member access, ...).
#   valgrind  the server (and every backend) under valgrind memcheck:
#             invalid reads and writes, use of uninitialised memory, bad
#             frees.  Reports whose stack holds idempotency.so fail the run;
#             reports from PostgreSQL alone are counted and shown.
#   asan      -fsanitize=address,undefined with libasan preloaded.  On
#             Debian 12 libasan deadlocks in glibc's bindtextdomain() when it
#             is preloaded into any uninstrumented binary (`postgres -V`
#             hangs), so it is not in the default set; valgrind checks
#             memory instead.
#
# SANITIZERS="ubsan valgrind" (default) picks the passes.  The last line is
# "sanitize: N passed, M failed".
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
SANITIZERS=${SANITIZERS:-ubsan valgrind}
idem_ensure_packages $IDEM_PACKAGES valgrind || exit 1

WORK=$(mktemp -d /tmp/idempotency-sanitize.XXXXXX)
chmod 755 "$WORK"
BIN=$(idem_private_install "$WORK") || { echo "install failed"; exit 1; }
LIBDIR=$(dirname "$BIN")/lib
mkdir -p "$WORK/repo"
tar -C "$IDEM_TOP" --exclude=.git --exclude=node_modules -cf - . | tar -C "$WORK/repo" -xf -
chown -R postgres: "$WORK"
cd "$WORK/repo"
tests=$(ls test/sql/*.sql | xargs -n1 basename | sed 's/\.sql$//' | sort)
passed=0
failed=0
pid=

# build FLAGS: compile and link against the system headers with FLAGS
# (PGXS's PROFILE goes to both; PG_LDFLAGS would drop the libpq link),
# install the module into the private copy of the server.
build() {
  make -s -C "$WORK/repo" PG_CONFIG="$PG_BIN/pg_config" clean >/dev/null 2>&1
  make -s -C "$WORK/repo" PG_CONFIG="$PG_BIN/pg_config" PROFILE="$1" >/dev/null &&
  make -s -C "$WORK/repo" PG_CONFIG="$BIN/pg_config" install >/dev/null
}

# start NAME [PREFIX...]: initdb and start a cluster in $WORK/NAME, the
# postmaster run through PREFIX (env settings, valgrind).
start() {
  local name=$1; shift
  CLUSTER=$WORK/$name
  mkdir -p "$CLUSTER" "$CLUSTER/reports"; chown -R postgres: "$CLUSTER"
  runuser -u postgres -- "$BIN/initdb" -D "$CLUSTER/data" -A trust -U postgres \
    --no-sync -E UTF8 --locale=C.UTF-8 >"$CLUSTER/initdb.log" || return 1
  # the settings of scripts/lib.sh's test cluster, which the tests expect
  cat >>"$CLUSTER/data/postgresql.conf" <<CONF
listen_addresses = ''
port = 5432
unix_socket_directories = '$CLUSTER'
shared_preload_libraries = 'pg_cron, idempotency'
cron.database_name = 'postgres'
wal_level = logical
max_replication_slots = 8
max_wal_senders = 8
max_prepared_transactions = 10
CONF
  runuser -u postgres -- "$@" "$BIN/postgres" -D "$CLUSTER/data" >"$CLUSTER/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    "$BIN/pg_isready" -q -h "$CLUSTER" -p 5432 && return 0
    sleep 1
  done
  cat "$CLUSTER/server.log"; return 1
}

stop() {
  runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -m fast -w -t 600 -s stop
  wait "$pid" 2>/dev/null
  pid=
}
trap '[ -n "$pid" ] && stop' EXIT

regress() {
  rm -rf results regression.diffs
  runuser -u postgres -- env PGHOST="$CLUSTER" PGPORT=5432 \
    "$PGXS_DIR/src/test/regress/pg_regress" --bindir="$BIN" --inputdir=test \
    --outputdir=. --dbname=contrib_regression --load-extension=idempotency $tests
  local rc=$?
  [ -s regression.diffs ] && head -200 regression.diffs
  return $rc
}

verdict() {	# verdict NAME OK
  if [ "$2" -eq 0 ]; then
    idem_log "$1: ok"; passed=$((passed + 1))
  else
    idem_log "$1: FAILED"; failed=$((failed + 1))
  fi
}

for s in $SANITIZERS; do
  ok=0
  case $s in
  ubsan|asan)
    if [ "$s" = asan ]; then
      flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize=alignment"
      preload=$(readlink -f "$(gcc -print-file-name=libasan.so)")
    else
      flags="-fsanitize=undefined -fno-omit-frame-pointer -fno-sanitize=alignment"
      preload=$(readlink -f "$(gcc -print-file-name=libubsan.so)")
    fi
    build "$flags" || { verdict "$s build" 1; continue; }
    nm -D "$LIBDIR/idempotency.so" | grep __ubsan_handle >/dev/null || { echo "$s: module not instrumented"; ok=1; }
    start "$s" env LD_PRELOAD="$preload" \
      ASAN_OPTIONS="detect_leaks=0:log_path=$WORK/$s/reports/asan" \
      UBSAN_OPTIONS="print_stacktrace=1:log_path=$WORK/$s/reports/ubsan" || { verdict "$s start" 1; continue; }
    regress || ok=1
    stop
    if grep -qE 'terminated by signal|runtime error|AddressSanitizer' "$CLUSTER/server.log" ||
       [ -n "$(ls "$CLUSTER/reports")" ]; then
      grep -hE -A20 'terminated by signal|runtime error|AddressSanitizer' "$CLUSTER/server.log" "$CLUSTER"/reports/* | head -100
      ok=1
    fi
    verdict "$s: regression tests, no sanitizer report" $ok
    ;;
  valgrind)
    build "-g -O1" || { verdict "valgrind build" 1; continue; }
    start valgrind valgrind --quiet --trace-children=yes --leak-check=no --error-limit=no \
      --num-callers=30 --read-var-info=no --log-file="$WORK/valgrind/reports/%p.log" ||
      { verdict "valgrind start" 1; continue; }
    regress || ok=1
    stop
    all=$(cat "$CLUSTER"/reports/*.log 2>/dev/null | grep -cE '^==[0-9]+== [A-Z][a-z]+.*(Invalid|uninitialised|Mismatched|overlap|Syscall param)')
    # A report is a block of lines up to a blank "==PID== " line; it is ours
    # when a frame is in idempotency.so or, with debug symbols, in one of
    # our source files.
    files=$(cd "$WORK/repo/src" && ls *.c | sed 's/\./\\./' | paste -sd '|')
    ours_re="idempotency\\.so|\\(($files):[0-9]+\\)"
    ours=$(cat "$CLUSTER"/reports/*.log 2>/dev/null | re=$ours_re awk '
      /^==[0-9]+== $/ { if (block ~ ENVIRON["re"]) n++; block = ""; next }
      { block = block "\n" $0 }
      END { if (block ~ ENVIRON["re"]) n++; print n + 0 }')
    echo "valgrind: $all reports in all, $ours with idempotency.so on the stack"
    # what the others are about: the kind and the two innermost frames
    cat "$CLUSTER"/reports/*.log 2>/dev/null | awk '
      /^==[0-9]+== [A-Z]/ && !kind { kind = substr($0, index($0, " ") + 1); frames = ""; n = 0; next }
      kind && /(at|by) 0x/ {
        sub(/^==[0-9]+== +(at|by) 0x[0-9A-F]+: /, ""); frames = frames (n ? " < " : "") $0
        if (++n == 2) { print "  " kind ": " frames; kind = "" } }' |
      sort | uniq -c | head -20
    if [ "$ours" -gt 0 ]; then
      cat "$CLUSTER"/reports/*.log | re=$ours_re awk '
        /^==[0-9]+== $/ { if (block ~ ENVIRON["re"]) print block; block = ""; next }
        { block = block "\n" $0 }' | head -150
      ok=1
    fi
    grep -qE 'terminated by signal' "$CLUSTER/server.log" && ok=1
    verdict "valgrind: regression tests, no memcheck report from our code" $ok
    ;;
  esac
done

echo "sanitize: $passed passed, $failed failed"
if [ "$failed" -eq 0 ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
