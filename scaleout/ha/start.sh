#!/usr/bin/env bash
# scaleout/ha/start.sh [N]: a Patroni cluster of N PostgreSQL 15 nodes
# (default 3; 2 or 3) and one etcd member, all on 127.0.0.1 with free ports,
# synchronous replication (synchronous_mode, strict: see lib.sh), the
# idempotency extension in database "idempotency" and pg_cron preloaded on
# every node with the cleanup job scheduled.  Run as root, from a clone:
#
#   scaleout/ha/start.sh
#   psql "$(cat /tmp/idempotency-ha/connstr)"        # always the primary
#   patronictl -c /tmp/idempotency-ha/node1/patroni.yml list
#   curl -s http://127.0.0.1:$(cat /tmp/idempotency-ha/node1/api_port)/cluster
#   scaleout/ha/stop.sh
#
# HA_DIR: where everything lives (default /tmp/idempotency-ha).
# HA_PORT: the first TCP port to try on 127.0.0.1 (default 6800).
# HA_TTL, HA_LOOP_WAIT, HA_RETRY_TIMEOUT, HA_STRICT: Patroni's ttl (10),
#   loop_wait (1), retry_timeout (4), synchronous_mode_strict (true).
# HA_CLEANUP_SCHEDULE: the pg_cron schedule of idempotency.schedule_cleanup
#   (default '*/5 * * * *').
# PG_BINDIR: a server bin directory that already has the extension and
#   pg_cron; without it, packages are installed as needed and the extension
#   goes into a private copy of the server in $HA_DIR/inst (Patroni's
#   postgresql.bin_dir points at it; the system installation is left alone).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

n=${1:-3}
case $n in 2 | 3) ;; *) ha_die "the number of nodes must be 2 or 3, not '$n'" ;; esac
[ "$(id -u)" -eq 0 ] || ha_die "run as root (the servers run as the postgres OS user)"
if ha_alive "$(cat "$HA_DIR/etcd/pid" 2>/dev/null)" etcd; then
  ha_die "a cluster is running in $HA_DIR; scaleout/ha/stop.sh first"
fi
rm -rf "$HA_DIR"
mkdir -p "$HA_DIR"
chmod 755 "$HA_DIR"

started=0
cleanup() { [ "$started" -eq 1 ] || KEEP_DATA=1 "$HA_HOME/stop.sh" >&2 || true; }
trap cleanup EXIT

if [ -n "${PG_BINDIR:-}" ]; then
  idem_ensure_packages $HA_PACKAGES
  echo "$PG_BINDIR" >"$HA_DIR/bin"
else
  idem_ensure_packages $IDEM_PACKAGES $HA_PACKAGES
  idem_build
  idem_log "installing the extension into a private server copy in $HA_DIR/inst"
  idem_private_install "$HA_DIR" >"$HA_DIR/bin"
fi
[ -e "$(ha_bin)/../lib/pg_cron.so" ] || ha_die "no pg_cron in $(ha_bin)/../lib"
head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$HA_DIR/password"
chmod 600 "$HA_DIR/password"
for ((i = 1; i <= n; i++)); do echo "node$i"; done >"$HA_DIR/nodes"

idem_log "etcd"
ha_start_etcd
for node in $(ha_nodes); do ha_write_config "$node"; done

idem_log "node1 bootstraps the cluster"
ha_start_patroni node1
for i in $(seq 240); do
  ha_rest node1 /primary >/dev/null 2>&1 && break
  [ "$i" -lt 240 ] || { tail -30 "$HA_DIR/node1/patroni.log" >&2; ha_die "node1 did not become the leader"; }
  sleep 0.5
done
for node in $(ha_nodes | tail -n +2); do
  idem_log "$node joins as a replica"
  ha_start_patroni "$node"
done
ha_wait_state 180 || { ha_patronictl list >&2 || true; ha_die "the replicas did not come up"; }

idem_log "database $HA_DB: extensions idempotency and pg_cron, the cleanup job"
ha_psql node1 -d postgres -c "CREATE DATABASE $HA_DB" -c 'CREATE EXTENSION pg_cron'
ha_psql node1 -d "$HA_DB" -c 'CREATE EXTENSION idempotency' \
  -c "SELECT idempotency.schedule_cleanup('${HA_CLEANUP_SCHEDULE:-*/5 * * * *}')" >/dev/null
ha_connstr >"$HA_DIR/connstr"
started=1

ha_patronictl list
cat <<TXT
connect:     psql "$(cat "$HA_DIR/connstr")"
patronictl:  patronictl -c $(ha_yml node1) list
REST API:    $(for node in $(ha_nodes); do printf 'http://127.0.0.1:%s/cluster ' "$(ha_api_port "$node")"; done)
stop:        HA_DIR=$HA_DIR $HA_HOME/stop.sh
TXT
