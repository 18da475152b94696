#!/usr/bin/env bash
# test/integration/python_clients.sh: the Python example,
# examples/python-payments (a Flask payment API on the pg_idempotency
# package of clients/python, imported from clients/python/src), runs its
# pytest test against the test cluster over real HTTP on 127.0.0.1: a
# payment answers 201, its retry replays it, another body under the key is
# refused with 422, no key with 400, and one payments row is written.
# psycopg 3, its pool, Flask and pytest come from apt (no PyPI), so this
# runs Debian's python3, whatever else is first on PATH.  The example does
# not depend on the server's major: the host's run (PostgreSQL 15) tests it
# once.
. "$(dirname "$0")/lib.bash"
idem_host_only "tests the Python example"
here=$(cd "$(dirname "$0")" && pwd)
idem_ensure_packages python3-psycopg python3-psycopg-pool python3-flask python3-pytest
. "$here/fresh_db.bash"
fresh_db idem_python_clients

cd "$here/../../examples/python-payments"
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$here/../../clients/python/src" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider test_payments.py
