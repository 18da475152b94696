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
#   resolve), on 127.0.0.1; over real HTTP a payment answers 201, its
#   retry replays the same bytes with Idempotent-Replayed: true, no caller
#   answers 401, and 4 concurrent requests with distinct keys answer 201.
#   The server's PID is in $server while it runs.

node_package_build() {
  cd "$1"
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
}

node_package_suites() {
  node --test --test-concurrency=1 --test-timeout=60000 test/*.test.cjs
}

node_package_quick_start() {
  local dir=$1 log=$2 port key first pids i
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
  # post KEY USER BODY: the status; the headers in h, the body in b
  post() {
    curl -s -D "$dir/h" -o "$dir/b" -w '%{http_code}' -X POST "http://127.0.0.1:$port/payments" \
      -H 'content-type: application/json' ${1:+-H "Idempotency-Key: $1"} ${2:+-H "X-User: $2"} -d "$3"
  }
  key=quick-$$-$RANDOM
  [ "$(post "$key" alice '{"amount": 5}')" = 201 ] || { cat "$dir/b" "$log"; return 1; }
  first=$(cat "$dir/b")
  [ "$(post "$key" alice '{"amount": 5}')" = 201 ]
  grep -qi '^idempotent-replayed: true' "$dir/h"
  [ "$(cat "$dir/b")" = "$first" ] || { echo "replay differs: $first / $(cat "$dir/b")" >&2; return 1; }
  [ "$(post "$key-2" '' '{"amount": 5}')" = 401 ]
  grep -qi '^content-type: application/problem+json' "$dir/h"
  pids=()
  for i in 1 2 3 4; do post "$key-c$i" bob "{\"amount\": $i}" > "$dir/c$i" & pids+=($!); done
  wait "${pids[@]}"
  for i in 1 2 3 4; do
    [ "$(cat "$dir/c$i")" = 201 ] || { echo "concurrent $i: $(cat "$dir/c$i")" >&2; return 1; }
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}
