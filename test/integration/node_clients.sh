#!/usr/bin/env bash
# test/integration/node_clients.sh: the Express middleware and the
# @node-idempotency storage adapter of examples/node, against a real HTTP
# server on 127.0.0.1 and the test cluster (PGHOST/PGPORT/PGUSER).
# Dependencies come from the committed lock file (npm ci).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
db=idem_node_clients

psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION idempotency'

cd "$top/examples/node"
npm ci --no-audit --no-fund --loglevel=error
PGDATABASE=$db node --test test/*.test.js
