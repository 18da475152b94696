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
# Writes bench/results/scale-<UTC time>.md, keeps the raw records in
# bench/scale/runs/ (committed with the page) and, when every count ran for
# at least 30 minutes, writes doc/performance-at-scale.md with its charts
# from the newest kept run of each count (bench/scale_doc.py --kept), so a
# count run today joins those run before on the same page.
#
# Knobs (environment):
#   SCALE_KEYS      live key counts (default "1000000 10000000 50000000");
#                   a count whose data would not fit in the free disk space
#                   (about 1.2 kB per key with the WAL) is skipped, and said so
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
for v in SCALE_WAL_COMPRESSION SCALE_SETTINGS SCALE_CLIENTS SCALE_SEGMENT SCALE_MINUTES SCALE_KEYS; do
  [ -n "${!v:-}" ] && SCALE_COMMAND="$v=$(printf '%q' "${!v}") $SCALE_COMMAND"
done
SCALE_KEYS=${SCALE_KEYS:-1000000 10000000 50000000}
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

RESULTS=$WORK/runs.tsv
STATES=$WORK/states.tsv
printf 'keys\tcycle\tt\tvariant\ttps\tp50_ms\tp99_ms\twal_bytes\tfpi\twal_compression\n' >"$RESULTS"
printf 'keys\tcycle\tt\text_live\text_bytes\text_dead\text_deleted\traw_live\traw_bytes\traw_dead\traw_deleted\tcheckpoints\twal_compression\n' >"$STATES"
SKIPPED=""
for N in $SCALE_KEYS; do
  need=$((N * 1200 / 1024 / 1024 / 1024 + 4))
  free=$(df -P -BG "$WORK" | awk 'NR == 2 {print $4 + 0}')
  if [ "$free" -lt "$need" ]; then
    idem_log "$N keys: skipped, they need about $need GB and $free GB are free"
    SKIPPED+="$N keys: skipped, about $need GB needed and $free GB free. "
    continue
  fi
  idem_log "$N keys: fresh cluster ($free GB free, about $need GB needed)"
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

  # The primary keys (random order) are dropped for the load and built by
  # sorting afterwards: 2N random inserts into indexes larger than memory
  # take hours at 50M.  They are built at fillfactor 70, about the fill
  # random inserts leave (ln 2), then reset: the steady state starts from
  # the shape a long-running service's index has, not a packed one.
  pkeys="idempotency.idempotency_keys idempotency_keys_pkey bench.seed_keys seed_keys_pkey"
  pkey_defs=()
  set -- $pkeys
  while [ $# -gt 0 ]; do
    pkey_defs+=("$(qv "SELECT pg_get_constraintdef(oid) FROM pg_constraint
                       WHERE conrelid = '$1'::regclass AND conname = '$2'")")
    q -c "ALTER TABLE $1 DROP CONSTRAINT $2" || exit 1
    shift 2
  done
  t0=$(qv "SELECT now() + interval '2 minutes'")
  step=1000000
  for ((lo = 1; lo <= N; lo += step)); do
    hi=$((lo + step - 1 < N ? lo + step - 1 : N))
    q -v lo="$lo" -v hi="$hi" -v rows="$N" -v t0="$t0" -v ttl="$ttl_ext" -v ttl_raw="$ttl_raw" \
      -f "$SCRIPTS/load.sql" >/dev/null || exit 1
    idem_log "$N keys: loaded $hi"
  done
  set -- $pkeys
  i=0
  while [ $# -gt 0 ]; do
    q -c "SET maintenance_work_mem = '2GB'" \
      -c "ALTER TABLE $1 ADD CONSTRAINT $2 ${pkey_defs[$i]} WITH (fillfactor = 70)" \
      -c "ALTER INDEX ${1%%.*}.$2 RESET (fillfactor)" || exit 1
    idem_log "$N keys: built $2"
    i=$((i + 1))
    shift 2
  done
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

stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$IDEM_TOP/bench/results"
REPORT=$IDEM_TOP/bench/results/scale-$stamp.md
SCALE_COMMAND=$SCALE_COMMAND SCALE_SKIPPED=$SKIPPED SCALE_UPGRADE=$UPGRADE \
  /usr/bin/python3 "$IDEM_TOP/bench/scale_doc.py" "$RESULTS" "$STATES" "$REPORT" || exit 1
cp "$RESULTS" "${REPORT%.md}-runs.tsv"
cp "$STATES" "${REPORT%.md}-states.tsv"
echo "report: $REPORT"
# The raw records stay in the tree (bench/scale/runs, a few kB per run), so
# that the page can be written again, and hold counts run at other times.
KEPT=$IDEM_TOP/bench/scale/runs
if [ "$(tail -n +2 "$RESULTS" | wc -l)" -gt 0 ]; then
  mkdir -p "$KEPT"
  cp "$RESULTS" "$KEPT/$stamp-runs.tsv"
  cp "$STATES" "$KEPT/$stamp-states.tsv"
  SCALE_COMMAND=$SCALE_COMMAND SCALE_SKIPPED=$SKIPPED SCALE_UPGRADE=$UPGRADE \
    SCALE_COMMIT=$(idem_commit) SCALE_SERVER=$(idem_server_version "$BIN") \
    /usr/bin/python3 "$IDEM_TOP/bench/scale_doc.py" --about "$KEPT/$stamp.json" || exit 1
fi
write_doc=${SCALE_DOC:-}
if [ -z "$write_doc" ]; then
  write_doc=0
  [ -z "$SKIPPED" ] && write_doc=1
  for m in $SCALE_MINUTES; do [ "$m" -ge 30 ] || write_doc=0; done
fi
if [ "$write_doc" = 1 ]; then
  /usr/bin/python3 "$IDEM_TOP/bench/scale_doc.py" --kept "$KEPT" \
    "$IDEM_TOP/doc/performance-at-scale.md" "$IDEM_TOP/doc" || exit 1
  echo "wrote doc/performance-at-scale.md from bench/scale/runs (the newest run of each count)"
fi
