# scaleout/ha/lib.sh: shared steps of scaleout/ha/start.sh, stop.sh and
# test/integration/patroni_failover.sh.  Sourced, not run; needs root (the
# servers, Patroni and etcd run as the postgres OS user).
#
# Layout of $HA_DIR (default /tmp/idempotency-ha):
#   bin            the bin directory of the server used (extension + pg_cron)
#   password       the password of the postgres and replicator roles
#   nodes          the node names, one a line (node1 node2 ...)
#   connstr        libpq multi-host connection string of the application
#   etcd/          data/, etcd.log, pid, port, peer_port
#   nodeN/         patroni.yml, data/, log/ (server log), patroni.log,
#                  pid (Patroni's), port (PostgreSQL), api_port (REST API);
#                  the node's unix socket is nodeN/ itself
#   inst/          the private server copy, when PG_BINDIR was not given
# Everything listens on 127.0.0.1 (free ports from $HA_PORT on) or on unix
# sockets.  Every process is started with its PID written to a file and
# stopped by that PID.
HA_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IDEM_TOP=${IDEM_TOP:-$(cd "$HA_HOME/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
HA_DIR=${HA_DIR:-/tmp/idempotency-ha}
HA_PORT=${HA_PORT:-6800}
HA_DB=${HA_DB:-idempotency}
HA_SCOPE=${HA_SCOPE:-idempotency-ha}
# What the HA set-up needs beyond IDEM_PACKAGES.
HA_PACKAGES="patroni etcd-server etcd-client python3-psycopg2"
PYTHON=/usr/bin/python3	# Debian's, which has psycopg2 (Patroni's own too)

ha_die() { echo "ha: $*" >&2; exit 1; }

ha_bin() { cat "$HA_DIR/bin"; }
ha_nodes() { cat "$HA_DIR/nodes"; }
ha_port() { cat "$HA_DIR/$1/port"; }
ha_api_port() { cat "$HA_DIR/$1/api_port"; }
ha_yml() { echo "$HA_DIR/$1/patroni.yml"; }

# ha_take_port: sets REPLY to the first port from HA_PORT on that nobody
# uses, and moves HA_PORT past it (call it in this shell, not in $(...)).
ha_take_port() {
  local p=$HA_PORT
  while ss -Htan "( sport = :$p )" | grep -q .; do p=$((p + 1)); done
  HA_PORT=$((p + 1))
  REPLY=$p
}

# ha_alive PID WORD: PID runs and its command line contains WORD (so that a
# recycled PID is never signalled).
ha_alive() {
  [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q -- "$2"
}

# ha_wait_gone PID SECONDS: wait until PID has exited; false on timeout.
ha_wait_gone() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -d "/proc/$1" ] || return 0
    # a zombie is gone for our purposes
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.1
  done
  return 1
}

# ha_postmaster_pid NODE: the PID in the node's postmaster.pid, if any.
ha_postmaster_pid() {
  local f=$HA_DIR/$1/data/postmaster.pid
  [ -r "$f" ] && head -1 "$f"
  return 0
}

# ha_psql NODE [psql args]: psql as postgres over the node's unix socket.
ha_psql() {
  local node=$1
  shift
  runuser -u postgres -- "$(ha_bin)/psql" -X -q -v ON_ERROR_STOP=1 \
    -h "$HA_DIR/$node" -p "$(ha_port "$node")" -U postgres "$@"
}

# ha_patronictl ARGS: patronictl against this cluster (any node's config
# works: it only reads the DCS section).
ha_patronictl() {
  patronictl -c "$(ha_yml "$(head -1 "$HA_DIR/nodes")")" "$@"
}

# ha_rest NODE PATH: GET from a node's Patroni REST API (body on stdout,
# false unless HTTP 200).
ha_rest() {
  "$PYTHON" - "http://127.0.0.1:$(ha_api_port "$1")$2" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        sys.stdout.write(r.read().decode())
except Exception:
    sys.exit(1)
PY
}

# ha_leader: the name of the node whose REST API says it is the primary.
ha_leader() {
  local n
  for n in $(ha_nodes); do
    ha_rest "$n" /primary >/dev/null 2>&1 && { echo "$n"; return 0; }
  done
  return 1
}

# ha_start_etcd: one etcd member on 127.0.0.1, as postgres, PID in etcd/pid.
ha_start_etcd() {
  local d=$HA_DIR/etcd port peer i
  mkdir -p "$d"
  chown postgres: "$d"
  ha_take_port; port=$REPLY
  ha_take_port; peer=$REPLY
  echo "$port" >"$d/port"
  echo "$peer" >"$d/peer_port"
  runuser -u postgres -- setsid sh -c 'echo $$ >"$1/pid"; shift; exec "$@"' sh "$d" \
    etcd --name etcd0 --data-dir "$d/data" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "etcd0=http://127.0.0.1:$peer" --initial-cluster-state new \
    --initial-cluster-token "$HA_SCOPE" </dev/null >"$d/etcd.log" 2>&1 &
  for i in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  cat "$d/etcd.log" >&2
  ha_die "etcd did not start"
}

# ha_write_config NODE: the node's patroni.yml, with fresh ports.
#
# Settings, and why:
# - ttl 10, loop_wait 1, retry_timeout 4: a dead leader's key expires at
#   most 10 s after its last renewal (Patroni's default is 30); Patroni's
#   rule loop_wait + 2 * retry_timeout <= ttl holds (1 + 8 <= 10).  Lower
#   values make a loaded machine fail over for nothing.
# - synchronous_mode: a commit returns only once a synchronous standby has
#   flushed it, and Patroni promotes only the standby named synchronous in
#   the DCS, so no acknowledged commit is lost by a failover.
# - synchronous_mode_strict: true: with no synchronous standby left, the
#   primary blocks commits instead of going on alone; every acknowledged
#   commit is on two nodes at all times, so even losing the primary's disk
#   right after the standby loses nothing.  With three nodes one may be
#   down without blocking writes (the other replica becomes synchronous).
#   With two nodes, strict mode blocks writes until a failed node is back;
#   set HA_STRICT=false there if availability matters more (then, while the
#   primary runs alone, its commits exist only on its disk; Patroni still
#   never promotes a standby that was not synchronous).
# - use_pg_rewind, wal_log_hints and data checksums: a killed leader has
#   WAL the new leader never got; pg_rewind (which needs hint-bit WAL, from
#   either setting) lets it rejoin as a replica without a new base backup.
# - wal_retrieve_retry_interval 500ms (default 5 s): after a failover a
#   replica's first attempt to stream from the new leader can fail (its
#   replication slot is created a moment later); in strict mode commits
#   wait for that replica, so its retry delay is write downtime.
# - pg_cron preloaded on every node, jobs in database postgres; its
#   scheduler runs only on the primary.  cron.use_background_workers: a job
#   runs in a background worker of the node whose scheduler started it.
#   Without it pg_cron connects with libpq to the host and port stored in
#   cron.job when the job was scheduled (cron.host and the port of the node
#   that led then): here every node has its own port, so after a failover
#   the job would connect to the old leader, down or now a replica.
#   (cron.host, the node's socket directory, is what that connection
#   would use.)
ha_write_config() {
  local node=$1 d=$HA_DIR/$1 port api
  mkdir -p "$d/log"
  ha_take_port; port=$REPLY
  ha_take_port; api=$REPLY
  echo "$port" >"$d/port"
  echo "$api" >"$d/api_port"
  cat >"$d/patroni.yml" <<YML
scope: $HA_SCOPE
namespace: /idempotency/
name: $node
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$api
  connect_address: 127.0.0.1:$api
etcd3:
  hosts: 127.0.0.1:$(cat "$HA_DIR/etcd/port")
bootstrap:
  dcs:
    ttl: ${HA_TTL:-10}
    loop_wait: ${HA_LOOP_WAIT:-1}
    retry_timeout: ${HA_RETRY_TIMEOUT:-4}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: ${HA_STRICT:-true}
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        wal_log_hints: 'on'
        hot_standby: 'on'
        synchronous_commit: 'on'
        max_connections: 100
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        wal_retrieve_retry_interval: 500ms
        shared_preload_libraries: pg_cron
        cron.database_name: postgres
        cron.use_background_workers: 'on'
        max_worker_processes: 16
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
  - data-checksums
postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $d/data
  bin_dir: $(ha_bin)
  pgpass: $d/pgpass
  authentication:
    superuser:
      username: postgres
      password: '$(cat "$HA_DIR/password")'
    replication:
      username: replicator
      password: '$(cat "$HA_DIR/password")'
  parameters:
    unix_socket_directories: '$d'
    cron.host: '$d'
    logging_collector: 'on'
    log_directory: '$d/log'
    log_filename: postgresql.log
    log_line_prefix: '%m [%p] %d '
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 scram-sha-256
  - host replication replicator 127.0.0.1/32 scram-sha-256
YML
  chown -R postgres: "$d"
  chmod 700 "$d/log"
}

# ha_start_patroni NODE: start the node's Patroni as postgres, detached,
# its PID in NODE/pid.  Patroni starts (and restarts) the node's postmaster.
ha_start_patroni() {
  local d=$HA_DIR/$1 i
  rm -f "$d/pid"
  runuser -u postgres -- setsid sh -c 'echo $$ >"$1/pid"; exec patroni "$1/patroni.yml"' sh "$d" \
    </dev/null >>"$d/patroni.log" 2>&1 &
  for i in $(seq 50); do
    [ -s "$d/pid" ] && return 0
    sleep 0.1
  done
  ha_die "Patroni of $1 did not start"
}

# ha_cluster: GET /cluster from the first node whose REST API answers.
ha_cluster() {
  local node
  for node in $(ha_nodes); do
    ha_rest "$node" /cluster 2>/dev/null && return 0
  done
  return 1
}

# ha_wait_state SECONDS: wait until one node leads, every other node is a
# running replica and one of them is synchronous (per GET /cluster).
ha_wait_state() {
  local i n
  n=$(ha_nodes | wc -l)
  for ((i = 0; i < $1 * 2; i++)); do
    ha_cluster | "$PYTHON" -c '
import json, sys
m = json.load(sys.stdin)["members"]
ok = (len(m) == int(sys.argv[1])
      and sum(x["role"] == "leader" and x["state"] == "running" for x in m) == 1
      and any(x["role"] == "sync_standby" for x in m)
      and all(x["state"] in ("running", "streaming") for x in m))
sys.exit(0 if ok else 1)' "$n" 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}

# ha_kill_node NODE: SIGKILL the node's Patroni and postmaster (a crash).
ha_kill_node() {
  local pat pm
  pat=$(cat "$HA_DIR/$1/pid" 2>/dev/null)
  pm=$(ha_postmaster_pid "$1")
  ha_alive "$pat" patroni && kill -KILL "$pat"
  ha_alive "$pm" postgres && kill -KILL "$pm"
  return 0
}

# ha_stop_node NODE: stop the node's Patroni by its PID (it shuts its
# postmaster down fast), then whatever postmaster is left over, by the PID
# in postmaster.pid (a killed Patroni leaves its postmaster running).
ha_stop_node() {
  local node=$1 pat pm
  pat=$(cat "$HA_DIR/$node/pid" 2>/dev/null)
  ha_stop_pid "$pat" patroni TERM 60 "Patroni of $node"
  pm=$(ha_postmaster_pid "$node")
  ha_stop_pid "$pm" postgres INT 60 "the postmaster of $node"
  return 0
}

# ha_stop_pid PID NAME SIGNAL SECONDS WHAT: when PID is alive and runs NAME,
# send SIGNAL and wait SECONDS for it to exit, then SIGKILL it.
ha_stop_pid() {
  local pid=$1 name=$2 sig=$3 secs=$4 what=$5
  ha_alive "$pid" "$name" || return 0
  idem_log "stopping $what (pid $pid)"
  kill -"$sig" "$pid"
  ha_wait_gone "$pid" "$secs" || { kill -KILL "$pid" 2>/dev/null; ha_wait_gone "$pid" 5; }
}

# ha_stop_etcd: stop etcd by its PID.
ha_stop_etcd() {
  local pid
  pid=$(cat "$HA_DIR/etcd/pid" 2>/dev/null)
  ha_stop_pid "$pid" etcd TERM 30 etcd
  return 0
}

# ha_connstr [DB]: the application's connection string: every node, the
# primary chosen by libpq (target_session_attrs=read-write).
ha_connstr() {
  local hosts="" ports="" n
  for n in $(ha_nodes); do
    hosts+="${hosts:+,}127.0.0.1"
    ports+="${ports:+,}$(ha_port "$n")"
  done
  echo "host=$hosts port=$ports dbname=${1:-$HA_DB} user=postgres password=$(cat "$HA_DIR/password") target_session_attrs=read-write connect_timeout=3"
}
