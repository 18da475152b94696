#!/usr/bin/env bash
# test/integration/wait_burst/doc.sh [PACKAGE...]: the burst figures of
# doc/clients.md ("Waiting for the holder"), generated, never pasted.  Runs
# the package tests of PACKAGE (default: node python go java) through
# test/run.sh with WAIT_BURST_FIGURES set, so that check.py writes each
# package's table, then rewrites the region of doc/clients.md between
# "<!-- wait-burst figures: ... -->" and "<!-- end -->" with their rows, the
# date, the commit and the machine.  A package left out or whose test
# failed is named as not measured.  The test run itself never writes doc/:
# only this script does.  IDEM_TEST_PORT as for test/run.sh.
set -euo pipefail
top=$(cd "$(dirname "$0")/../../.." && pwd)
IDEM_TOP=$top
. "$top/scripts/lib.sh"
packages=${*:-node python go java}
figures=$(mktemp -d /tmp/idem-wait-burst-doc.XXXXXX)
trap 'rm -rf "$figures"' EXIT
tests=
for p in $packages; do tests+=" test/integration/${p}_package.sh"; done
load=$(cut -d' ' -f1 /proc/loadavg) commit=$(idem_commit)   # the run's, not the one at the end
WAIT_BURST_FIGURES=$figures TEST_GROUPS=integration INTEGRATION_TESTS="$tests" \
  bash "$top/test/run.sh" || true    # a failed package writes no table: named below
measured= missing=
for p in node python go java; do
  if [ -s "$figures/$p.md" ]; then measured+=" $p"; else missing+=", $p"; fi
done
[ -n "$measured" ] || { echo "no package measured: doc/clients.md left alone" >&2; exit 1; }

block=$figures/block.md
{
  echo "Measured by \`test/integration/wait_burst/doc.sh\` on $(date -u '+%Y-%m-%d') at commit $commit" \
    "($(nproc) cores, shared with other work, load average $load at the start)${missing:+; not measured in this run: ${missing#, }}." \
    "\"first 201\" counts the answers that ran the handler; \"seconds\" runs from the burst's first request to its last answer."
  echo
  first=1
  for p in $measured; do
    if [ -n "$first" ]; then cat "$figures/$p.md"; first=; else tail -n +3 "$figures/$p.md"; fi
  done
} >"$block"
doc=$top/doc/clients.md
grep -q '^<!-- wait-burst figures: ' "$doc" || { echo "no wait-burst region in $doc" >&2; exit 1; }
awk -v block="$block" '
  /^<!-- wait-burst figures: / { print; while ((getline l < block) > 0) print l; skip = 1; next }
  skip && /^<!-- end -->$/ { skip = 0 }
  !skip' "$doc" >"$doc.tmp"
mv "$doc.tmp" "$doc"
idem_log "doc/clients.md: wait-burst figures of$measured${missing:+ (not measured: ${missing#, })}"
