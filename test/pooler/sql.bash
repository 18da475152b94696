# test/pooler/sql.bash: sourced first by the pooler group's SQL tests
# (test/pooler/sql_*.sh); it turns on -euo pipefail, sets IDEM_TOP and
# $here (test/pooler) and sources scripts/lib.sh and pooler.bash.  Both
# editions side by side in the test cluster (PGHOST, PGPORT), each in a
# database of its own, so that every test runs the same calls on both:
#
# sql_setup NAME: database NAME_c with the C edition (CREATE EXTENSION, as
#   postgres), and NAME_p with the portable edition installed as a plain
#   script by the role NAME_owner, which is no superuser (as a managed
#   service allows).  Sets SQL_TMP, a directory the postgres user can read,
#   and an EXIT trap that stops the poolers started with sql_pooler, drops
#   both databases and the role, and removes SQL_TMP.
# sql_db E, sql_user E: the database and the role of edition E (c or p).
# sql_direct E [PSQL_ARGS...]: psql to E's database as its role on the
#   cluster's socket (-X -q -A -t, ON_ERROR_STOP on).
# sql_pooler DIR POOL [INI_LINE...]: pooler_start on a free port, the
#   PgBouncer stopped again at exit; sql_pooled DIR E [PSQL_ARGS...]:
#   psql as sql_direct, to E's database through the pooler of DIR.

set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
. "$here/pooler.bash"

SQL_POOLERS=()
sql_pooler() {
  local dir=$1 pool=$2
  shift 2
  SQL_POOLERS+=("$dir")
  pooler_start "$dir" "$(idem_free_port)" "$pool" "$@"
}

sql_db() { echo "${SQL_NAME}_$1"; }
sql_user() { if [ "$1" = c ]; then echo postgres; else echo "${SQL_NAME}_owner"; fi; }

sql_direct() {
  local e=$1
  shift
  psql -X -q -A -t -v ON_ERROR_STOP=1 -U "$(sql_user "$e")" -d "$(sql_db "$e")" "$@"
}

sql_pooled() {
  local dir=$1 e=$2
  shift 2
  psql -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 \
    -p "$(sed -n 's/^listen_port = //p' "$dir/pgbouncer.ini")" \
    -U "$(sql_user "$e")" -d "$(sql_db "$e")" "$@"
}

sql_cleanup() {
  local dir
  for dir in "${SQL_POOLERS[@]}"; do pooler_stop "$dir"; done
  psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $(sql_db c) WITH (FORCE)" \
    -c "DROP DATABASE IF EXISTS $(sql_db p) WITH (FORCE)" -c "DROP ROLE IF EXISTS $(sql_user p)" >/dev/null 2>&1 || true
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$SQL_TMP"
}

sql_setup() {
  SQL_NAME=$1
  SQL_TMP=$(mktemp -d "/tmp/$SQL_NAME.XXXXXX")
  chmod 755 "$SQL_TMP"
  trap sql_cleanup EXIT
  . "$IDEM_TOP/test/integration/fresh_db.bash"
  . "$IDEM_TOP/test/portable/lib.sh"
  fresh_db "$(sql_db c)"
  unset PGDATABASE
  portable_build_edition "$SQL_TMP"
  psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $(sql_db p)" \
    -c "DROP ROLE IF EXISTS $(sql_user p)" -c "CREATE ROLE $(sql_user p) LOGIN" \
    -c "CREATE DATABASE $(sql_db p) OWNER $(sql_user p)"
  portable_install plain "$(sql_db p)" "$(sql_user p)"
}
