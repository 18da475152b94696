#!/usr/bin/env bash
# scaleout/ha/stop.sh: stop what scaleout/ha/start.sh (and the failover
# test) started in $HA_DIR, each by its recorded PID: every node's Patroni
# (nodeN/pid; it shuts its postmaster down), any postmaster left over (the
# PID in its postmaster.pid, e.g. after Patroni was killed), then etcd
# (etcd/pid).  KEEP_DATA unset: $HA_DIR is removed afterwards.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ -d "$HA_DIR" ] || exit 0
if [ -f "$HA_DIR/nodes" ]; then
  # all at once: a leader stopping alone waits for its replicas' WAL
  for node in $(ha_nodes); do ha_stop_node "$node" & done
  wait
fi
ha_stop_etcd
[ -n "${KEEP_DATA:-}" ] || rm -rf "$HA_DIR"
