#!/usr/bin/env bash
# bench/chroot.sh MAJOR (make bench PG=17, make bench PG=18): the benchmark
# suite, bench/run.sh, inside the Debian chroot of MAJOR (scripts/chroot.sh,
# the chroots of make test), the way test/matrix.sh runs the tests there.
# bench/run.sh hands any major that is not the system's own to this script.
#
# Under the chroot's lock (a second run waits for it), with proc and /dev
# mounted, it copies the work tree to /build/idempotency in the chroot and
# runs bench/run.sh there with PG_MAJOR=MAJOR and the BENCH_* variables;
# then it stops whatever still runs inside (by PID; the run then fails) and
# unmounts.  The report is copied to the host tree as
# bench/results/<UTC timestamp>-pgMAJOR.md.  Such a run never writes
# doc/performance.md (that page comes from the host's run; it shows the
# targets of the newest PostgreSQL 18 report in a section of its own).
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"

m=${1:-}
if ! idem_suite_of "$m" >/dev/null 2>&1 || idem_runs_natively "$m"; then
  echo "usage: $0 MAJOR  (a major with a chroot: 17 or 18; $(idem_host_suite)'s own runs with bench/run.sh)" >&2
  exit 2
fi
[ "$(id -u)" -eq 0 ] || { echo "make bench PG=$m: run as root (chroots need root)" >&2; exit 1; }

# the commit of the host tree: the copy in the chroot has no .git
BENCH_COMMIT=$(idem_commit)
[ -z "$(git -C "$IDEM_TOP" status --porcelain -- src sql bench 2>/dev/null)" ] ||
  BENCH_COMMIT+=" (with uncommitted changes to src, sql or bench)"
export BENCH_COMMIT
IDEM_CHROOT_ENV="PG_MAJOR BENCH_SECONDS BENCH_ROUNDS BENCH_METRICS_ROUNDS BENCH_CLIENTS BENCH_ROWS
  BENCH_MEMORY_CALLS BENCH_GROUPS BENCH_EDITIONS BENCH_KEEP BENCH_DOC BENCH_COMMIT NOTIFY_RATE"

ch=$(idem_chroot_dir "$m")
idem_chroot_lock "$m"
idem_chroot_ensure "$m" || { echo "chroot for PostgreSQL $m could not be built" >&2; exit 1; }
trap 'idem_chroot_release "$ch"' EXIT
trap 'exit 130' INT TERM HUP
# interrupted, the output pipe may be gone first: writing to it must not
# kill this shell before the release
trap '' PIPE
idem_chroot_mount "$ch" || exit 1
idem_chroot_sync_host "$ch"
# leftovers of an earlier run (a kept work directory included)
rm -rf "$ch/build/idempotency" "$ch"/tmp/idempotency-bench.*
mkdir -p "$ch/build/idempotency"
# the work tree without git data, dependencies, build products or reports
# (the host's objects are for another major)
tar -C "$IDEM_TOP" --exclude=.git --exclude=./build --exclude=node_modules --exclude='*.o' \
  --exclude='*.so' --exclude='*.bc' --exclude=results --exclude=output_iso --exclude=tmp_check \
  --exclude='regression.*' --exclude=./test/expected --exclude="./sql/idempotency--1.0.sql" \
  --exclude='idempotency-*.zip' -cf - . | tar -C "$ch/build/idempotency" -xf -

idem_log "pg$m: bench/run.sh in $ch ($(idem_suite_of "$m"))"
PG_MAJOR=$m idem_chroot_exec "$ch" bash /build/idempotency/bench/run.sh
rc=$?

left=$(idem_chroot_procs "$ch")
if [ -n "$left" ]; then
  echo "processes left running in the chroot: $(echo $left)"
  ps -o pid,args -p "$(echo $left | tr ' ' ,)"
  [ "$rc" -ne 0 ] || rc=1
fi
mkdir -p "$IDEM_TOP/bench/results"
for f in "$ch"/build/idempotency/bench/results/*.md; do
  [ -f "$f" ] || continue
  dest=$IDEM_TOP/bench/results/$(basename "$f" .md)-pg$m.md
  cp "$f" "$dest" && echo "report copied to $dest"
done
for d in "$ch"/tmp/idempotency-bench.*; do
  [ -d "$d" ] && echo "work directory kept (seen from the host): $d"
done
exit $rc
