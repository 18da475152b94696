#!/usr/bin/env bash
# test/integration/python_clients.sh: the Flask middleware of examples/python
# against a real HTTP server on 127.0.0.1 and the test cluster.  Flask and
# psycopg2 come from apt (python3-flask, python3-psycopg2), so this runs
# Debian's python3, whatever else is first on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_db.bash"
fresh_db idem_python_clients

cd "$here/../../examples/python"
PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m unittest test_middleware
