#!/usr/bin/env bash
# scaleout/start.sh [N]: start N partition clusters (default 2, a power of
# two) that each run the extension, plus a PL/Proxy proxy cluster whose
# database "idempotency" exposes claim, complete, fail, checkpoint, release,
# lookup, issue_token, consume_token and process_once and routes each call
# by idempotency_shard.route(scope, key).  Run as root, from a clone:
#
#   scaleout/start.sh 4
#   psql -h 127.0.0.1 -p "$(cat /tmp/idempotency-scaleout/proxy/port)" -U postgres idempotency
#   scaleout/stop.sh
#
# SCALEOUT_DIR: where the clusters live (default /tmp/idempotency-scaleout).
# SCALEOUT_PORT: the first TCP port to try on 127.0.0.1 (default 6400).
# PG_BINDIR: a server bin directory that already has the extension and
#   PL/Proxy installed; without it, the packages are installed as needed
#   and the extension goes into a private copy of the server in
#   $SCALEOUT_DIR (the system installation is left alone).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

n=${1:-2}
case $n in 1 | 2 | 4 | 8 | 16 | 32 | 64) ;; *) so_die "the number of partitions must be a power of two up to 64, not '$n'" ;; esac
[ "$(id -u)" -eq 0 ] || so_die "run as root (the clusters run as the postgres OS user)"
for pidfile in "$SCALEOUT_DIR"/*/data/postmaster.pid; do
  [ -e "$pidfile" ] && so_die "clusters are running in $SCALEOUT_DIR; scaleout/stop.sh first"
done

mkdir -p "$SCALEOUT_DIR"
chmod 755 "$SCALEOUT_DIR"
if [ -n "${PG_BINDIR:-}" ]; then
  echo "$PG_BINDIR" >"$SCALEOUT_DIR/bin"
else
  so_install "$SCALEOUT_DIR" >"$SCALEOUT_DIR/bin"
fi

for ((i = 0; i < n; i++)); do
  idem_log "partition p$i"
  so_new_node "p$i"
  { so_partition_sql
    echo 'CREATE ROLE idempotency_proxy LOGIN;'
    echo "SELECT idempotency_shard.grant_proxy('idempotency_proxy');"
  } | so_psql "p$i" -f - >/dev/null
done

idem_log "proxy"
so_new_node proxy
{
  echo 'CREATE EXTENSION plproxy;'
  echo "CREATE SERVER idempotency FOREIGN DATA WRAPPER plproxy OPTIONS ($(so_server_options "$n"));"
  echo "CREATE USER MAPPING FOR PUBLIC SERVER idempotency OPTIONS (user 'idempotency_proxy');"
  cat "$SCALEOUT_HOME/route.sql" "$SCALEOUT_HOME/proxy.sql"
} | so_psql proxy -f - >/dev/null
echo "$n" >"$SCALEOUT_DIR/partitions"

idem_log "$n partition(s) and a proxy are running in $SCALEOUT_DIR"
for ((i = 0; i < n; i++)); do
  printf '  p%-6s %s\n' "$i" "$(so_connstr "p$i")"
done
printf '  %-7s %s\n' proxy "$(so_connstr proxy)"
echo "connect:  psql -h 127.0.0.1 -p $(so_port proxy) -U postgres $SCALEOUT_DB"
echo "stop:     SCALEOUT_DIR=$SCALEOUT_DIR $SCALEOUT_HOME/stop.sh"
