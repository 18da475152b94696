#!/usr/bin/env bash
# test/pooler/node.sh: the Node package (clients/node) through PgBouncer in
# transaction mode, configured as its README's "Behind a transaction
# pooler" says.  Its node:test suites (the client, the relay, the HTTP
# table on Express, Fastify and NestJS, the @node-idempotency storage and
# the Powertools persistence layer) run through a pool of 4 server
# connections, the relays' listenUrl on the database itself
# (IDEM_DIRECT_URL, test/helpers.cjs); a relay without one says once that
# it polls, and publishes every event once, in order per aggregate, by
# polling.  Then, through a pool of 2, the bursts of duplicates with wait
# (test/integration/wait_burst/check.py; the middleware's
# serverConnections 2) and the README's Express quick start as written.
# The package is built once per tree (the integration group's build is
# reused); Node 18 and the tarball are test/integration/node_package.sh's:
# they do not touch the connection.
set -euo pipefail
. "$(dirname "$0")/package.bash"
. "$it/node_package.bash"
pooler_package_setup "the Node package" idem_pooler_node

started=$SECONDS
pkg=$(cd "$here/../../clients/node" && pwd)
if [ -f "$pkg/dist/cjs/index.js" ] && [ -d "$pkg/node_modules" ]; then cd "$pkg"; else node_package_build "$pkg"; fi
idem_log "pooler node: the suites through a pool of 4"
IDEM_DIRECT_URL=$direct PGHOST=127.0.0.1 PGPORT=$port4 node_package_suites
idem_log "pooler node: built and the suites run in $((SECONDS - started))s"

# a project where pg-idempotency is the built package, and pg and express
# are its own (NODE_PATH), as the tarball and npm install give them
mkdir -p "$tmp/app/node_modules"
ln -s "$pkg" "$tmp/app/node_modules/pg-idempotency"
export NODE_PATH=$pkg/node_modules PGHOST=127.0.0.1 PGPORT=$port2
cd "$tmp/app"
idem_log "pooler node: bursts of duplicates with wait through a pool of 2"
cp "$it/wait_burst/app.cjs" wait-burst.cjs
# the middleware's serverConnections: the pooler's 2 (a sleeping claim
# keeps one of them, and the holders need the other)
PGIDEM_SERVER_CONNECTIONS=2 wait_burst node "$tmp/wait-burst.log" node wait-burst.cjs
idem_log "pooler node: the README's Express quick start through a pool of 2"
node_package_quick_start "$tmp/app" "$tmp/quick.log"
echo "pooler node: ok in $((SECONDS - started))s"
