#!/usr/bin/env bash
# test/portable/tap.sh: the TAP tests (test/t/*.pl, PostgreSQL::Test::Cluster)
# on the portable edition (doc/portable.md), run natively on this system's
# major (the host's 15, or inside a chroot of scripts/chroot.sh), as
# test/run.sh's tap group runs them: prove -I $PGXS_DIR/src/test/perl as
# the postgres user, with TESTDIR and PG_REGRESS set.
#
# The clusters take their binaries from PATH: here a private copy of the
# server with none of the C edition's files (test/portable/lib.sh), with
# pg_tle built into it for mode tle.  test/t/IdemEdition.pm installs the
# edition as IDEM_EDITION says, from the scripts that portable.py builds
# (IDEM_EDITION_DIR):
#   plain  the plain script, run with psql -f by a role that has CREATE on
#          the database and nothing more;
#   tle    pg_tle preloaded; a role with pgtle_admin and CREATE on the
#          database runs the installer, then CREATE EXTENSION idempotency.
# Each test file runs on its own (one prove per file), so that its result
# and wall time are its own.  Tests about the C library's internals only
# are skipped with their reason (skip_reason below).
#
# PORTABLE_MODES="plain tle" (default both), TESTS="010_crash_holder
# 020_stress" (names, default all), STRESS_SECONDS (020_stress,
# 070_ddl_under_load; default 15), KEEP_WORK=1.
# The last line is "N passed, M failed", counting test files per mode.
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"
idem_runs_natively "$PG_MAJOR" || {
  echo "test/portable/tap.sh runs natively only: PostgreSQL $PG_MAJOR is in the chroot of scripts/chroot.sh" >&2
  exit 2
}
PORTABLE_MODES=${PORTABLE_MODES:-plain tle}
. "$IDEM_TOP/test/portable/lib.sh"

# skip_reason MODE TEST: why TEST cannot run on the edition (empty: it
# runs): only tests of what needs the C library's shared memory.
skip_reason() {
  case $2 in
  111_metrics_roles) echo "the metrics' rows are the C library's shared memory; the portable edition has no counts" ;;
  esac
}

idem_ensure_packages $IDEM_PACKAGES $PORTABLE_PACKAGES python3-psycopg2 || exit 1

WORK=$(mktemp -d /tmp/idempotency-portable-tap.XXXXXX)
chmod 755 "$WORK"
cleanup() {
  if [ "${failed:-1}" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then
    rm -rf "$WORK"
  else
    echo "test files and logs kept in $WORK" >&2
  fi
}
trap cleanup EXIT
fail_setup() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

portable_prepare "$WORK" "$PORTABLE_MODES" || fail_setup "portable set-up failed"
chown -R postgres: "$WORK"

passed=0
failed=0
declare -a results=()
cd "$WORK/repo"
for mode in $PORTABLE_MODES; do
  for f in test/t/*.pl; do
    t=$(basename "$f" .pl)
    if [ -n "${TESTS:-}" ] && ! [[ " $TESTS " == *" $t "* ]]; then continue; fi
    reason=$(skip_reason "$mode" "$t")
    if [ -n "$reason" ]; then
      results+=("$mode $t skipped: $reason")
      continue
    fi
    # PostgreSQL::Test::Utils creates TESTDIR/tmp_check, but not TESTDIR;
    # from 17 on it writes into TESTDATADIR and TESTLOGDIR, or else ./tmp_check
    # and ./log, where the logs of both modes would run together
    dir=$WORK/tap-$mode/$t
    mkdir -p "$dir" && chown postgres: "$WORK/tap-$mode" "$dir"
    idem_log "$mode: $t"
    t0=$SECONDS
    runuser -u postgres -- env PATH="$BIN:$PATH" IDEM_EDITION="$mode" \
      IDEM_EDITION_DIR="$PORTABLE_EDITION" TESTDIR="$dir" \
      TESTDATADIR="$dir/tmp_check" TESTLOGDIR="$dir/tmp_check/log" \
      PG_REGRESS="$PGXS_DIR/src/test/regress/pg_regress" \
      ${STRESS_SECONDS:+STRESS_SECONDS="$STRESS_SECONDS"} \
      prove -I "$PGXS_DIR/src/test/perl" "$f" >"$dir.log" 2>&1
    rc=$?
    cat "$dir.log"
    # a file that skips itself as a whole counts as failed, as in test/run.sh
    if [ $rc -eq 0 ] && ! grep -qE '\.\. skipped' "$dir.log"; then
      results+=("$mode $t ok ($((SECONDS - t0)) s)"); passed=$((passed + 1))
    else
      results+=("$mode $t FAILED ($((SECONDS - t0)) s)"); failed=$((failed + 1))
    fi
  done
done

echo "---- results"
printf '%s\n' "${results[@]}"
for mode in $PORTABLE_MODES; do
  echo "$mode: $(printf '%s\n' "${results[@]}" | grep -c "^$mode .* ok (") passed," \
    "$(printf '%s\n' "${results[@]}" | grep -c "^$mode .* FAILED (") failed," \
    "$(printf '%s\n' "${results[@]}" | grep -c "^$mode .* skipped: ") skipped"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
