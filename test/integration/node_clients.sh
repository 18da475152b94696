#!/usr/bin/env bash
# test/integration/node_clients.sh: the Express middleware and the
# @node-idempotency storage adapter of examples/node against a real HTTP
# server on 127.0.0.1 and the test cluster.  Dependencies come from the
# committed lock file (npm ci).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_db.bash"
fresh_db idem_node_clients

cd "$here/../../examples/node"
npm ci --no-audit --no-fund --loglevel=error
node --test test/*.test.js
