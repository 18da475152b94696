# test/integration/fresh_db.bash: sourced by integration scripts (not run).
# fresh_db NAME: (re)creates database NAME in the test cluster
# (PGHOST/PGPORT/PGUSER) with the idempotency extension, and exports
# PGDATABASE=NAME for the clients the script starts.
fresh_db() {
  psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "DROP DATABASE IF EXISTS \"$1\"" -c "CREATE DATABASE \"$1\""
  psql -X -q -v ON_ERROR_STOP=1 -d "$1" -c 'CREATE EXTENSION idempotency'
  export PGDATABASE=$1
}
