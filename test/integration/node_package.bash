# test/integration/node_package.bash: sourced by the tests of the Node
# package clients/node (test/integration/node_package.sh and
# node_new_user.sh, directly; test/pooler/node.sh, through PgBouncer), not
# run.  Its caller has scripts/lib.sh and test/integration/readme_block.bash
# sourced, and $IDEM_TOP set.
#
# node_package_build DIR: the package in DIR (a copy of clients/node)
#   ready to test: its dependencies from the committed lock file (npm ci),
#   then npm run build; DIR is the working directory after it.
# node_package_suites: its node:test suites (client, relay, the HTTP table
#   on Express, Fastify and NestJS, the storage adapters and Powertools),
#   from DIR.
# node_package_quick_start DIR LOG: the README's Express quick start, as
#   written, in the project DIR (where pg-idempotency, pg and express
#   resolve), on 127.0.0.1, and test/conformance/http.json run against it
#   over real HTTP.  The server's PID is in $server while it runs.

node_package_build() {
  cd "$1"
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
}

node_package_suites() {
  node --test --test-concurrency=1 --test-timeout=60000 test/*.test.cjs
}

node_package_quick_start() {
  local dir=$1 log=$2 port
  cd "$dir"
  readme_block "$IDEM_TOP/clients/node/README.md" "quick-start: express" js > app.js
  grep -q "idempotentExpress" app.js || { echo "node_package: no quick start in the README" >&2; return 1; }
  port=$(idem_free_port)
  PORT=$port node app.js >"$log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.1
  done
  python3 "$IDEM_TOP/test/conformance/http_check.py" "http://127.0.0.1:$port" || { cat "$log"; return 1; }
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}
