#!/usr/bin/env bash
# test/integration/patroni_failover.sh: no acknowledged request is lost when
# Patroni fails over (SIGKILL of the leader) or switches over, under load.
#
# Starts scaleout/ha/start.sh (etcd + 3 PostgreSQL 15 nodes under Patroni,
# synchronous_mode_strict, the extension and pg_cron with the cleanup job
# every minute) on 127.0.0.1 ports from 6850 on, then runs
# patroni_failover.py: six clients (phased, one-transaction, execute) on the
# multi-host connection string; kill the leader; check; the old leader
# rejoins through pg_rewind and converges; patronictl switchover; check;
# pg_cron ran on each leader, never twice.  Prints each check, then the
# figures (downtime, requests/s, errors by SQLSTATE).  Stops everything it
# started (scaleout/ha/stop.sh, by PID); keeps $HA_DIR on failure.
#
# In `make test` it uses the suite's private server copy; alone, as root:
#   bash test/integration/patroni_failover.sh
#   HA_DOC=doc/ha.md bash test/integration/patroni_failover.sh   # also refresh the figures in doc/ha.md
set -uo pipefail
# One Patroni cluster per CI run is enough: the host's (PostgreSQL 15).
. "$(dirname "$0")/../../scripts/lib.sh"
idem_host_only "tests failover under Patroni"
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
if [ -n "${IDEM_TEST_WORK:-}" ]; then
  export HA_DIR=$IDEM_TEST_WORK/ha PG_BINDIR=${PG_BINDIR:-$IDEM_TEST_BIN}
else
  export HA_DIR=${HA_DIR:-/tmp/idempotency-ha-test}
fi
export HA_PORT=${HA_PORT:-6850}
. "$IDEM_TOP/scaleout/ha/lib.sh"
[ -z "${HA_DOC:-}" ] || export HA_DOC=$(realpath "$HA_DOC")

rc=1
finish() {
  [ "$rc" -eq 0 ] || { export KEEP_DATA=1; echo "patroni_failover: logs kept in $HA_DIR" >&2; }
  "$HA_HOME/stop.sh"
}
trap finish EXIT

# pg_cron 1.5 and later take '5 seconds'; Debian 12 has 1.4 ('1.4-1'):
# every minute.
export HA_CLEANUP_SCHEDULE='* * * * *'
control=$("${PG_BINDIR:-$PG_BIN}/pg_config" --sharedir)/extension/pg_cron.control
read -r major minor < <(sed -n "s/^default_version = '\([0-9]*\)\.\([0-9]*\).*/\1 \2/p" "$control" 2>/dev/null) || true
if [ -n "${minor:-}" ] && { [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -ge 5 ]; }; }; then
  HA_CLEANUP_SCHEDULE='5 seconds'
fi

start=$(date +%s)
"$HA_HOME/start.sh" 3 || exit 1
echo "# cluster up in $(($(date +%s) - start)) s; cleanup job schedule '$HA_CLEANUP_SCHEDULE'"
"$PYTHON" -u "$here/patroni_failover.py"
rc=$?
echo "# patroni_failover: $([ $rc -eq 0 ] && echo passed || echo FAILED) in $(($(date +%s) - start)) s"
exit $rc
