#!/usr/bin/env bash
# bench/scale.sh (make bench-scale): the extension in a steady state with
# millions of live keys, beside the hand-written SQL it replaces under the
# same churn.
#
# For each count N of SCALE_KEYS, on a fresh cluster with PostgreSQL's
# defaults for checkpoints (checkpoint_timeout 5min, max_wal_size 1GB),
# autovacuum on and durable commits:
#   1. loads N completed keys into idempotency.idempotency_keys and N into
#      the baseline's bench.seed_keys (bench/scale/load.sql; keys that
#      look like random UUIDs, so the new keys reach the indexes in random
#      order; the primary keys are built after the load, see below), and N
#      rows into the business table.
#      The loaded keys expire at an even rate, so that with the new keys
#      the workloads add, the live count stays near N (the ttl of both is
#      N over the rate of new keys measured on a short calibration run);
#   2. schedules the cleanup with pg_cron every minute: the extension's
#      idempotency.schedule_cleanup() and the baseline's batched DELETE;
#   3. runs for SCALE_MINUTES cycles of pgbench runs of SCALE_SEGMENT
#      seconds at SCALE_CLIENTS clients, each cycle with the next setting
#      of SCALE_WAL_COMPRESSION, in an order that rotates every round (one
#      cycle per setting): new requests through execute() and the phased
#      claim/complete, the business INSERT alone, the baseline's new
#      request (INSERT ... ON CONFLICT, INSERT, UPDATE in one transaction),
#      a retry of a live completed key through claim() and the bare
#      primary-key SELECT of the same retry in the baseline's table;
#   4. records per run TPS, p50/p99 latency and the WAL bytes and full-page
#      images per request (pg_stat_wal deltas: everything the server wrote
#      in that time, autovacuum and the purge included), and per cycle the
#      live keys, table + index size, dead tuples, rows purged, checkpoints,
#      with the wal_compression the cycle ran with.
# With SCALE_OUTLIVE=N, then, on a fresh cluster of their own, the space of
# N keys that outlive their answers (response_ttl, since 1.6): N keys
# loaded as above (the extension's table only, answers all past their
# response_expires_at, keys that live on) and measured with pgstattuple,
# the purge that drops the answers (timed, with its WAL), the space after a
# VACUUM and after a VACUUM FULL (see measure_outlive below).
# Writes bench/results/scale-<UTC time>.md, keeps the raw records in
# bench/scale/runs/ (committed with the page) and, when every count ran for
# at least 30 minutes (and SCALE_OUTLIVE, when given, is at least 1M keys),
# writes doc/performance-at-scale.md with its charts
# from the newest kept run of each count (bench/scale_doc.py --kept), so a
# count run today joins those run before on the same page.
#
# Knobs (environment):
#   SCALE_KEYS      live key counts (default "1000000 10000000 50000000",
#                   none when SCALE_OUTLIVE is given); a count whose data
#                   would not fit in the free disk space (about 1.2 kB per
#                   key with the WAL) is skipped, and said so
#   SCALE_OUTLIVE   keys that outlive their answers to measure (e.g.
#                   10000000; default none): the page's "Keys that outlive
#                   their answers", from the newest kept run of each count
#   SCALE_MINUTES   steady-state minutes per count (default 30), or one
#                   figure per count of SCALE_KEYS ("30 60 30")
#   SCALE_SEGMENT   seconds per pgbench run (default 10; a cycle is 6 runs)
#   SCALE_CLIENTS   pgbench clients (default 8)
#   SCALE_WAL_COMPRESSION  wal_compression settings (default "off"), e.g.
#                   "off lz4 zstd": cycle k runs with the ((k-1) mod n)th,
#                   set by ALTER SYSTEM and a reload before its runs; the
#                   calibration and the load run with the first
#   SCALE_SETTINGS  extra postgresql.conf lines, e.g. "checkpoint_timeout =
#                   15min" (not wal_compression: SCALE_WAL_COMPRESSION)
#   SCALE_SHARED_BUFFERS  (default 1GB)
#   SCALE_KEEP=1    keep the work directory
#   SCALE_DOC=0|1   never / always write doc/performance-at-scale.md
#   SCALE_NOTE      a paragraph on the run for the report and the page
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/bench/lib.sh"

SCALE_COMMAND="make bench-scale"
for v in SCALE_OUTLIVE SCALE_WAL_COMPRESSION SCALE_SETTINGS SCALE_CLIENTS SCALE_SEGMENT SCALE_MINUTES SCALE_KEYS; do
  [ -n "${!v:-}" ] && SCALE_COMMAND="$v=$(printf '%q' "${!v}") $SCALE_COMMAND"
done
SCALE_OUTLIVE=${SCALE_OUTLIVE:-}
if [ -n "$SCALE_OUTLIVE" ]; then
  SCALE_KEYS=${SCALE_KEYS:-}
else
  SCALE_KEYS=${SCALE_KEYS:-1000000 10000000 50000000}
fi
SCALE_MINUTES=${SCALE_MINUTES:-30}
# minutes_for N: the steady-state minutes of count N
minutes_for() {
  local i=0 k
  for k in $SCALE_KEYS; do
    i=$((i + 1))
    [ "$k" = "$1" ] || continue
    set -- $SCALE_MINUTES
    [ $# -ge $i ] && eval echo "\${$i}" || echo "${@: -1}"
    return
  done
}
SCALE_SEGMENT=${SCALE_SEGMENT:-10}
SCALE_CLIENTS=${SCALE_CLIENTS:-8}
SCALE_SETTINGS=${SCALE_SETTINGS:-}
SCALE_WAL_COMPRESSION=${SCALE_WAL_COMPRESSION:-off}
read -ra WAL_COMPRESSION <<<"$SCALE_WAL_COMPRESSION"
NWC=${#WAL_COMPRESSION[@]}
if [ "$NWC" -eq 0 ] || [[ "$SCALE_SETTINGS" == *wal_compression* ]]; then
  echo "SCALE_WAL_COMPRESSION sets wal_compression (one or more settings); SCALE_SETTINGS must not" >&2
  exit 1
fi
SCALE_SHARED_BUFFERS=${SCALE_SHARED_BUFFERS:-1GB}
SCRIPTS=$IDEM_TOP/bench/scale
VARIANTS="execute phased insert_only raw_new replay replay_pk"

idem_ensure_packages $IDEM_PACKAGES gnuplot-nox || exit 1
idem_build || { echo "build failed" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/idempotency-scale.XXXXXX)
chmod 755 "$WORK"
BIN=$(idem_private_install "$WORK") || { echo "install failed" >&2; exit 1; }
CLUSTER=$WORK/cluster
cleanup() {
  idem_stop_cluster "$BIN" "$CLUSTER"
  if [ -n "${SCALE_KEEP:-}" ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

q() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -U postgres -d bench "$@"; }
qv() { q -At -c "$1"; }

# A fresh cluster for one count: PostgreSQL's defaults but for memory.
start_cluster() {
  idem_stop_cluster "$BIN" "$CLUSTER"
  rm -rf "$CLUSTER"
  idem_start_cluster "$BIN" "$CLUSTER" 5432 '' || return 1
  printf '%s\n' "fsync = on" "synchronous_commit = on" "full_page_writes = on" \
    "shared_buffers = $SCALE_SHARED_BUFFERS" "log_checkpoints = on" "log_autovacuum_min_duration = 0" \
    "$SCALE_SETTINGS" >>"$CLUSTER/data/postgresql.conf"
  runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w -s restart || return 1
  "$BIN/psql" -X -q -h "$CLUSTER" -U postgres -d postgres -c 'CREATE DATABASE bench' \
    -c 'CREATE EXTENSION pg_cron' || return 1
  q -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/bench/setup.sql" -f "$SCRIPTS/setup.sql" >/dev/null
}

# set_wal_compression VALUE: ALTER SYSTEM and a reload, then wait until a
# new session shows it (SHOW names "on" "pglz"); prints what SHOW says.
set_wal_compression() {
  local want=${1,,} got i
  case $want in on | true | yes | 1) want=pglz ;; false | no | 0) want=off ;; esac
  q -c "ALTER SYSTEM SET wal_compression = '$1'" -c 'SELECT pg_reload_conf()' >/dev/null || return 1
  for ((i = 0; i < 50; i++)); do
    got=$(qv 'SHOW wal_compression') || return 1
    [ "$got" = "$want" ] && { echo "$got"; return; }
    sleep 0.1
  done
  echo "wal_compression is $got after setting $1" >&2
  return 1
}

# run VARIANT LO TTL_EXT TTL_RAW: one pgbench run; prints
# "tps p50_ms p99_ms wal_bytes_per_tx fpi_per_tx".
run() {
  local v=$1 dir out tps tx w0 w1 ttl=$3
  [ "$v" = raw_new ] && ttl=$4
  dir=$(mktemp -d "$WORK/run.XXXXXX")
  w0=$(qv 'SELECT wal_bytes, wal_fpi FROM pg_stat_wal')
  if ! out=$(cd "$dir" && "$BIN/pgbench" -n -M prepared -h "$CLUSTER" -U postgres \
      -c "$SCALE_CLIENTS" -j "$SCALE_CLIENTS" -T "$SCALE_SEGMENT" -D lo="$2" -D rows="$N" \
      -D ttl="$ttl" -l --log-prefix=tx -f "$SCRIPTS/$v.sql" bench 2>&1); then
    printf '%s: %s\n' "$v" "$out" | tail -5 >>"$WORK/errors.log"
    echo "NA NA NA NA NA"
    rm -rf "$dir"
    return
  fi
  w1=$(qv 'SELECT wal_bytes, wal_fpi FROM pg_stat_wal')
  tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | tail -1)
  tx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
  echo "$tps $(cat "$dir"/tx.* | awk '{print $3}' | bench_percentiles)" \
    "$(awk -v a="${w0%|*}" -v b="${w1%|*}" -v f0="${w0#*|}" -v f1="${w1#*|}" -v n="$tx" \
        'BEGIN {if (n > 0) printf "%.0f %.3f", (b - a) / n, (f1 - f0) / n; else print "NA NA"}')"
  rm -rf "$dir"
}

# The state of the tables after a cycle: live keys, bytes (table + indexes
# + TOAST), dead tuples, rows deleted so far, for ours and the baseline's;
# checkpoints so far.
CHECKPOINTS="SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
[ "$PG_MAJOR" -ge 17 ] && CHECKPOINTS="SELECT num_timed + num_requested FROM pg_stat_checkpointer"
table_state() {
  qv "SELECT (SELECT count(*) FROM idempotency.idempotency_keys WHERE expires_at > now()),
             pg_total_relation_size('idempotency.idempotency_keys'),
             (SELECT n_dead_tup || ' ' || n_tup_del FROM pg_stat_user_tables
               WHERE relid = 'idempotency.idempotency_keys'::regclass),
             (SELECT count(*) FROM bench.seed_keys WHERE expires_at > now()),
             pg_total_relation_size('bench.seed_keys'),
             (SELECT n_dead_tup || ' ' || n_tup_del FROM pg_stat_user_tables
               WHERE relid = 'bench.seed_keys'::regclass),
             ($CHECKPOINTS)" | tr '|' ' '
}

# How long ALTER EXTENSION ... UPDATE from 1.1 (the table rewrite of 1.2)
# takes with SCALE_UPGRADE_KEYS live keys, in a database of its own.
UPGRADE=""
measure_upgrade() {
  local n=${SCALE_UPGRADE_KEYS:-1000000} t0 t1
  "$BIN/psql" -X -q -h "$CLUSTER" -U postgres -d postgres -c 'CREATE DATABASE upgrade' || return 1
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -U postgres -d upgrade \
    -c "CREATE EXTENSION idempotency VERSION '1.1'" \
    -c "INSERT INTO idempotency.idempotency_keys (idempotency_key, status, fence, response_code,
          response_body, expires_at)
        SELECT md5(i::text)::uuid::text, 'completed', nextval('idempotency.fence_seq'), 201,
               '{\"status\": \"paid\"}', now() + interval '1 day' FROM generate_series(1, $n) i" \
    -c 'VACUUM ANALYZE' -c CHECKPOINT || return 1
  t0=$(date +%s%N)
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -U postgres -d upgrade \
    -c 'ALTER EXTENSION idempotency UPDATE' || return 1
  t1=$(date +%s%N)
  UPGRADE="$n $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) / 1e9}')"
  idem_log "ALTER EXTENSION idempotency UPDATE from 1.1 with $n keys: ${UPGRADE#* } s"
  "$BIN/psql" -X -q -h "$CLUSTER" -U postgres -d postgres -c 'DROP DATABASE upgrade'
}

# load_keys "TABLE PKEY ..." FILLFACTOR PSQL_ARG...: keys 1 to N of
# bench/scale/load.sql, a million per statement, with the psql arguments
# given (-v name=value).  The primary keys (random order) of the tables
# are dropped for the load and built by sorting afterwards, at FILLFACTOR
# (empty: the default) and then reset to the default: 2N random inserts
# into indexes larger than memory take hours at 50M.
load_keys() {
  local ff=$2 p defs=() build lo hi i
  read -ra p <<<"$1"
  shift 2
  for ((i = 0; i < ${#p[@]}; i += 2)); do
    defs+=("$(qv "SELECT pg_get_constraintdef(oid) FROM pg_constraint
                  WHERE conrelid = '${p[i]}'::regclass AND conname = '${p[i + 1]}'")")
    q -c "ALTER TABLE ${p[i]} DROP CONSTRAINT ${p[i + 1]}" || return 1
  done
  for ((lo = 1; lo <= N; lo += 1000000)); do
    hi=$((lo + 999999 < N ? lo + 999999 : N))
    q -v lo="$lo" -v hi="$hi" -v rows="$N" "$@" -f "$SCRIPTS/load.sql" >/dev/null || return 1
    idem_log "$N keys: loaded $hi"
  done
  for ((i = 0; i < ${#p[@]}; i += 2)); do
    build=(-c "ALTER TABLE ${p[i]} ADD CONSTRAINT ${p[i + 1]} ${defs[i / 2]}")
    [ -n "$ff" ] && build=(-c "${build[1]} WITH (fillfactor = $ff)"
                           -c "ALTER INDEX ${p[i]%%.*}.${p[i + 1]} RESET (fillfactor)")
    q -c "SET maintenance_work_mem = '2GB'" "${build[@]}" || return 1
    idem_log "$N keys: built ${p[i + 1]}"
  done
}

# outlive_space PHASE: bench/scale/outlive_space.sql's figures, as
# "keys phase item value" lines in $OUTLIVE
outlive_space() {
  q -At -f "$SCRIPTS/outlive_space.sql" |
    awk -F'|' -v n="$N" -v phase="$1" '{print n "\t" phase "\t" $1 "\t" $2}' >>"$OUTLIVE"
}
# outlive_step PHASE PSQL_ARG...: runs the step; its seconds, WAL bytes,
# full-page images, and the autovacuums of the keys' table and the
# checkpoints that ended meanwhile
outlive_step() {
  local phase=$1 before after t0 t1
  shift
  local now="SELECT pg_current_wal_insert_lsn() || ' ' || wal_fpi || ' ' ||
                    (SELECT autovacuum_count FROM pg_stat_user_tables
                      WHERE relid = 'idempotency.idempotency_keys'::regclass) || ' ' ||
                    ($CHECKPOINTS) FROM pg_stat_wal"
  before=$(qv "$now") || return 1
  read -ra before <<<"$before"
  t0=$(date +%s%N)
  q "$@" >/dev/null || return 1
  t1=$(date +%s%N)
  after=$(qv "$now") || return 1
  read -ra after <<<"$after"
  printf "$N\t$phase\t%s\t%s\n" seconds "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) / 1e9}')" \
    wal_bytes "$(qv "SELECT pg_wal_lsn_diff('${after[0]}', '${before[0]}')::bigint")" \
    wal_fpi $((after[1] - before[1])) autovacuums $((after[2] - before[2])) \
    checkpoints $((after[3] - before[3])) >>"$OUTLIVE"
  idem_log "$N keys: $phase $(tail -5 "$OUTLIVE" | cut -f3,4 | tr '\t\n' '  ')"
}
# measure_outlive: keys that outlive their answers (SCALE_OUTLIVE), on a
# fresh cluster of their own.  N completed keys as bench/scale/load.sql
# writes them, which expire one to 31 days from now, and whose answers
# are all past their response_expires_at (the loader writes the column as
# complete(..., response_ttl) would have, spread over the hour that ended
# an hour ago; no UPDATE afterwards); VACUUM ANALYZE and the space; the
# purge of the answers, CALL idempotency.purge_expired() (batches of
# 10000, what the job of schedule_cleanup() runs) with autovacuum on;
# VACUUM and the space; VACUUM FULL and the space of the kept keys
# rewritten.  Each step is timed, with the WAL the server wrote meanwhile
# (wal_compression: the first setting of SCALE_WAL_COMPRESSION).
measure_outlive() {
  local left wc
  wc=$(set_wal_compression "${WAL_COMPRESSION[0]}") || return 1
  printf "$N\tserver\t%s\t%s\n" wal_compression "$wc" max_wal_size "$(qv 'SHOW max_wal_size')" >>"$OUTLIVE"
  q -c 'CREATE EXTENSION pgstattuple' >/dev/null || return 1
  load_keys "idempotency.idempotency_keys idempotency_keys_pkey" "" -v ours_only=1 \
    -v t0="$(qv "SELECT now() + interval '1 day'")" -v ttl=$((30 * 86400)) \
    -v answers_t0="$(qv "SELECT now() - interval '2 hours'")" || return 1
  q -c 'VACUUM ANALYZE idempotency.idempotency_keys' -c CHECKPOINT >/dev/null || return 1
  outlive_space loaded || return 1
  outlive_step purge -c 'CALL idempotency.purge_expired()' || return 1
  left=$(qv "SELECT count(*) FILTER (WHERE response_body IS NOT NULL OR response_expires_at > '-infinity')
                    || ' ' || count(*) FROM idempotency.idempotency_keys") || return 1
  if [ "$left" != "0 $N" ]; then
    echo "after the purge, answers left and keys: $left (of $N keys)" >&2
    return 1
  fi
  outlive_step vacuum -c 'VACUUM idempotency.idempotency_keys' || return 1
  outlive_space purged || return 1
  outlive_step vacuum_full -c 'VACUUM FULL idempotency.idempotency_keys' || return 1
  outlive_space compact
}

RESULTS=$WORK/runs.tsv
STATES=$WORK/states.tsv
OUTLIVE=$WORK/outlive.tsv
printf 'keys\tcycle\tt\tvariant\ttps\tp50_ms\tp99_ms\twal_bytes\tfpi\twal_compression\n' >"$RESULTS"
printf 'keys\tphase\titem\tvalue\n' >"$OUTLIVE"
printf 'keys\tcycle\tt\text_live\text_bytes\text_dead\text_deleted\traw_live\traw_bytes\traw_dead\traw_deleted\tcheckpoints\twal_compression\n' >"$STATES"
SKIPPED=""
# room_for WHAT: whether N keys fit in the free disk space (said, and
# added to SKIPPED, when not)
room_for() {
  local need=$((N * 1200 / 1024 / 1024 / 1024 + 4)) free
  free=$(df -P -BG "$WORK" | awk 'NR == 2 {print $4 + 0}')
  if [ "$free" -lt "$need" ]; then
    idem_log "$N keys$1: skipped, they need about $need GB and $free GB are free"
    SKIPPED+="$N keys$1: skipped, about $need GB needed and $free GB free. "
    return 1
  fi
  idem_log "$N keys$1: fresh cluster ($free GB free, about $need GB needed)"
}
for N in $SCALE_KEYS; do
  room_for "" || continue
  start_cluster || { cat "$CLUSTER/server.log"; exit 1; }
  # every setting once (so that one this server lacks fails now), the first last
  for x in "${WAL_COMPRESSION[@]:1}" "${WAL_COMPRESSION[0]}"; do
    wal_compression=$(set_wal_compression "$x") || exit 1
  done
  [ -n "$UPGRADE" ] || measure_upgrade || exit 1

  # calibration: new keys per second of a cycle, on the empty tables; the
  # rate at N keys is lower, so the ttl is set for 70% of it
  ext_rate=0 raw_rate=0
  for v in execute phased raw_new; do
    r=$(run "$v" 1 3600 3600)
    case $v in
      raw_new) raw_rate=$(awk -v a="${r%% *}" 'BEGIN {print a / 6}') ;;
      *) ext_rate=$(awk -v a="$ext_rate" -v b="${r%% *}" 'BEGIN {print a + b / 6}') ;;
    esac
  done
  ttl_ext=$(awk -v n="$N" -v r="$ext_rate" 'BEGIN {printf "%d", n / (0.7 * r)}')
  ttl_raw=$(awk -v n="$N" -v r="$raw_rate" 'BEGIN {printf "%d", n / (0.7 * r)}')
  q -c 'TRUNCATE bench.payments, bench.seed_keys, idempotency.idempotency_keys' >/dev/null
  idem_log "$N keys: new keys per second about $ext_rate (ours), $raw_rate (baseline); ttl $ttl_ext s, $ttl_raw s"

  # The primary keys are built at fillfactor 70, about the fill random
  # inserts leave (ln 2), then reset: the steady state starts from the
  # shape a long-running service's index has, not a packed one.
  pkeys="idempotency.idempotency_keys idempotency_keys_pkey bench.seed_keys seed_keys_pkey"
  t0=$(qv "SELECT now() + interval '2 minutes'")
  load_keys "$pkeys" 70 -v t0="$t0" -v ttl="$ttl_ext" -v ttl_raw="$ttl_raw" -v answers_t0= || exit 1
  q -c "INSERT INTO bench.payments (order_no, amount) SELECT 'P' || i, 100 FROM generate_series(1, $N) i" \
    -c 'VACUUM ANALYZE' -c 'CHECKPOINT' >/dev/null || exit 1
  q -c "SELECT idempotency.schedule_cleanup('* * * * *')" >/dev/null || exit 1
  "$BIN/psql" -X -q -h "$CLUSTER" -U postgres -d postgres \
    -c "SELECT cron.schedule_in_database('raw-purge', '* * * * *', 'CALL bench.raw_purge()', 'bench')" >/dev/null || exit 1

  start=$(date +%s)
  t0s=$(qv "SELECT extract(epoch FROM '$t0'::timestamptz)::bigint")
  cycle=0
  printf '%s\t0\t0\t%s\t%s\n' "$N" "$(table_state | tr ' ' '\t')" "$wal_compression" >>"$STATES"
  minutes=$(minutes_for "$N")
  while [ $(($(date +%s) - start)) -lt $((minutes * 60)) ]; do
    cycle=$((cycle + 1))
    wal_compression=$(set_wal_compression "${WAL_COMPRESSION[$(((cycle - 1) % NWC))]}") || exit 1
    round=$(((cycle - 1) / NWC + 1))
    order=$(echo $VARIANTS | awk -v k="$round" '{for (i = 0; i < NF; i++) printf "%s ", $((i + k) % NF + 1)}')
    for v in $order; do
      # keys numbered below lo expire before this run ends
      now=$(date +%s)
      ttl=$ttl_ext
      [ "$v" = replay_pk ] && ttl=$ttl_raw
      lo=$(awk -v n="$N" -v t="$((now + SCALE_SEGMENT + 5 - t0s))" -v w="$ttl" \
        'BEGIN {l = int(n * t / w) + 1; print (l < 1 ? 1 : l)}')
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$N" "$cycle" "$((now - start))" "$v" \
        "$(run "$v" "$lo" "$ttl_ext" "$ttl_raw" | tr ' ' '\t')" "$wal_compression" >>"$RESULTS"
    done
    printf '%s\t%s\t%s\t%s\t%s\n' "$N" "$cycle" "$(($(date +%s) - start))" "$(table_state | tr ' ' '\t')" \
      "$wal_compression" >>"$STATES"
    idem_log "$N keys: cycle $cycle (wal_compression $wal_compression) at $(($(date +%s) - start)) s: $(tail -1 "$STATES" | cut -f4-12)"
  done
  cp "$CLUSTER/server.log" "$WORK/server-$N.log"
done
N=$SCALE_OUTLIVE
if [ -n "$N" ] && room_for " that outlive their answers"; then
  start_cluster || { cat "$CLUSTER/server.log"; exit 1; }
  measure_outlive || exit 1
  cp "$CLUSTER/server.log" "$WORK/server-outlive-$N.log"
fi

stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$IDEM_TOP/bench/results"
REPORT=$IDEM_TOP/bench/results/scale-$stamp.md
SCALE_COMMAND=$SCALE_COMMAND SCALE_SKIPPED=$SKIPPED SCALE_UPGRADE=$UPGRADE \
  /usr/bin/python3 "$IDEM_TOP/bench/scale_doc.py" --outlive "$OUTLIVE" "$RESULTS" "$STATES" "$REPORT" || exit 1
cp "$RESULTS" "${REPORT%.md}-runs.tsv"
cp "$STATES" "${REPORT%.md}-states.tsv"
cp "$OUTLIVE" "${REPORT%.md}-outlive.tsv"
echo "report: $REPORT"
# The raw records stay in the tree (bench/scale/runs, a few kB per run), so
# that the page can be written again, and hold counts run at other times.
KEPT=$IDEM_TOP/bench/scale/runs
kept=0
mkdir -p "$KEPT"
if [ "$(tail -n +2 "$RESULTS" | wc -l)" -gt 0 ]; then
  cp "$RESULTS" "$KEPT/$stamp-runs.tsv"
  cp "$STATES" "$KEPT/$stamp-states.tsv"
  kept=1
fi
if [ "$(tail -n +2 "$OUTLIVE" | wc -l)" -gt 0 ]; then
  cp "$OUTLIVE" "$KEPT/$stamp-outlive.tsv"
  kept=1
fi
if [ "$kept" = 1 ]; then
  SCALE_COMMAND=$SCALE_COMMAND SCALE_SKIPPED=$SKIPPED SCALE_UPGRADE=$UPGRADE \
    SCALE_COMMIT=$(idem_commit) SCALE_SERVER=$(idem_server_version "$BIN") \
    /usr/bin/python3 "$IDEM_TOP/bench/scale_doc.py" --about "$KEPT/$stamp.json" || exit 1
fi
write_doc=${SCALE_DOC:-}
if [ -z "$write_doc" ]; then
  write_doc=0
  [ -z "$SKIPPED" ] && write_doc=1
  for m in $SCALE_MINUTES; do [ "$m" -ge 30 ] || write_doc=0; done
  [ "${SCALE_OUTLIVE:-1000000}" -ge 1000000 ] || write_doc=0
fi
if [ "$write_doc" = 1 ]; then
  /usr/bin/python3 "$IDEM_TOP/bench/scale_doc.py" --kept "$KEPT" \
    "$IDEM_TOP/doc/performance-at-scale.md" "$IDEM_TOP/doc" || exit 1
  echo "wrote doc/performance-at-scale.md from bench/scale/runs (the newest run of each count)"
fi
