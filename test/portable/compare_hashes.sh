#!/usr/bin/env bash
# test/portable/compare_hashes.sh: test/portable/compare_hashes.sql in a
# UTF8, a LATIN1 and a SQL_ASCII database of a server that has the C
# edition installed: the portable fingerprint, key_hash, lock_key and
# try_lock must give the C's bits and errors.  PGHOST, PGPORT and PGUSER
# (a superuser: it creates and drops the databases portable_hashes_<enc>)
# name the server; PSQL the psql to use.
# Run by test/run.sh's group portable, against its cluster (make test).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PSQL=${PSQL:-psql}
scratch=$(mktemp /tmp/portable-hashes.XXXXXX.sql)
trap 'rm -f "$scratch"' EXIT
python3 "$TOP/scripts/portable.py" scratch --schema idempotency_portable fingerprint locks >"$scratch"
chmod 644 "$scratch"
for enc in UTF8 LATIN1 SQL_ASCII; do
  db=portable_hashes_$(echo "$enc" | tr A-Z a-z)
  "$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "DROP DATABASE IF EXISTS $db" \
    -c "CREATE DATABASE $db TEMPLATE template0 ENCODING '$enc' LOCALE 'C'"
  "$PSQL" -X -q -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION idempotency'
  PGCLIENTENCODING=UTF8 "$PSQL" -X -v ON_ERROR_STOP=1 -v scratch="$scratch" -d "$db" \
    -f "$TOP/test/portable/compare_hashes.sql"
  "$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE $db"
done
echo "ok: the portable hashes are the C edition's in UTF8, LATIN1 and SQL_ASCII databases"
