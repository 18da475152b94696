#!/usr/bin/env bash
# test/integration/python_clients.sh: the Flask middleware of
# examples/python, against a real HTTP server on 127.0.0.1 and the test
# cluster (PGHOST/PGPORT/PGUSER).  Flask and psycopg2 come from apt
# (python3-flask, python3-psycopg2), so this uses Debian's python3.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
db=idem_python_clients

psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION idempotency'

cd "$top/examples/python"
PGDATABASE=$db PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m unittest test_middleware
