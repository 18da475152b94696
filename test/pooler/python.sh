#!/usr/bin/env bash
# test/pooler/python.sh: the Python package (clients/python) through
# PgBouncer in transaction mode, configured as its README's "Behind a
# transaction pooler" says.  Its whole pytest suite (the client, the sync
# and async relays, the HTTP behaviour on Starlette, Flask and Django, the
# pool bursts) runs through a pool of 4 server connections, the relays'
# listen_dsn on the database itself (IDEM_DIRECT_URL, tests/conftest.py);
# a relay without one says once that it polls, and publishes every event
# once, in order per aggregate, by polling.  Then, through a pool of 2, the
# bursts of duplicates with wait (test/integration/wait_burst/check.py;
# the middleware's server_connections 2) and the README's FastAPI quick
# start as written.  The wheel, mypy and
# the fresh virtual environment are test/integration/python_package.sh's:
# they do not touch the connection.
set -euo pipefail
. "$(dirname "$0")/package.bash"
. "$it/python_package.bash"
pooler_package_setup "the Python package" idem_pooler_python
python_package_setup "$tmp"

started=$SECONDS
idem_log "pooler python: pytest through a pool of 4"
IDEM_DIRECT_URL=$direct PGHOST=127.0.0.1 PGPORT=$port4 python_package_pytest
idem_log "pooler python: pytest took $((SECONDS - started))s"

# Debian's python3, first on PATH, with the package from the copy
mkdir "$tmp/bin" "$tmp/burst"
ln -s "$PY" "$tmp/bin/python3"
export PYTHONPATH=$tmp/src/src PGHOST=127.0.0.1 PGPORT=$port2
idem_log "pooler python: bursts of duplicates with wait through a pool of 2"
cd "$tmp/burst"
# the middleware's server_connections: the pooler's 2 (a sleeping claim
# keeps one of them, and the holders need the other)
PGIDEM_SERVER_CONNECTIONS=2 python_package_wait_burst "$tmp/wait-burst.log" "$PY"
idem_log "pooler python: the README's FastAPI quick start through a pool of 2"
python_package_quick_start "$tmp/quick" "$tmp/bin"
echo "pooler python: ok in $((SECONDS - started))s"
