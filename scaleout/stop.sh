#!/usr/bin/env bash
# scaleout/stop.sh: stop every cluster that start.sh (and rebalance.sh)
# started in $SCALEOUT_DIR, each by the PID in its postmaster.pid.
# KEEP_DATA unset: the directory is removed afterwards.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ -d "$SCALEOUT_DIR" ] || exit 0
for pidfile in "$SCALEOUT_DIR"/*/data/postmaster.pid; do
  [ -e "$pidfile" ] || continue
  node=$(basename "$(dirname "$(dirname "$pidfile")")")
  idem_log "stopping $node (pid $(head -1 "$pidfile"))"
  so_stop_node "$node"
done
[ -n "${KEEP_DATA:-}" ] || rm -rf "$SCALEOUT_DIR"
