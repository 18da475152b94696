#!/usr/bin/env bash
# test/integration/node_package.sh: the npm package of clients/node against
# a real database: its node:test suites (client, relay, Express and the
# @node-idempotency storage adapter), then `npm pack`, the tarball installed
# into an empty project and an Express app run from it with real HTTP on
# 127.0.0.1. Dependencies come from the committed lock file (npm ci). Runs
# on the host's PostgreSQL 15 only.
set -euo pipefail
if [ -f /etc/idempotency-chroot ]; then
  echo "skipped: inside the $(cat /etc/idempotency-chroot) chroot; the host's run (PostgreSQL 15) tests the Node package"
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_db.bash"
fresh_db idem_node_package

pkg="$here/../../clients/node"
cd "$pkg"
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
node --test --test-concurrency=1 --test-timeout=60000 test/*.test.cjs

# the tarball, installed into an empty project
app=$(mktemp -d /tmp/idem-node-app.XXXXXX)
trap 'rm -rf "$app"' EXIT
tarball=$(npm pack --silent --pack-destination "$app" | tail -1)
cp test/packaged-app.cjs "$app/app.cjs"
cd "$app"
echo '{"name": "idem-packaged-app", "private": true}' > package.json
npm install --no-audit --no-fund --loglevel=error "./$tarball" express@5.1.0
node app.cjs
