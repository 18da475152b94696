#!/usr/bin/env bash
# bench/run.sh (make bench): the extension side by side with the SQL and
# Redis it replaces.
#
# Builds and installs the extension into a private copy of the server,
# starts a throwaway cluster with durable settings (fsync=on,
# synchronous_commit=on) and two Redis servers (appendfsync always, and no
# AOF), then runs every workload with pgbench (-M prepared, keys
# "<client id>-<random 15-digit number>") for the extension and for its
# baselines alternately: BENCH_ROUNDS rounds of BENCH_SECONDS per run, the
# order of the variants rotating every round.  The portable edition
# (doc/portable.md) runs in the same rounds: its plain script, installed
# by a role that is no superuser (role bench_portable) into database
# bench_portable of a second cluster without the C library, as on a
# managed service, takes the same pgbench scripts as the C edition
# (database bench), each workload's row named portable_<workload>.  Every workload runs as an application role,
# bench_app, given grant_usage and the baselines' tables
# (bench/grant_app.sql), in both databases, as on a managed service
# (the outcome-count groups, whose idempotency.track_outcomes only a
# superuser sets, as postgres).  Prints medians of TPS, p50
# and p99 latency and of the per-round TPS ratios, checks the targets
# (doc/performance.md, "Targets"), and writes the report to
# bench/results/<UTC timestamp>.md.  After a run of every group it also
# writes doc/performance.md and its SVG charts doc/bench-*.svg (gnuplot),
# see bench/doc.sh: that page is never edited by hand.  Those runs also
# draw doc/dashboard.svg, monitoring/grafana-dashboard.json from what
# Prometheus scraped of postgres_exporter (monitoring/postgres_exporter.yaml)
# in database bench all the while (bench/dashboard.py).
#
# Knobs (environment):
#   BENCH_SECONDS       seconds per pgbench run (default 2, about 20 minutes
#                       in all; 1 is the quick run, under 5 minutes, with the
#                       smaller defaults in brackets below)
#   BENCH_ROUNDS        alternating rounds per workload (default 7 [3]; the
#                       purge: at most 3)
#   BENCH_METRICS_ROUNDS  rounds of the counted-vs-not groups (metrics_*),
#                       whose few percent are below one round's spread on a
#                       busy machine (default 31 [5], never fewer than
#                       BENCH_ROUNDS)
#   BENCH_CLIENTS       client counts (default "1 8")
#   BENCH_ROWS          completed keys for replay and expired keys for purge
#                       (default 1000000 [100000])
#   BENCH_MEMORY_CALLS  calls per function in the memory check (default
#                       100000 [10000])
#   BENCH_GROUPS        workload groups to run (default: all)
#   BENCH_EDITIONS      the editions whose workloads run beside the
#                       baselines (default "c portable"; the WAL, waits,
#                       memory, purge and relay wake-up checks are the C
#                       edition's)
#   BENCH_PROFILE_TX    transactions of each workload in group profile, the
#                       portable edition's functions' self times (default
#                       2000 [500])
#   NOTIFY_RATE         events per second of the steady load under which the
#                       relay wake-up is measured (default 500)
#   WAIT_KEYS, WAIT_WAITERS  hot keys and waiters per key of the wake-up
#                       count in group wait (default 10 and 6)
#   BENCH_KEEP=1        keep the work directory (cluster, logs)
#   BENCH_DOC=1         write doc/performance.md and doc/dashboard.svg after
#                       a partial run too (BENCH_DOC=0: never write them)
#   BENCH_SCRAPE        seconds between Prometheus' scrapes for
#                       doc/dashboard.svg (default 15)
# Workloads whose functions the build lacks are reported as skipped.
#
# PG_MAJOR (make bench PG=17, PG=18) picks the PostgreSQL major; one that is
# not this system's own runs in its Debian chroot (bench/chroot.sh, as make
# test does), with the knobs above passed on; its report comes back as
# bench/results/<UTC timestamp>-pgN.md, and it never writes
# doc/performance.md.
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"
. "$IDEM_TOP/bench/lib.sh"
. "$IDEM_TOP/bench/doc.sh"
idem_runs_natively "$PG_MAJOR" || exec bash "$IDEM_TOP/bench/chroot.sh" "$PG_MAJOR"
# In a chroot of scripts/chroot.sh (bench/chroot.sh brought us here) the
# run is not the host's: doc/performance.md is left alone, so gnuplot,
# Prometheus and postgres_exporter are not needed either.
BENCH_CHROOT=$(cat /etc/idempotency-chroot 2>/dev/null)

# The command as it was given, for doc/performance.md.
BENCH_COMMAND="make bench"
for v in BENCH_PROFILE_TX BENCH_SCRAPE BENCH_EDITIONS BENCH_GROUPS BENCH_MEMORY_CALLS BENCH_ROWS BENCH_CLIENTS BENCH_ROUNDS BENCH_METRICS_ROUNDS BENCH_SECONDS NOTIFY_RATE; do
  [ -n "${!v:-}" ] && BENCH_COMMAND="$v=$(printf '%q' "${!v}") $BENCH_COMMAND"
done
BENCH_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
BENCH_SECONDS=${BENCH_SECONDS:-2}
NOTIFY_RATE=${NOTIFY_RATE:-500}
if [ "$BENCH_SECONDS" -ge 2 ]; then
  BENCH_ROUNDS=${BENCH_ROUNDS:-7}
  BENCH_METRICS_ROUNDS=${BENCH_METRICS_ROUNDS:-31}
  BENCH_ROWS=${BENCH_ROWS:-1000000}
  BENCH_MEMORY_CALLS=${BENCH_MEMORY_CALLS:-100000}
  BENCH_PROFILE_TX=${BENCH_PROFILE_TX:-2000}
else	# the quick run, under 5 minutes
  BENCH_ROUNDS=${BENCH_ROUNDS:-3}
  BENCH_METRICS_ROUNDS=${BENCH_METRICS_ROUNDS:-5}
  BENCH_ROWS=${BENCH_ROWS:-100000}
  BENCH_MEMORY_CALLS=${BENCH_MEMORY_CALLS:-10000}
  BENCH_PROFILE_TX=${BENCH_PROFILE_TX:-500}
fi
BENCH_CLIENTS=${BENCH_CLIENTS:-1 8}
[ "$BENCH_METRICS_ROUNDS" -ge "$BENCH_ROUNDS" ] || BENCH_METRICS_ROUNDS=$BENCH_ROUNDS
ALL_GROUPS="e2e bare syncoff replay hotkey inbox outbox inbox_batch outbox_batch transition metrics_claim metrics_replay relay writes notify wait waits wal memory purge profile"
BENCH_GROUPS=${BENCH_GROUPS:-$ALL_GROUPS}
BENCH_EDITIONS=${BENCH_EDITIONS:-c portable}
for e in $BENCH_EDITIONS; do
  case $e in c | portable) ;; *) echo "BENCH_EDITIONS: unknown edition $e (c, portable)" >&2; exit 2 ;; esac
done
# edition E: true when BENCH_EDITIONS has E.
edition() { [[ " $BENCH_EDITIONS " == *" $1 "* ]]; }
SCRIPTS=$IDEM_TOP/bench/pgbench
REQ='{"amount": 100, "currency": "EUR"}'

idem_ensure_packages $IDEM_PACKAGES redis-server libhiredis-dev python3-psycopg2 \
  $([ -n "$BENCH_CHROOT" ] || echo gnuplot-nox prometheus prometheus-postgres-exporter) || exit 1
idem_build || { echo "build failed" >&2; exit 1; }

WORK=$(mktemp -d /tmp/idempotency-bench.XXXXXX)
chmod 755 "$WORK"
BIN=$(idem_private_install "$WORK") || { echo "install failed" >&2; exit 1; }
CLUSTER=$WORK/cluster
# the portable edition's cluster (its own: see below)
PCLUSTER=$WORK/cluster-portable
RESULTS=$WORK/results.tsv
NOTES=$WORK/notes.md
: >"$RESULTS"
: >"$NOTES"
REDIS_PIDS=()
DASHBOARD_PID=

cleanup() {
  local pid
  for pid in "${REDIS_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  [ -z "$DASHBOARD_PID" ] || { kill "$DASHBOARD_PID" && wait "$DASHBOARD_PID"; } 2>/dev/null
  idem_stop_cluster "$BIN" "$CLUSTER"
  idem_stop_cluster "$BIN" "$PCLUSTER"
  if [ -n "${BENCH_KEEP:-}" ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

cc -O2 -Wall -o "$WORK/redis_driver" "$IDEM_TOP/bench/redis_driver.c" \
  -I"$($PG_BIN/pg_config --includedir)" -lpq -lhiredis -lpthread || exit 1

# --- the clusters: durable defaults, room for a million keys in memory,
# no checkpoint in the middle of a run.  The C edition's with the library
# preloaded, as for claim(..., wait) and the outcome counts; the portable
# edition's, when it runs, a second one with the same settings and
# without the C library, as on a managed service (where the library is
# loaded, its settings show their defaults to the portable edition too,
# which then reads them as set).  One pgbench runs at a time, so the two
# never run at once; each has its socket in its own directory.
# start_bench_cluster DIR PORT PRELOAD [CONF LINES...]
start_bench_cluster() {
  local dir=$1 port=$2 preload=$3
  shift 3
  idem_start_cluster "$BIN" "$dir" "$port" '' "$preload" || { cat "$dir/server.log"; return 1; }
  {
    printf '%s\n' 'fsync = on' 'synchronous_commit = on' 'full_page_writes = on' 'shared_buffers = 1GB' \
      'max_wal_size = 16GB' 'min_wal_size = 2GB' 'checkpoint_timeout = 1h' "$@"
  } >>"$dir/data/postgresql.conf"
  runuser -u postgres -- "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -s restart
}
# (group wait measures many sleeping waiters of each hot key)
start_bench_cluster "$CLUSTER" 5432 'pg_cron, idempotency' 'idempotency.max_waiters_per_key = 256' || exit 1
if edition portable; then
  start_bench_cluster "$PCLUSTER" 5432 'pg_cron' || exit 1
fi

# The database and owner of each edition: the C edition's in bench, owned
# by postgres, the portable edition's in bench_portable, installed by its
# owner; the workloads of both run as the application role BENCH_APP.
declare -A EDITION_DB=([c]=bench [portable]=bench_portable)
declare -A EDITION_USER=([c]=postgres [portable]=bench_portable)
declare -A EDITION_HOST=([c]=$CLUSTER [portable]=$PCLUSTER)
BENCH_APP=bench_app
# qe EDITION PSQL_ARGS...: psql in EDITION's database as its role.
qe() {
  local e=$1
  shift
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "${EDITION_HOST[$e]}" -U "${EDITION_USER[$e]}" -d "${EDITION_DB[$e]}" "$@"
}
q() { qe c "$@"; }
qv() { q -At -c "$1"; }
"$BIN/psql" -X -q -h "$CLUSTER" -U postgres -d postgres -c 'CREATE DATABASE bench' \
  -c "CREATE ROLE $BENCH_APP LOGIN" || exit 1
q -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/bench/setup.sql" >/dev/null || exit 1
# The portable edition: the plain script (scripts/portable.py build), run
# with psql -f by a role with CREATE on its database and nothing more, as
# on a managed service; the pg_tle route installs the same function bodies.
if edition portable; then
  . "$IDEM_TOP/test/portable/lib.sh"
  idem_log "the portable edition: plain script into database bench_portable"
  portable_build_edition "$WORK" || { echo "portable build failed" >&2; exit 1; }
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PCLUSTER" -U postgres -d postgres \
    -c 'CREATE ROLE bench_portable LOGIN' -c "CREATE ROLE $BENCH_APP LOGIN" -c 'CREATE DATABASE bench_portable' \
    -c 'GRANT CREATE ON DATABASE bench_portable TO bench_portable' || exit 1
  PATH=$BIN:$PATH portable_install plain bench_portable bench_portable -h "$PCLUSTER" || exit 1
  qe portable -f "$IDEM_TOP/bench/setup.sql" >/dev/null || exit 1
fi

# --- Redis: appendfsync always (the durable anchor) and no AOF.
start_redis() {
  local name=$1 i
  shift
  mkdir -p "$WORK/redis-$name"
  redis-server --port 0 --unixsocket "$WORK/redis-$name.sock" --unixsocketperm 700 \
    --dir "$WORK/redis-$name" --save '' --logfile "$WORK/redis-$name.log" "$@" &
  REDIS_PIDS+=($!)
  for i in $(seq 50); do
    redis-cli -s "$WORK/redis-$name.sock" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "redis-server ($name) did not start" >&2
  return 1
}
start_redis always --appendonly yes --appendfsync always || exit 1
start_redis noaof --appendonly no || exit 1

# --- the data the workloads read: a million completed keys, in the
# extension's table and in both baseline tables.
idem_log "loading $BENCH_ROWS completed keys"
q -v rows="$BENCH_ROWS" -v req="$REQ" -f "$IDEM_TOP/bench/load.sql" \
  -v app="$BENCH_APP" -f "$IDEM_TOP/bench/grant_app.sql" >/dev/null || exit 1
q -c 'VACUUM ANALYZE' || exit 1
if edition portable; then
  # the extension's keys only: the baselines run in bench
  qe portable -v rows="$BENCH_ROWS" -v req="$REQ" -v ours_only=1 -f "$IDEM_TOP/bench/load.sql" \
    -v app="$BENCH_APP" -f "$IDEM_TOP/bench/grant_app.sql" >/dev/null &&
    "$BIN/psql" -X -q -h "$PCLUSTER" -U postgres -d bench_portable -c 'VACUUM ANALYZE' || exit 1
fi
q -c 'CHECKPOINT' || exit 1
# Prometheus and postgres_exporter for doc/dashboard.svg, from here on
dashboard_start

# has_in EDITION FUNC...: true when every function exists in EDITION's
# database; has FUNC...: in the C edition's build.
has_in() {
  local e=$1 f
  shift
  for f in "$@"; do
    [ "$(qe "$e" -At -c "SELECT count(*) > 0 FROM pg_proc WHERE pronamespace = 'idempotency'::regnamespace AND proname = '$f'")" = t ] || return 1
  done
}
has() { has_in c "$@"; }

# run_pgbench SCRIPT CLIENTS [PGOPTIONS [EDITION [ROLE]]]: prints "tps p50_ms
# p99_ms"; ROLE defaults to the application role.
run_pgbench() {
  local script=$1 clients=$2 opts=${3:-} e=${4:-c} role=${5:-$BENCH_APP} dir out tps
  dir=$(mktemp -d "$WORK/run.XXXXXX")
  if ! out=$(cd "$dir" && PGOPTIONS="$opts" "$BIN/pgbench" -n -M prepared \
      -h "${EDITION_HOST[$e]}" -U "$role" -c "$clients" -j "$clients" -T "$BENCH_SECONDS" \
      -D n=0 -D rows="$BENCH_ROWS" -l --log-prefix=tx -f "$SCRIPTS/$script" "${EDITION_DB[$e]}" 2>&1); then
    printf '%s: %s\n' "$script" "$out" | tail -5 >>"$WORK/errors.log"
    echo "NA NA NA"
    return
  fi
  tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | tail -1)
  echo "$tps $(cat "$dir"/tx.* | awk '{print $3}' | bench_percentiles)"
  rm -rf "$dir"
}

# run_relay SCRIPT CLIENTS [EDITION]: relay throughput from a full outbox,
# in events per second, with per-call latencies.
run_relay() {
  local script=$1 clients=$2 e=${3:-c} before after res
  qe "$e" -c 'DELETE FROM idempotency.outbox_events WHERE published_at IS NOT NULL' >/dev/null
  qe "$e" -c "INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', 'agg-' || (i % 1000), 'OrderPaid', '{\"n\": 1}'
          FROM generate_series(1, $((BENCH_SECONDS * 25000))) i" -c 'ANALYZE idempotency.outbox_events' >/dev/null
  before=$(qe "$e" -At -c 'SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NOT NULL')
  res=$(run_pgbench "$script" "$clients" "" "$e")
  after=$(qe "$e" -At -c 'SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NOT NULL')
  # the events-per-second figure replaces TPS; latencies stay per call
  echo "$(awk -v a="$before" -v b="$after" -v s="$BENCH_SECONDS" 'BEGIN {printf "%.1f", (b - a) / s}') ${res#* }"
}

# Workload variants: group name role runner argument required-functions [pgoptions].
# role "ours" rows get a ratio to every "base" row of their group; each runs
# for every edition of BENCH_EDITIONS (the portable edition's as
# portable_<name>, role "portable").
VARIANTS="
e2e execute ours pgbench e2e_execute.sql execute
e2e one_tx ours pgbench e2e_onetx.sql claim,complete
e2e phased ours pgbench e2e_phased.sql claim,complete
e2e seeds_middleware base pgbench e2e_seeds.sql -
e2e business_insert_only base pgbench e2e_insert_only.sql -
e2e floor_one_statement base pgbench e2e_floor.sql -
e2e redis_aof_always base redis always -
e2e redis_no_aof base redis noaof -
bare phased ours pgbench phased.sql claim,complete
bare one_tx ours pgbench onetx.sql claim,complete
bare raw_one_tx base pgbench onetx_raw.sql -
bare floor_2_statements base pgbench floor.sql -
bare seeds_3_statements base pgbench seeds3.sql -
bare plpgsql base pgbench plpgsql.sql -
syncoff phased ours pgbench phased.sql claim,complete -c%20synchronous_commit=off
syncoff floor_2_statements base pgbench floor.sql - -c%20synchronous_commit=off
syncoff plpgsql base pgbench plpgsql.sql - -c%20synchronous_commit=off
replay claim_replay ours pgbench replay.sql claim
replay pk_select base pgbench replay_pk.sql -
replay plpgsql base pgbench replay_plpgsql.sql -
hotkey claim_replay ours pgbench hotkey.sql claim
hotkey pk_select base pgbench hotkey_pk.sql -
inbox process_once ours pgbench process_once.sql process_once
inbox insert_on_conflict base pgbench inbox.sql -
outbox enqueue_event ours pgbench enqueue_event.sql enqueue_event
outbox enqueue_event_notify_off ours pgbench enqueue_event.sql enqueue_event -c%20idempotency.outbox_notify=off
outbox insert base pgbench outbox.sql -
inbox_batch process_once_100 ours pgbench inbox_batch_100.sql process_once
inbox_batch process_once_single_x100 base pgbench inbox_single_100.sql process_once
inbox_batch inbox_multirow_100 base pgbench inbox_multirow_100.sql -
inbox_batch inbox_multirow_arrays_100 base pgbench inbox_multirow_arrays_100.sql -
outbox_batch enqueue_events_100 ours pgbench enqueue_batch_100.sql enqueue_events
outbox_batch enqueue_event_single_x100 base pgbench enqueue_single_100.sql enqueue_event
outbox_batch outbox_multirow_100 base pgbench outbox_multirow_100.sql -
outbox_batch outbox_multirow_arrays_100 base pgbench outbox_multirow_arrays_100.sql -
transition transition ours pgbench transition.sql transition
transition update_then_select base pgbench transition_raw.sql -
metrics_claim counted ours pgbench phased.sql claim,complete,metrics -c%20synchronous_commit=off
metrics_claim uncounted base pgbench phased.sql claim,complete,metrics -c%20synchronous_commit=off%20-c%20idempotency.track_outcomes=off
metrics_replay counted ours pgbench replay.sql claim,metrics
metrics_replay uncounted base pgbench replay.sql claim,metrics -c%20idempotency.track_outcomes=off
relay batch_100 ours relay relay_100.sql claim_events,mark_published
writes phased ours pgbench phased.sql claim,complete
writes phased_statements base pgbench phased.sql claim,complete -c%20idempotency.direct_writes=off
writes one_tx ours pgbench onetx.sql claim,complete
writes one_tx_statements base pgbench onetx.sql claim,complete -c%20idempotency.direct_writes=off
writes execute ours pgbench e2e_execute.sql execute
writes execute_statements base pgbench e2e_execute.sql execute -c%20idempotency.direct_writes=off
writes process_once ours pgbench process_once.sql process_once
writes process_once_statements base pgbench process_once.sql process_once -c%20idempotency.direct_writes=off
writes enqueue_event ours pgbench enqueue_event.sql enqueue_event
writes enqueue_event_statements base pgbench enqueue_event.sql enqueue_event -c%20idempotency.direct_writes=off
relay batch_1000 ours relay relay_1000.sql claim_events,mark_published
"

declare -A TITLE=(
  [e2e]="End-to-end payment request (idempotency + business INSERT)"
  [bare]="Bare request path (claim + complete)"
  [syncoff]="Bare request path with synchronous_commit=off (CPU cost)"
  [replay]="Replay of a completed key among $BENCH_ROWS"
  [hotkey]="Replay, all clients on one hot key"
  [inbox]="Inbox: process_once"
  [outbox]="Outbox: enqueue_event"
  [inbox_batch]="Inbox: batches of 100 event ids (TPS column = batches/s; events/s = 100 x)"
  [outbox_batch]="Outbox: batches of 100 events (TPS column = batches/s; events/s = 100 x)"
  [transition]="State machine: transition"
  [metrics_claim]="Outcome counts: phased claim + complete with synchronous_commit=off (CPU cost), counted and not (idempotency.track_outcomes)"
  [metrics_replay]="Outcome counts: replay of a completed key, counted and not (idempotency.track_outcomes)"
  [relay]="Outbox relay: claim_events + mark_published (TPS column = events/s)"
  [writes]="The C edition's two write paths, synchronous_commit=on: rows written directly (the default) and through their statements (idempotency.direct_writes=off); read each workload against its own _statements row"
)

# The hand-written SQL that each workload of the editions is compared with
# in the table of the editions (group/name -> baseline; the relay has none).
declare -A MAIN_BASE=(
  [e2e/execute]=seeds_middleware [e2e/one_tx]=seeds_middleware [e2e/phased]=seeds_middleware
  [bare/phased]=floor_2_statements [bare/one_tx]=raw_one_tx [syncoff/phased]=floor_2_statements
  [replay/claim_replay]=pk_select [hotkey/claim_replay]=pk_select
  [inbox/process_once]=insert_on_conflict [outbox/enqueue_event]=insert
  [outbox/enqueue_event_notify_off]=insert
  [inbox_batch/process_once_100]=inbox_multirow_arrays_100
  [outbox_batch/enqueue_events_100]=outbox_multirow_arrays_100
  [transition/transition]=update_then_select
)

# run_variant RUNNER ARG CLIENTS PGOPTIONS EDITION [ROLE]: prints "tps p50 p99".
run_variant() {
  case $1 in
  pgbench) run_pgbench "$2" "$3" "$4" "$5" "${6:-}" ;;
  relay) run_relay "$2" "$3" "$5" ;;
  redis) "$WORK/redis_driver" "$WORK/redis-$2.sock" "host=$CLUSTER user=postgres dbname=bench" \
           "$3" "$BENCH_SECONDS" 2>>"$WORK/errors.log" || echo "NA NA NA" ;;
  esac
}

# run_group GROUP: every available variant, alternating, BENCH_ROUNDS rounds
# (BENCH_METRICS_ROUNDS for the metrics_* groups).
run_group() {
  local group=$1 clients c round i n line name role runner arg req opts rounds=$BENCH_ROUNDS user=
  local -a run=()
  # idempotency.track_outcomes is a superuser's setting
  [[ $group != metrics_* ]] || { rounds=$BENCH_METRICS_ROUNDS; user=postgres; }
  while read -r g name role runner arg req opts; do
    [ "$g" = "$group" ] || continue
    if [ "$role" = base ] || edition c; then
      if [ "$req" != - ] && ! has ${req//,/ }; then
        echo "- $group/$name skipped: idempotency.${req//,/, idempotency.} not in this build" >>"$NOTES"
      else
        run+=("$name $role $runner $arg ${opts:-}")
      fi
    fi
    # (the portable edition has no outcome counts, and one write path)
    if [ "$role" = ours ] && edition portable && [[ $group != metrics_* && $group != writes ]]; then
      if [ "$req" != - ] && ! has_in portable ${req//,/ }; then
        echo "- $group/portable_$name skipped: idempotency.${req//,/, idempotency.} not in the portable edition" >>"$NOTES"
      else
        run+=("portable_$name portable $runner $arg ${opts:-}")
      fi
    fi
  done <<<"$VARIANTS"
  [[ " ${run[*]} " == *" ours "* || " ${run[*]} " == *" portable "* ]] || return 0
  clients=$BENCH_CLIENTS
  [ "$group" = hotkey ] && clients=$(echo $BENCH_CLIENTS | tr ' ' '\n' | sort -n | tail -1)
  n=${#run[@]}
  for c in $clients; do
    for round in $(seq "$rounds"); do
      for i in $(seq 0 $((n - 1))); do
        read -r name role runner arg opts <<<"${run[$(((i + round) % n))]}"
        idem_log "$group/$name, $c clients, round $round"
        echo "$group $name $role $c $round $(run_variant "$runner" "$arg" "$c" "${opts//%20/ }" \
          "$([ "$role" = portable ] && echo portable || echo c)" "$user")" >>"$RESULTS"
      done
    done
  done
}

# median: numbers on stdin (NA ignored) -> their median, or NA.
median() {
  grep -v NA | sort -g | awk '{a[NR] = $1}
    END {if (NR == 0) print "NA"; else if (NR % 2) print a[(NR + 1) / 2];
         else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# colmed GROUP VARIANT CLIENTS COLUMN: median of a results column (6 tps, 7 p50, 8 p99).
colmed() {
  awk -v g="$1" -v v="$2" -v c="$3" -v k="$4" '$1 == g && $2 == v && $4 == c {print $k}' "$RESULTS" | median
}

# ratio GROUP OURS BASE CLIENTS [p50]: median over rounds of tps(ours) /
# tps(base); with p50, of p50(base) / p50(ours) (above 1: ours is faster).
ratio() {
  awk -v g="$1" -v a="$2" -v b="$3" -v c="$4" -v m="${5:-tps}" '
    $1 == g && $4 == c && $2 == a {x[$5] = (m == "tps" ? $6 : $7)}
    $1 == g && $4 == c && $2 == b {y[$5] = (m == "tps" ? $6 : $7)}
    END {for (r in x) if ((r in y) && x[r] != "NA" && y[r] != "NA" && x[r] > 0 && y[r] > 0)
           printf "%.2f\n", (m == "tps" ? x[r] / y[r] : y[r] / x[r])}' \
    "$RESULTS" | median | fmt %.2f
}

# fmt FORMAT: the number on stdin in FORMAT, or NA.
fmt() {
  awk -v f="$1" '{if ($1 == "NA") print "NA"; else printf f "\n", $1}'
}

# table GROUP: the markdown table of one group.
table() {
  local group=$1 bases v c header sep row b
  # (awk's exit status, not "| grep -q": with pipefail, grep's early exit
  # could fail the pipeline and drop the table)
  awk -v g="$group" '$1 == g {f = 1; exit} END {exit !f}' "$RESULTS" || return 0
  bases=$(awk -v g="$group" '$1 == g && $3 == "base" && !s[$2]++ {print $2}' "$RESULTS")
  header="| variant | clients | TPS | p50 ms | p99 ms |"
  sep="|---|---:|---:|---:|---:|"
  for b in $bases; do header+=" ratio to $b |"; sep+="---:|"; done
  printf '\n### %s\n\n%s\n%s\n' "${TITLE[$group]}" "$header" "$sep"
  for c in $(awk -v g="$group" '$1 == g && !s[$4]++ {print $4}' "$RESULTS"); do
    for v in $(awk -v g="$group" '$1 == g && !s[$2]++ {print $2}' "$RESULTS"); do
      row="| $v | $c | $(colmed "$group" "$v" "$c" 6 | fmt %.0f) | $(colmed "$group" "$v" "$c" 7 | fmt %.3f) | $(colmed "$group" "$v" "$c" 8 | fmt %.3f) |"
      for b in $bases; do
        if awk -v g="$group" -v v="$v" '$1 == g && $2 == v && $3 != "base" {f = 1} END {exit !f}' "$RESULTS"; then
          row+=" $(ratio "$group" "$v" "$b" "$c")× ($(ratio "$group" "$v" "$b" "$c" p50)×) |"
        else
          row+=" |"
        fi
      done
      echo "$row"
    done
  done
}

# editions_table: the workloads of both editions beside the hand-written
# SQL of MAIN_BASE, as medians of the per-round ratios (TPS, and in
# brackets p50 latency); empty when the portable edition did not run.
editions_table() {
  local g v c b row
  awk '$3 == "portable" {f = 1; exit} END {exit !f}' "$RESULTS" || return 0
  echo "| workload | clients | C TPS | portable TPS | baseline | C / baseline | portable / baseline | portable / C |"
  echo "|---|---:|---:|---:|---|---:|---:|---:|"
  for g in $BENCH_GROUPS; do
    for v in $(awk -v g="$g" '$1 == g && $3 == "portable" && !s[$2]++ {print substr($2, 10)}' "$RESULTS"); do
      b=${MAIN_BASE[$g/$v]:-}
      for c in $(awk -v g="$g" '$1 == g && !s[$4]++ {print $4}' "$RESULTS"); do
        row="| $g: $v | $c | $(colmed "$g" "$v" "$c" 6 | fmt %.0f) | $(colmed "$g" "portable_$v" "$c" 6 | fmt %.0f) |"
        if [ -n "$b" ]; then
          row+=" $b | $(ratio "$g" "$v" "$b" "$c")× ($(ratio "$g" "$v" "$b" "$c" p50)×)"
          row+=" | $(ratio "$g" "portable_$v" "$b" "$c")× ($(ratio "$g" "portable_$v" "$b" "$c" p50)×) |"
        else
          row+=" none | | |"
        fi
        echo "$row $(ratio "$g" "portable_$v" "$v" "$c")× ($(ratio "$g" "portable_$v" "$v" "$c" p50)×) |"
      done
    done
  done
}

# editions_range: "LOW HIGH COUNT" of the portable / C TPS ratios of the
# editions table, or nothing.
editions_range() {
  editions_table | awk -F'|' 'NR > 2 {split($9, a, "×"); if (a[1] + 0 > 0) print a[1] + 0}' |
    sort -g | awk '{a[NR] = $1} END {if (NR) printf "%.2f %.2f %d\n", a[1], a[NR], NR}'
}

TARGETS=$WORK/targets.md
: >"$TARGETS"
# target DESCRIPTION MEASURED THRESHOLD [le]: one line of the targets table.
target() {
  local desc=$1 got=$2 want=$3 cmp=${4:-ge} verdict
  if [ "$got" = NA ] || [ -z "$got" ]; then
    verdict="not measured"
  elif awk -v x="$got" -v y="$want" -v c="$cmp" 'BEGIN {exit !(c == "ge" ? x >= y : x <= y)}'; then
    verdict=met
  else
    verdict="**not met**"
  fi
  echo "| $desc | $got | $([ "$cmp" = ge ] && echo "≥" || echo "≤") $want | $verdict |" >>"$TARGETS"
}

# ratio_target GROUP OURS BASE CLIENTS THRESHOLD DESCRIPTION
ratio_target() {
  awk -v g="$1" -v v="$2" -v c="$4" '$1 == g && $2 == v && $4 == c {f = 1; exit} END {exit !f}' "$RESULTS" || return 0
  target "$6, $4 client$([ "$4" = 1 ] || echo s) (p50 latency ratio $(ratio "$1" "$2" "$3" "$4" p50))" \
    "$(ratio "$1" "$2" "$3" "$4")" "$5"
}

# --- WAL written by replays (none expected), against the bare SELECT.
wal_check() {
  has claim || return 0
  local s b a round w_ours w_pk
  for round in 1 2 3; do
    for s in replay.sql replay_pk.sql; do
      b=$(qv 'SELECT pg_current_wal_insert_lsn()')
      "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U postgres -c 1 -t 5000 -D rows="$BENCH_ROWS" -f "$SCRIPTS/$s" bench >/dev/null 2>&1
      a=$(qv 'SELECT pg_current_wal_insert_lsn()')
      echo "$s $(qv "SELECT round(pg_wal_lsn_diff('$a', '$b') / 5000.0, 2)")"
    done
  done >"$WORK/wal.txt"
  w_ours=$(awk '$1 == "replay.sql" {print $2}' "$WORK/wal.txt" | median)
  w_pk=$(awk '$1 == "replay_pk.sql" {print $2}' "$WORK/wal.txt" | median)
  echo "- WAL per replay (median of 3 x 5000 calls, alternating): $w_ours bytes per claim() of a completed key, $w_pk bytes per bare primary-key SELECT over the same spans (background writers count in both)" >>"$NOTES"
  REPLAY_WAL=$w_ours
}

# --- where the most clients' backends spend their time: pg_stat_activity
# sampled every 5 ms by one more session during a run (run_pgbench) of each
# of a new request's workloads and their baselines, with the WAL each
# transaction wrote (no checkpoint during the runs, as in the rounds: few
# full-page images).  A backend with no wait event is on a processor or
# waiting for one.
waits_check() {
  has execute claim complete || return 0
  local clients s b a tps wal
  clients=$(echo $BENCH_CLIENTS | tr ' ' '\n' | sort -n | tail -1)
  q -c 'CREATE TABLE IF NOT EXISTS bench.wait_samples (script text, wait text)' -c 'TRUNCATE bench.wait_samples' >/dev/null
  {
    echo "- Where $clients clients' backends wait (\`pg_stat_activity\` sampled every 5 ms during one run of $BENCH_SECONDS s of each script, share of the samples of active backends; WAL bytes per transaction: the WAL of the run over TPS x seconds):"
    echo
    echo "  | script | samples | on a processor | WAL flush (\`WALWrite\`, \`WALSync\`) | WAL insert | other waits | WAL bytes / transaction |"
    echo "  | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  } >>"$NOTES"
  for s in e2e_execute.sql e2e_floor.sql e2e_insert_only.sql phased.sql floor.sql onetx.sql onetx_raw.sql; do
    b=$(qv 'SELECT pg_current_wal_insert_lsn()')
    run_pgbench "$s" "$clients" >"$WORK/waits-$s.out" &
    q -c "DO \$\$
      BEGIN
        PERFORM pg_sleep(0.2);
        FOR i IN 1..$((BENCH_SECONDS * 120)) LOOP
          PERFORM pg_stat_clear_snapshot();
          INSERT INTO bench.wait_samples
            SELECT '$s', CASE WHEN wait_event IS NULL THEN 'processor'
                              WHEN wait_event IN ('WALWrite', 'WALSync') THEN 'flush'
                              WHEN wait_event = 'WALInsert' THEN 'insert'
                              ELSE 'other' END
              FROM pg_stat_activity
             WHERE backend_type = 'client backend' AND state = 'active'
               AND datname = 'bench' AND pid <> pg_backend_pid();
          PERFORM pg_sleep(0.005);
        END LOOP;
      END \$\$" >/dev/null
    wait $!
    a=$(qv 'SELECT pg_current_wal_insert_lsn()')
    read -r tps _ <"$WORK/waits-$s.out"
    wal=NULL
    [ "$tps" = NA ] || wal="round(pg_wal_lsn_diff('$a', '$b') / ($tps * $BENCH_SECONDS))"
    qv "SELECT count(*), $(for k in processor flush insert other; do
                            printf "round(100.0 * count(*) FILTER (WHERE wait = '%s') / count(*)), " "$k"
                          done) $wal
          FROM bench.wait_samples WHERE script = '$s'" |
      awk -F'|' -v s="$s" '{printf "  | `%s` | %s | %s %% | %s %% | %s %% | %s %% | %s |\n", s, $1, $2, $3, $4, $5, $6}' >>"$NOTES"
  done
  echo >>"$NOTES"
}

# --- memory: growth of a backend's memory contexts over many calls of each
# hot function, one transaction per call from one pgbench client.  The
# backend records its total into bench.memory_probe after 1000 and 2000
# calls (warm-up), halfway and at the end; a leak grows in both halves, a
# cache that fills up once does not.
memory_check() {
  local name req file script last half grown first second
  q -c 'CREATE TABLE IF NOT EXISTS bench.memory_probe (calls bigint, bytes bigint)' >/dev/null
  last=$((2000 + BENCH_MEMORY_CALLS))
  half=$((2000 + BENCH_MEMORY_CALLS / 2))
  while read -r name req file; do
    [ -n "$name" ] || continue
    has ${req//,/ } || { echo "- memory/$name skipped: not in this build" >>"$NOTES"; continue; }
    idem_log "memory: $name x $BENCH_MEMORY_CALLS"
    script=$WORK/$file
    { echo '\set n :n + 1'; cat "$SCRIPTS/$file" "$SCRIPTS/mem_probe.sql"; } >"$script"
    q -c 'TRUNCATE bench.memory_probe' >/dev/null
    PGOPTIONS='-c synchronous_commit=off' "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U postgres \
      -c 1 -t "$last" -D n=0 -D half="$half" -D last="$last" -f "$script" bench >/dev/null 2>>"$WORK/errors.log"
    read -r first second <<<"$(qv "SELECT max(bytes) FILTER (WHERE calls = $half) - max(bytes) FILTER (WHERE calls = 2000),
                                          max(bytes) FILTER (WHERE calls = $last) - max(bytes) FILTER (WHERE calls = $half)
                                     FROM bench.memory_probe" | tr '|' ' ')"
    grown=$(awk -v a="${first:-NA}" -v b="${second:-NA}" 'BEGIN {if (a == "NA" || b == "NA") print "NA"; else print (a < b ? a : b) * 2}')
    target "memory growth of $name per $BENCH_MEMORY_CALLS calls, bytes (first half $first, second half $second; the smaller half, doubled)" \
      "$grown" "$((1048576 * BENCH_MEMORY_CALLS / 1000000))" le
  done <<'EOF'
claim+complete claim,complete mem_claim_complete.sql
claim(replay) claim mem_claim_replay.sql
execute execute mem_execute.sql
process_once process_once mem_process_once.sql
enqueue_event enqueue_event mem_enqueue_event.sql
transition transition mem_transition.sql
issue_token+consume_token issue_token,consume_token mem_tokens.sql
EOF
}

# claims_during TAG COMMAND...: runs single-client claims in a loop of
# one-second pgbench runs while COMMAND runs; prints "seconds p50 p99" of
# the claims that finished while it ran.
claims_during() {
  local dir=$WORK/claims-$1 loader t0 t1
  shift
  mkdir -p "$dir"
  (
    i=0
    while [ ! -e "$dir/stop" ]; do
      i=$((i + 1))
      (cd "$dir" && "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U postgres -c 1 -T 1 \
        -l --log-prefix="r$i" -f "$SCRIPTS/claim.sql" bench >/dev/null 2>&1)
    done
  ) &
  loader=$!
  sleep 1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  touch "$dir/stop"
  wait "$loader"
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') $(cat "$dir"/r* |
    awk -v a="$t0" -v b="$t1" '{t = $5 + $6 / 1e6; if (t >= a && t <= b) print $3}' | bench_percentiles)"
}

# --- purge: a million expired keys, purge_expired() against a bare DELETE,
# and claim latency meanwhile against without.  Up to three rounds (each
# loads the keys again), since one stall of the shared machine decides a
# p99; the table shows medians, the targets the medians of the per-round
# ratios.
purge_check() {
  has claim purge_expired || { echo "- purge skipped: idempotency.purge_expired not in this build" >>"$NOTES"; return 0; }
  local rounds=$((BENCH_ROUNDS < 3 ? BENCH_ROUNDS : 3)) r quiet ours bare left=0 f=$WORK/purge.txt
  : >"$f"
  for r in $(seq "$rounds"); do
    idem_log "purge round $r: loading $BENCH_ROWS expired keys"
    q >/dev/null <<SQL || return 0
INSERT INTO idempotency.idempotency_keys (key_hash, scope, idempotency_key, request_hash,
    status, fence, recovery_point, response_code, response_body, created_at,
    updated_at, expires_at)
SELECT idempotency.key_hash('', 'purge-$r-' || i), '', 'purge-$r-' || i, idempotency.fingerprint('$REQ'), 'completed',
       nextval('idempotency.fence_seq'), 'started', 200, '{"status": "paid"}',
       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
  FROM generate_series(1, $BENCH_ROWS) i;
INSERT INTO bench.seed_keys (idempotency_key, request_hash, status,
    response_code, response_body, created_at, expires_at)
SELECT 'purge-$r-' || i, sha256(convert_to('$REQ'::jsonb::text, 'UTF8')),
       'COMPLETED', 200, '{"status": "paid"}', now() - interval '2 days',
       now() - interval '1 day'
  FROM generate_series(1, $BENCH_ROWS) i;
VACUUM ANALYZE idempotency.idempotency_keys;
VACUUM ANALYZE bench.seed_keys;
CHECKPOINT;
SQL
    idem_log "purge round $r: claims alone, purge_expired, bare DELETE"
    quiet=$(claims_during quiet-$r sleep "$((BENCH_SECONDS * 2))")
    ours=$(claims_during purge-$r q -c 'CALL idempotency.purge_expired()')
    bare=$(claims_during delete-$r q -c 'DELETE FROM bench.seed_keys WHERE expires_at < now()')
    # per round: seconds, p50 and p99 of the three, in that order
    echo "$quiet $ours $bare" >>"$f"
    left=$((left + $(qv "SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key LIKE 'purge-$r-%'")))
  done
  med() { awk -v k="$1" '{print $k}' "$f" | median; }
  rps() { awk -v n="$BENCH_ROWS" -v s="$1" 'BEGIN {print (s + 0 > 0) ? sprintf("%.0f", n / s) : "NA"}'; }
  {
    printf '\n### Purge of %s expired keys (medians of %s rounds)\n\n' "$BENCH_ROWS" "$rounds"
    echo "| variant | seconds | rows/s | claim p50 ms meanwhile | claim p99 ms meanwhile |"
    echo "|---|---:|---:|---:|---:|"
    echo "| no purge (claims alone) | $(med 1) | | $(med 2) | $(med 3) |"
    echo "| CALL idempotency.purge_expired() | $(med 4) | $(rps "$(med 4)") | $(med 5) | $(med 6) |"
    echo "| DELETE ... WHERE expires_at < now() | $(med 7) | $(rps "$(med 7)") | $(med 8) | $(med 9) |"
    echo
    echo "Expired keys left after purge_expired(): $left. Per round, claim p99"
    echo "during purge_expired() / without: $(awk '{printf "%s%.2f", (NR > 1 ? ", " : ""), ($3 > 0 ? $6 / $3 : 0)}' "$f");"
    echo "during the bare DELETE / without: $(awk '{printf "%s%.2f", (NR > 1 ? ", " : ""), ($3 > 0 ? $9 / $3 : 0)}' "$f")."
  } >>"$WORK/purge.md"
  # per-round ratio of columns A / B, median (NA when a column is)
  rmed() { awk -v a="$1" -v b="$2" '{print ($a + 0 > 0 && $b + 0 > 0) ? $a / $b : "NA"}' "$f" |
    median | awk '{print ($1 == "NA") ? "NA" : sprintf("%.2f", $1)}'; }
  target "purge rows/s, ratio to the bare DELETE" "$(rmed 7 4)" 0.5
  target "claim p99 during purge, ratio to without" "$(rmed 6 3)" 2 le
}

# --- relay wake-up: from an event's commit to a listening relay's claim,
# with no other writer, with 8 pgbench clients enqueuing NOTIFY_RATE events
# a second, and with 8 enqueuing as fast as they can.
notify_check() {
  has enqueue_event claim_events || return 0
  local secs=$((BENCH_SECONDS * 5)) idle steady flood
  # an empty outbox: probes must not queue behind other groups' events
  q -c 'DELETE FROM idempotency.outbox_events' -c 'VACUUM (ANALYZE) idempotency.outbox_events' >/dev/null
  idem_log "notify: relay wake-up, idle"
  idle=$(notify_probe "$secs" idle)
  idem_log "notify: relay wake-up, 8 producers at $NOTIFY_RATE events/s"
  steady=$(notify_probe "$secs" steady "-R $NOTIFY_RATE")
  idem_log "notify: relay wake-up, 8 producers as fast as they can"
  flood=$(notify_probe "$secs" flood "")
  {
    printf '\n### Outbox: from an event'"'"'s commit to a listening relay'"'"'s claim\n\n'
    echo "One relay (LISTEN, claim until empty, a second look after 20 ms, then wait); a probe"
    echo "event every 5-25 ms, each committed alone (bench/notify_latency.py), for $secs s;"
    echo "idempotency.outbox_notify_interval at its default (10 ms). Under load, 8 pgbench"
    echo "clients enqueue events meanwhile, at a fixed rate (pgbench -R) or as fast as they"
    echo "can; in the second case the producers take the CPU and the one relay falls"
    echo "behind, so the figure is the queue's wait, not the wake-up's."
    echo
    echo "| load | p50 ms | p99 ms | probes | not claimed |"
    echo "|---|---:|---:|---:|---:|"
    set -- $idle; echo "| no other writer | $1 | $2 | $3 | $4 |"
    set -- $steady; echo "| 8 pgbench clients enqueuing $(tps_of steady) events/s (-R $NOTIFY_RATE) | $1 | $2 | $3 | $4 |"
    set -- $flood; echo "| 8 pgbench clients enqueuing as fast as they can ($(tps_of flood) events/s) | $1 | $2 | $3 | $4 |"
  } >>"$WORK/notify.md"
  set -- $idle; target "relay wake-up p99 ms, no other writer" "$2" 50 le
  set -- $steady; target "relay wake-up p99 ms, 8 producers at $NOTIFY_RATE events/s" "$2" 50 le
}

# notify_probe SECONDS NAME [PGBENCH_OPTS]: bench/notify_latency.py's
# "p50 p99 probes missed"; given PGBENCH_OPTS (empty, or -R N say), with 8
# pgbench clients enqueuing meanwhile, whose log is notify-NAME.log.
notify_probe() {
  local secs=$1 name=$2 pid=
  local dsn="host=$CLUSTER user=postgres dbname=bench"
  if [ $# -ge 3 ]; then
    (cd "$WORK" && "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U postgres -c 8 -j 8 $3 \
       -T "$((secs + 3))" -f "$SCRIPTS/enqueue_event.sql" bench >"$WORK/notify-$name.log" 2>&1) &
    pid=$!
    sleep 1
  fi
  /usr/bin/python3 "$IDEM_TOP/bench/notify_latency.py" "$dsn" "$secs" 2>>"$WORK/errors.log" || echo "NA NA 0 0"
  [ -z "$pid" ] || wait "$pid"
}

# --- a duplicate request that waits for the first (claim's wait) against
# a client's retry loop with backoff (bench/wait_latency.py): how long
# after the holder's completion commits each gets the answer.
wait_check() {
  [ "$(qv "SELECT count(*) FROM pg_proc WHERE pronamespace = 'idempotency'::regnamespace
             AND proname = 'claim' AND 'wait' = ANY (proargnames)")" = 1 ] || {
    idem_log "wait: skipped (this build's claim() has no wait)"
    return 0
  }
  local secs=$((BENCH_SECONDS * 5)) waited retried
  local dsn="host=$CLUSTER user=postgres dbname=bench"
  idem_log "wait: duplicates that wait for the holder"
  waited=$(/usr/bin/python3 "$IDEM_TOP/bench/wait_latency.py" "$dsn" "$secs" wait 2>>"$WORK/errors.log" || echo "NA NA 0 NA")
  idem_log "wait: duplicates that retry with backoff"
  retried=$(/usr/bin/python3 "$IDEM_TOP/bench/wait_latency.py" "$dsn" "$secs" retry 2>>"$WORK/errors.log" || echo "NA NA 0 NA")
  {
    printf '\n### A duplicate request: waiting for the first, or retrying\n\n'
    echo "A holder claims a new key, works 20 to 80 ms and completes it; just after its claim a"
    echo "duplicate asks for the answer, either with one claim(..., wait => '10 seconds') or as a"
    echo "client without it does: claim, and while in_progress sleep 25 ms, doubling up to 400 ms,"
    echo "and claim again (bench/wait_latency.py, for $secs s each). Latency: from the holder's"
    echo "completion's commit to the duplicate's replay."
    echo
    echo "| duplicate | p50 ms | p99 ms | duplicates | claims per duplicate |"
    echo "|---|---:|---:|---:|---:|"
    set -- $waited; echo "| waits (claim's wait) | $1 | $2 | $3 | $4 |"
    set -- $retried; echo "| retries with backoff | $1 | $2 | $3 | $4 |"
  } >>"$WORK/wait.md"
  set -- $retried
  local retry_p50=$1
  set -- $waited
  target "a waiting duplicate's answer after the holder's commit, p50 ms, vs the retry loop's ($retry_p50)" "$1" "$retry_p50" le
  wait_fanout_check "$dsn" "$secs"
}

# wait_fanout_check DSN SECONDS: many hot keys, many waiters each
# (bench/wait_fanout.py): how many waiters a holder's commit wakes, how
# many of those find their key still held (woken for another key of
# their wait slot), and how soon the waiters get the answer.  The counts
# come from the library's shared counters, which no SQL function of the
# extension shows: bench.wait_counts() binds them here (NA with a library
# that lacks them).
wait_fanout_check() {
  local dsn=$1 secs=$2 keys=${WAIT_KEYS:-10} waiters=${WAIT_WAITERS:-6} fanout
  q -c "CREATE OR REPLACE FUNCTION bench.wait_counts(OUT commits bigint, OUT woken bigint,
          OUT unchanged bigint, OUT slots integer)
        AS '\$libdir/idempotency', 'idempotency_wait_counts' LANGUAGE C" >/dev/null 2>&1 ||
    idem_log "wait: this library has no wake-up counts"
  idem_log "wait: $keys hot keys with $waiters waiters each"
  fanout=$(/usr/bin/python3 "$IDEM_TOP/bench/wait_fanout.py" "$dsn" "$secs" "$keys" "$waiters" 2>>"$WORK/errors.log" ||
    echo "NA NA 0 NA NA NA NA")
  {
    printf '\n### Many hot keys, many waiters: wake-ups per commit\n\n'
    echo "$keys holders each claim a key, work 20 to 80 ms and complete it, over and over; just after"
    echo "each claim $waiters duplicates of that key wait for it with claim(..., wait => '10 seconds'),"
    echo "so $keys keys are hot with $((keys * waiters)) claims asleep (bench/wait_fanout.py, for $secs s)."
    echo "Wake-ups per commit: waiters a completion's commit woke; of those, the ones that found"
    echo "their key still held and slept again (woken for another key of their slot). Latency: from"
    echo "the completion's commit to the duplicate's replay."
    echo
    echo "| waiters | p50 ms | p99 ms | answers | commits | woken per commit | still held per commit | wait slots |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    set -- $fanout; echo "| $((keys * waiters)) | $1 | $2 | $3 | $4 | $5 | $6 | $7 |"
  } >>"$WORK/wait.md"
  set -- $fanout
  # the key's own waiters, and on average at most an eighth of a waiter of
  # other keys (doc/reference.md, "Waiting for the holder")
  target "waiters woken per commit, $waiters per key and $keys keys hot" "$5" "$waiters.12" le
}

# --- the portable edition's functions: self time per call of each function
# of the edition on the paths of a new key (claim, complete), a replay,
# execute, process_once, enqueue_event and transition, from
# pg_stat_user_functions (track_functions = all, set for the database
# meanwhile), BENCH_PROFILE_TX transactions of one client as the
# application role after a warm-up of a tenth as many, each function's
# counters reset before.  A function that PostgreSQL inlines into its
# caller (plain SQL) is no call of its own and counts in its caller's
# self time; so do the statements a function runs.  The timing of each
# call slows the calls a little; the figures show where the time goes,
# not the rounds' speed.
profile_check() {
  edition portable || return 0
  local script name warm=$((BENCH_PROFILE_TX / 10 + 1))
  local -a psu=("$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PCLUSTER" -U postgres -d bench_portable)
  "${psu[@]}" -c "ALTER DATABASE bench_portable SET track_functions = 'all'" || return 0
  : >"$WORK/profile.tsv"
  while read -r script name; do
    idem_log "profile: $name x $BENCH_PROFILE_TX"
    (cd "$WORK" && "$BIN/pgbench" -n -M prepared -h "$PCLUSTER" -U "$BENCH_APP" -c 1 -t "$warm" \
       -D n=0 -D rows="$BENCH_ROWS" -f "$SCRIPTS/$script" bench_portable </dev/null >/dev/null 2>>"$WORK/errors.log")
    "${psu[@]}" -c "SELECT pg_stat_reset_single_function_counters(p.oid) FROM pg_proc p
                     WHERE p.pronamespace = 'idempotency'::regnamespace" </dev/null >/dev/null
    (cd "$WORK" && "$BIN/pgbench" -n -M prepared -h "$PCLUSTER" -U "$BENCH_APP" -c 1 -t "$BENCH_PROFILE_TX" \
       -D n=0 -D rows="$BENCH_ROWS" -f "$SCRIPTS/$script" bench_portable </dev/null >/dev/null 2>>"$WORK/errors.log")
    sleep 1     # the backend reports its counters as it exits
    "${psu[@]}" -At -F "$(printf '\t')" -c "
      SELECT '$name', funcname, round(calls::numeric / $BENCH_PROFILE_TX, 2),
             round((self_time * 1000 / calls)::numeric, 1), round((self_time * 1000 / $BENCH_PROFILE_TX)::numeric, 1),
             round((total_time * 1000 / calls)::numeric, 1)
        FROM pg_stat_user_functions
       WHERE schemaname = 'idempotency' AND calls > 0
       ORDER BY self_time DESC, funcname" </dev/null >>"$WORK/profile.tsv"
  done <<'EOF2'
phased.sql claim (a new key) and complete
replay.sql claim (a replay)
e2e_execute.sql execute
process_once.sql process_once
enqueue_event.sql enqueue_event
transition.sql transition
EOF2
  "${psu[@]}" -c 'ALTER DATABASE bench_portable RESET track_functions'
  {
    printf '\n### The portable edition'"'"'s functions: where the time goes\n\n'
    echo "Each workload of one client, $BENCH_PROFILE_TX transactions as the application role, with"
    echo "\`track_functions = all\` (\`pg_stat_user_functions\`): every function of the edition"
    echo "that the workload calls, its calls per transaction, its self time (without the"
    echo "functions it calls) per call and per transaction, and its time per call with"
    echo "them. Functions in plain SQL that PostgreSQL inlines into their caller are no"
    echo "calls of their own and count in their caller's self time, as do the statements"
    echo "a function runs. Timing each call slows it a little: read the shares, not the"
    echo "speed."
    echo
    echo "| workload | function | calls / transaction | self µs / call | self µs / transaction | µs / call with callees |"
    echo "|---|---|---:|---:|---:|---:|"
    awk -F'\t' '{printf "| %s | `%s` | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6}' "$WORK/profile.tsv"
  } >"$WORK/profile.md"
}

# tps_of NAME: the events per second of notify_probe NAME's pgbench.
tps_of() {
  sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$WORK/notify-$1.log" | tail -1 | cut -d. -f1
}

START=$(date +%s)
for g in $BENCH_GROUPS; do
  case $g in
  notify) notify_check ;;
  wait) wait_check ;;
  waits) waits_check ;;
  wal) wal_check ;;
  memory) memory_check ;;
  purge) purge_check ;;
  profile) profile_check ;;
  *) run_group "$g" ;;
  esac
done

# --- targets, as medians of the per-round ratios.
for c in $BENCH_CLIENTS; do
  ratio_target e2e execute seeds_middleware "$c" 2.5 "end-to-end, execute vs the seeds' middleware"
  ratio_target e2e execute redis_aof_always "$c" 2 "end-to-end, execute vs the seeds' Redis scheme"
  ratio_target e2e execute business_insert_only "$c" 0.8 "end-to-end, execute vs the business INSERT alone"
  ratio_target e2e execute floor_one_statement "$c" 0.95 "end-to-end, execute vs the INSERT and its key row in one statement (the floor)"
done
ratio_target e2e one_tx seeds_middleware 8 1.5 "end-to-end, one transaction vs the seeds' middleware"
for c in $BENCH_CLIENTS; do
  ratio_target bare one_tx raw_one_tx "$c" 0.95 "one-transaction request vs the same transaction in raw SQL"
  ratio_target bare phased floor_2_statements "$c" 0.95 "phased request vs the two-statement floor"
  ratio_target bare phased seeds_3_statements "$c" 1.1 "phased request vs the seeds' three statements"
  ratio_target syncoff phased plpgsql "$c" 1.3 "synchronous_commit=off, phased vs PL/pgSQL"
  ratio_target syncoff phased floor_2_statements "$c" 0.9 "synchronous_commit=off, phased vs the floor"
  ratio_target replay claim_replay pk_select "$c" 0.95 "replay vs the bare primary-key SELECT"
  ratio_target replay claim_replay plpgsql "$c" 1.8 "replay vs PL/pgSQL"
  ratio_target inbox process_once insert_on_conflict "$c" 0.95 "process_once vs the bare inbox INSERT"
  ratio_target outbox enqueue_event insert "$c" 0.95 "enqueue_event vs the bare outbox INSERT"
  ratio_target inbox_batch process_once_100 process_once_single_x100 "$c" 5 "process_once, batch of 100 vs 100 single calls in one transaction"
  ratio_target inbox_batch process_once_100 inbox_multirow_100 "$c" 0.9 "process_once, batch of 100 vs the bare multi-row INSERT ... ON CONFLICT"
  ratio_target inbox_batch process_once_100 inbox_multirow_arrays_100 "$c" 0.9 "process_once, batch of 100 vs the same INSERT from the same array"
  ratio_target outbox_batch enqueue_events_100 enqueue_event_single_x100 "$c" 5 "enqueue_events, batch of 100 vs 100 single calls in one transaction"
  ratio_target outbox_batch enqueue_events_100 outbox_multirow_100 "$c" 0.9 "enqueue_events, batch of 100 vs the bare multi-row INSERT"
  ratio_target outbox_batch enqueue_events_100 outbox_multirow_arrays_100 "$c" 0.9 "enqueue_events, batch of 100 vs the same INSERT from the same arrays"
  ratio_target transition transition update_then_select "$c" 1.3 "transition vs the guarded UPDATE + SELECT"
  ratio_target metrics_claim counted uncounted "$c" 0.97 "phased claim + complete (synchronous_commit=off), counted vs not (idempotency.track_outcomes)"
  ratio_target metrics_replay counted uncounted "$c" 0.97 "replay, counted vs not (idempotency.track_outcomes)"
done
[ -n "${REPLAY_WAL:-}" ] && target "WAL bytes per replay" "$REPLAY_WAL" 0 le
# the portable edition's (doc/portable.md): against the hand-written SQL,
# the project's one-function PL/pgSQL and the C edition
for c in $BENCH_CLIENTS; do
  ratio_target e2e portable_execute seeds_middleware "$c" 2 "portable: end-to-end, execute vs the seeds' middleware"
  ratio_target e2e portable_one_tx seeds_middleware "$c" 1.3 "portable: end-to-end, one transaction vs the seeds' middleware"
  ratio_target bare portable_phased seeds_3_statements "$c" 1 "portable: phased request vs the seeds' three statements"
  ratio_target inbox portable_process_once insert_on_conflict "$c" 0.9 "portable: process_once vs the bare inbox INSERT"
  ratio_target outbox portable_enqueue_event insert "$c" 0.9 "portable: enqueue_event vs the bare outbox INSERT"
  ratio_target transition portable_transition update_then_select "$c" 0.9 "portable: transition vs the guarded UPDATE + SELECT"
  ratio_target replay portable_claim_replay pk_select "$c" 0.7 "portable: replay vs the bare primary-key SELECT"
  ratio_target replay portable_claim_replay plpgsql "$c" 1 "portable: replay vs PL/pgSQL"
  ratio_target syncoff portable_phased plpgsql "$c" 1 "portable: synchronous_commit=off, phased vs PL/pgSQL"
  for gv in e2e/execute e2e/one_tx bare/phased inbox/process_once outbox/enqueue_event transition/transition; do
    ratio_target "${gv%/*}" "portable_${gv#*/}" "${gv#*/}" "$c" 0.8 "portable vs C: ${gv%/*} ${gv#*/}"
  done
done

# --- the report
mkdir -p "$IDEM_TOP/bench/results"
REPORT=$IDEM_TOP/bench/results/$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# make bench$([ -z "$BENCH_CHROOT" ] || echo " PG=$PG_MAJOR"), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "BENCH_SECONDS=$BENCH_SECONDS BENCH_ROUNDS=$BENCH_ROUNDS BENCH_METRICS_ROUNDS=$BENCH_METRICS_ROUNDS BENCH_CLIENTS=\"$BENCH_CLIENTS\"" \
    "BENCH_ROWS=$BENCH_ROWS BENCH_MEMORY_CALLS=$BENCH_MEMORY_CALLS BENCH_EDITIONS=\"$BENCH_EDITIONS\"$([ "$BENCH_GROUPS" = "$ALL_GROUPS" ] ||
      echo " BENCH_GROUPS=\"$BENCH_GROUPS\"");" \
    "$(nproc) CPUs, PostgreSQL $(qv 'SHOW server_version')$([ -z "$BENCH_CHROOT" ] || echo " in the Debian $BENCH_CHROOT chroot")," \
    "$(redis-server --version | cut -d' ' -f3)," \
    "fsync=on, synchronous_commit=on, shared_buffers=1GB; ${BENCH_COMMIT:-$(idem_commit)}" \
    "took $(( $(date +%s) - START )) s."
  echo
  echo "Medians over the rounds. Ratio columns: the median of the per-round TPS ratios (ours / baseline)," \
    "and in brackets the median of the per-round p50 latency ratios (baseline / ours); above 1, ours is faster."
  for g in $BENCH_GROUPS; do table "$g"; done
  if [ -n "$(editions_table)" ]; then
    printf '\n### The C edition, the portable edition and the hand-written SQL\n\n'
    echo "Medians of the per-round TPS ratios, in brackets of the p50 latency ratios; above 1, the first is faster."
    echo
    editions_table
  fi
  [ -s "$WORK/purge.md" ] && cat "$WORK/purge.md"
  [ -s "$WORK/notify.md" ] && cat "$WORK/notify.md"
  [ -s "$WORK/wait.md" ] && cat "$WORK/wait.md"
  [ -s "$WORK/profile.md" ] && cat "$WORK/profile.md"
  if [ -s "$TARGETS" ]; then
    printf '\n### Targets (TPS ratios, medians of the rounds)\n\n| target | measured | wanted | verdict |\n|---|---:|---:|---|\n'
    cat "$TARGETS"
  fi
  if [ -s "$NOTES" ]; then printf '\n### Notes\n\n'; cat "$NOTES"; fi
  if [ -s "$WORK/errors.log" ]; then printf '\n### Errors\n\n```\n'; tail -20 "$WORK/errors.log"; printf '```\n'; fi
} >"$REPORT"
cat "$REPORT"
echo
echo "report written to $REPORT"
write_doc
