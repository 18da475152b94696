#!/usr/bin/env bash
# test/portable/plain_regress.sh TEST...: regression tests of test/sql/
# (pg_regress, expected/ as for the C edition) against the portable
# edition installed by its plain script, in a fresh database
# contrib_regression; ISOLATION=1 runs specs of test/specs/ instead, in
# isolation_regression.  The edition is built with stubs for the
# functions that have no portable body yet (make portable
# PORTABLE_PARTIAL=1), so only tests of the ported functions can pass.
# PGHOST, PGPORT, PGUSER (a superuser) name the server; BINDIR its
# binaries (default: those of pg_config on the PATH).  Not part of make
# test yet (doc/portable.md).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BINDIR=${BINDIR:-$(pg_config --bindir)}
PGXS_DIR=$(dirname "$("$BINDIR/pg_config" --pgxs)")/..
WORK=$(mktemp -d /tmp/portable-regress.XXXXXX)
python3 "$TOP/scripts/portable.py" build --allow-missing --out "$WORK/edition" >/dev/null
if [ -n "${ISOLATION:-}" ]; then
  db=isolation_regression runner=$PGXS_DIR/test/isolation/pg_isolation_regress dir=specs
else
  db=contrib_regression runner=$PGXS_DIR/test/regress/pg_regress dir=sql
fi
"$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
  -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
"$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d "$db" \
  -f "$WORK/edition/idempotency--$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$TOP/idempotency.control").sql" >/dev/null
mkdir -p "$WORK/test"
cp -r "$TOP/expected" "$WORK/test/expected"
cp -r "$TOP/test/$dir" "$WORK/test/$dir"
chmod -R a+rwX "$WORK"
cd "$WORK"
"$runner" --bindir="$BINDIR" --inputdir=test --outputdir=. --use-existing --dbname="$db" "$@" ||
  { echo "differences in $WORK/regression.diffs"; exit 1; }
rm -rf "$WORK"
