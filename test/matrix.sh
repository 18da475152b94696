#!/usr/bin/env bash
# test/matrix.sh [MAJOR...] (make test, make matrix, make test PG=17): the
# whole test suite (test/run.sh) on each PostgreSQL major in turn, default
# 15 17 18.  15 runs on the host (Debian 12); 17 and 18 run in Debian chroots
# (scripts/chroot.sh: trixie and sid), built on first use and cached in
# /var/tmp/idempotency-chroots.  For a chroot major it copies the work tree
# into the chroot, runs test/run.sh there with PG_MAJOR set, then stops
# anything left running inside (by PID; counted as a failure) and unmounts.
#
# Every line of a major's run is prefixed with [pgN].  The last lines are a
# summary per major (timings included) and one total, "N passed, M failed";
# the exit status is nonzero if anything failed.  TEST_GROUPS,
# INTEGRATION_TESTS, POOLER_TESTS, TAP_TESTS, STRESS_SECONDS,
# KEEP_WORK, PORTABLE_MODES, PORTABLE_TAP_MAJORS, POOLER_MAJORS,
# CITUS_MAJORS, CITUS_TESTS and IDEM_TEST_PORT are passed on to
# test/run.sh.
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"

majors=${*:-15 17 18}
IDEM_CHROOT_ENV="PG_MAJOR TEST_GROUPS INTEGRATION_TESTS POOLER_TESTS TAP_TESTS STRESS_SECONDS KEEP_WORK CI PORTABLE_MODES PORTABLE_TAP_MAJORS POOLER_MAJORS CITUS_MAJORS CITUS_TESTS IDEM_TEST_PORT STATEMENT_PASS_MAJORS TESTS"
OUT=$(mktemp -d /tmp/idempotency-matrix.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# run_chroot MAJOR: test/run.sh inside the chroot of MAJOR (a subshell: its
# lock and mounts end with it).  Prints timings to $OUT/pgN.times.
run_chroot() (
  m=$1
  ch=$(idem_chroot_dir "$m")
  idem_chroot_lock "$m"
  t0=$SECONDS
  idem_chroot_ensure "$m" || { echo "chroot for PostgreSQL $m could not be built"; exit 1; }
  echo "chroot $(idem_suite_of "$m") ready in $((SECONDS - t0))s" >"$OUT/pg$m.times"
  trap 'idem_chroot_release "$ch"' EXIT
  trap 'exit 130' INT TERM HUP
  # interrupted, the output pipe (sed, tee) may be gone first: writing to it
  # must not kill this shell before the release
  trap '' PIPE
  idem_chroot_mount "$ch" || exit 1
  idem_chroot_sync_host "$ch"
  # leftovers of an earlier run (kept work of a failed one included)
  rm -rf "$ch/build" "$ch"/tmp/idempotency-test.* "$ch"/tmp/idempotency-portable.* "$ch"/tmp/idempotency-scaleout
  mkdir -p "$ch/build/idempotency"
  # the work tree without git data, dependencies or build products (the
  # host's objects are for another major)
  tar -C "$IDEM_TOP" --exclude=.git --exclude=node_modules --exclude='*.o' --exclude='*.so' \
    --exclude='*.bc' --exclude=results --exclude=output_iso --exclude=tmp_check \
    --exclude='regression.*' --exclude=./test/expected --exclude="./sql/idempotency--1.0.sql" \
    -cf - . | tar -C "$ch/build/idempotency" -xf -
  # the vendored sources the tests build (pg_tle), where test/portable/lib.sh
  # looks for them: beside the repository
  mkdir -p "$ch/build/shared/vendor"
  for v in "$IDEM_TOP/../shared/vendor" /work/shared/vendor; do
    [ -d "$v" ] && { cp "$v"/*.tar.gz "$ch/build/shared/vendor/" 2>/dev/null; break; }
  done
  t1=$SECONDS
  PG_MAJOR=$m idem_chroot_exec "$ch" bash /build/idempotency/test/run.sh
  rc=$?
  echo "tests $(exit_word $rc) in $((SECONDS - t1))s" >>"$OUT/pg$m.times"
  left=$(idem_chroot_procs "$ch")
  if [ -n "$left" ]; then
    echo "processes left running in the chroot: $(echo $left)"
    ps -o pid,args -p "$(echo $left | tr ' ' ,)"
    echo "leftover processes .. FAILED"
    touch "$OUT/pg$m.leftover"	# one more failure for this major
  fi
  for d in "$ch"/tmp/idempotency-test.* "$ch"/tmp/idempotency-portable.*; do
    [ -d "$d" ] && echo "(seen from the host: $d)"
  done
  exit $rc
)

run_host() {
  local m=$1 t0=$SECONDS rc
  PG_MAJOR=$m bash "$IDEM_TOP/test/run.sh"
  rc=$?
  echo "host $(idem_host_suite), tests $(exit_word $rc) in $((SECONDS - t0))s" >"$OUT/pg$m.times"
  return $rc
}

exit_word() { [ "$1" -eq 0 ] && echo ok || echo "failed (exit $1)"; }

total_passed=0
total_failed=0
status=0
for m in $majors; do
  if ! idem_suite_of "$m" >/dev/null; then
    echo "[pg$m] unknown major (supported: 15 17 18)"
    echo "0 passed, 1 failed" >"$OUT/pg$m.log"
  elif idem_runs_natively "$m"; then
    run_host "$m" 2>&1 | tee "$OUT/pg$m.log" | sed -u "s/^/[pg$m] /"
  else
    run_chroot "$m" 2>&1 | tee "$OUT/pg$m.log" | sed -u "s/^/[pg$m] /"
  fi
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # the last "N passed, M failed" of the run counts; none at all is a failure
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/pg$m.log" | tail -1)
  [ -n "$line" ] || line="0 passed, 1 failed"
  set -- $line
  p=$1 f=$3
  [ -f "$OUT/pg$m.leftover" ] && f=$((f + 1))
  [ "$f" -eq 0 ] || status=1
  total_passed=$((total_passed + p))
  total_failed=$((total_failed + f))
  echo "pg$m: $p passed, $f failed ($(tr '\n' ';' <"$OUT/pg$m.times" 2>/dev/null | sed 's/;$//; s/;/; /g'))" >>"$OUT/summary"
done

echo "==> summary"
cat "$OUT/summary"
echo "$total_passed passed, $total_failed failed"
[ "$status" -eq 0 ] && [ "$total_failed" -eq 0 ] && [ "$total_passed" -gt 0 ]
