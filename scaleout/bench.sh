#!/usr/bin/env bash
# scaleout/bench.sh: throughput of claim + complete through the PL/Proxy
# proxy with 1, 2 and 4 partitions, as ratios to a direct connection to one
# partition, on this machine.  Run as root from a clone:
#
#   scaleout/bench.sh                       # 8 clients, 15 s per setup
#   BENCH_CLIENTS=16 BENCH_SECONDS=30 scaleout/bench.sh
#
# Every transaction claims a new key and completes it (two calls, two
# commits).  All clusters share this machine, so the table also shows where
# the CPU went: the client (pgbench), the proxy's backends and the
# partitions' backends, in per cent of all cores, sampled for 2 s mid-run,
# how busy the whole machine was (other work included), and the CPU time
# that client, proxy and partitions together spent per transaction.
# Clusters run in $SCALEOUT_DIR (default /tmp/idempotency-scaleout-bench)
# and are stopped at the end; PG_BINDIR as for start.sh.
set -euo pipefail
export SCALEOUT_DIR=${SCALEOUT_DIR:-/tmp/idempotency-scaleout-bench}
. "$(dirname "$0")/lib.sh"
clients=${BENCH_CLIENTS:-8}
seconds=${BENCH_SECONDS:-15}

[ "$(id -u)" -eq 0 ] || so_die "run as root (the clusters run as the postgres OS user)"
inst=""
if [ -z "${PG_BINDIR:-}" ]; then
  inst=$SCALEOUT_DIR-server
  PG_BINDIR=$(so_install "$inst")
  export PG_BINDIR
fi
trap '"$SCALEOUT_HOME/stop.sh" >/dev/null 2>&1 || true; [ -z "$inst" ] || rm -rf "$inst"' EXIT

script=$(mktemp /tmp/scaleout-bench.XXXXXX.sql)
chmod 644 "$script"
cat >"$script" <<'SQL'
\set k random(1, 1000000000000)
SELECT fence AS f FROM idempotency.claim('bench-' || :client_id || '-' || :k, '{"amount": 100}') \gset
SELECT idempotency.complete('bench-' || :client_id || '-' || :k, :f, '{"ok": true}');
SQL

# snap PID...: "pid ticks" per live PID (user + system CPU clock ticks).
snap() {
  local p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && echo "$p $(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')"
  done
  return 0
}
# used BEFORE AFTER: ticks used between two snaps, by the PIDs in both.
used() { awk 'NR == FNR {t[$1] = $2; next} ($1 in t) {s += $2 - t[$1]} END {print s + 0}' <(echo "$1") <(echo "$2"); }
# busy: "busy total" clock ticks of the whole machine, from /proc/stat.
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
# backends NODE: the PIDs of a node's postmaster children.
backends() { ps -o pid= --ppid "$(head -1 "$SCALEOUT_DIR/$1/data/postmaster.pid")" | tr -d ' '; }

# run NAME NODE PARTITIONS: pgbench against NODE, one result line.
run() {
  local name=$1 node=$2 n=$3 out pgb i a b c m tps lat cores hz=$(getconf CLK_TCK) part=()
  so_psql "$node" -c 'SELECT 1' >/dev/null
  out=$(mktemp)
  runuser -u postgres -- "$(so_bin)/pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" \
    -h 127.0.0.1 -p "$(so_port "$node")" -U postgres -f "$script" "$SCALEOUT_DB" >"$out" 2>&1 &
  pgb=$!
  sleep $((seconds / 2))
  for ((i = 0; i < n; i++)); do part+=($(backends "p$i")); done
  local client=($(ps -o pid= --ppid "$pgb"; echo "$pgb")) proxy=()
  [ "$node" = proxy ] && proxy=($(backends proxy))
  a=$(snap "${client[@]}"); b=$(snap "${proxy[@]}"); c=$(snap "${part[@]}"); m=$(busy)
  sleep 2
  a=$(used "$a" "$(snap "${client[@]}")"); b=$(used "$b" "$(snap "${proxy[@]}")")
  c=$(used "$c" "$(snap "${part[@]}")"); m="$m $(busy)"
  wait "$pgb" || { cat "$out"; so_die "pgbench failed"; }
  tps=$(awk '/^tps/ {print int($3)}' "$out")
  lat=$(awk '/^latency average/ {print $4}' "$out")
  cores=$(nproc)
  printf '%s|%s|%s|%s|%s|%s|%s|%s\n' "$name" "$tps" "$lat" \
    $((100 * a / (2 * hz * cores))) $((100 * b / (2 * hz * cores))) $((100 * c / (2 * hz * cores))) \
    "$(echo "$m" | awk '{printf "%d", 100 * ($3 - $1) / ($4 - $2)}')" \
    "$(awk -v t=$((a + b + c)) -v hz="$hz" -v tps="$tps" 'BEGIN {printf "%.2f", 1000 * t / hz / (2 * tps)}')"
  rm -f "$out"
}

results=()
for n in 1 2 4; do
  "$SCALEOUT_HOME/stop.sh" >/dev/null 2>&1 || true
  "$SCALEOUT_HOME/start.sh" "$n" >/dev/null 2>&1 || so_die "start.sh $n failed"
  [ "$n" -eq 1 ] && results+=("$(run direct p0 1)")
  results+=("$(run "proxy, $n partition(s)" proxy "$n")")
done

direct=$(echo "${results[0]}" | cut -d'|' -f2)
echo "claim + complete, $clients clients, $seconds s each, $(nproc) cores ($(date -u +%F))"
printf '| %-24s | %7s | %7s | %8s | %6s | %6s | %10s | %7s | %11s |\n' setup tps ratio 'lat ms' client proxy partitions machine 'CPU ms/txn'
printf '| %-24s | %7s | %7s | %8s | %6s | %6s | %10s | %7s | %11s |\n' --- ---: ---: ---: ---: ---: ---: ---: ---:
for r in "${results[@]}"; do
  IFS='|' read -r name tps lat a b c m cpu <<<"$r"
  printf '| %-24s | %7s | %7s | %8s | %5s%% | %5s%% | %9s%% | %6s%% | %11s |\n' "$name" "$tps" \
    "$(awk -v t="$tps" -v d="$direct" 'BEGIN {printf "%.2f", t / d}')" "$lat" "$a" "$b" "$c" "$m" "$cpu"
done
rm -f "$script"
