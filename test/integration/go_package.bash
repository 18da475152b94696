# test/integration/go_package.bash: sourced by test/integration/go_package.sh
# and test/pooler/go.sh (not run).  The Go package built as a team builds
# it, offline, from Debian's archive, and its README's quick start checked
# over HTTP.  Sourced after scripts/lib.sh, it installs Go and the
# modules from Debian and sources fresh_db.bash, readme_block.bash and
# wait_burst/wait_burst.bash; the functions need $tmp (a directory of the
# caller's, mode 755).
#
# go_package_build: module mode with no proxy (GOPROXY=off and an empty
#   module cache: offline-modules.sh replaces every module of the graph by
#   Debian's sources); copies clients/go to $tmp/pgidempotency and builds,
#   there, the suite once for both drivers ($tmp/pgidempotency.test:
#   -race -tags pgx; PGIDEM_DRIVER=pgx picks pgx's database/sql driver)
#   and the burst app of wait_burst/ ($tmp/waitburst).  The build cache
#   outlives the run (the race-instrumented standard library takes most of
#   a first build); IDEM_GO_CACHE= for a cold one.
# go_package_suite LABEL ENV...: the suite with ENV (PGDATABASE,
#   PGIDEM_DRIVER, PGIDEM_DSN ...); prints its summary lines and adds its
#   passed tests to $go_passed, or prints its log and fails.
# go_quickstart_modules: the README's module-mode install as written, in a
#   home of its own, and the quick start built there:
#   $tmp/quickstart-modules (its source in $tmp/main.go).
# go_quickstart NAME BINARY ENV...: serves BINARY with ENV on 127.0.0.1,
#   runs test/conformance/http.json (doc/clients.md's behaviour table)
#   against it and stops it.

idem_ensure_packages golang-go golang-github-lib-pq-dev golang-github-go-chi-chi-dev \
  golang-github-jackc-pgx-v4-dev
. "$IDEM_TOP/test/integration/fresh_db.bash"
. "$IDEM_TOP/test/integration/readme_block.bash"
. "$IDEM_TOP/test/integration/wait_burst/wait_burst.bash"
go_passed=0
server=

go_package_build() {
  export GO111MODULE=on GOFLAGS= GOPROXY=off GOMODCACHE=$tmp/modcache
  unset GOPATH
  export GOCACHE=${IDEM_GO_CACHE-/var/tmp/idempotency-go-cache}
  [ -n "$GOCACHE" ] || GOCACHE=$tmp/cache
  cp -r "$IDEM_TOP/clients/go" "$tmp/pgidempotency"
  (cd "$tmp/pgidempotency" && ./offline-modules.sh &&
    go test -race -tags pgx -c -o "$tmp/pgidempotency.test" . &&
    mkdir waitburst && cp "$IDEM_TOP/test/integration/wait_burst/main.go" waitburst/ &&
    go build -o "$tmp/waitburst" ./waitburst)   # a command of the module: pgidempotency/waitburst
}

go_package_suite() {
  local label=$1 n
  shift
  idem_log "go test -race: $label"
  (cd "$tmp" && env "$@" "$tmp/pgidempotency.test" -test.count=1 -test.v -test.timeout=5m) \
    >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; echo "go test failed: $label"; return 1; }
  grep -E '^(--- |ok|PASS|FAIL)|cancelled after|before SIGKILL|polling every' "$tmp/run.log"
  n=$(grep -c '^--- PASS' "$tmp/run.log")
  go_passed=$((go_passed + n))
}

go_quickstart_modules() {
  local install
  readme_block "$IDEM_TOP/clients/go/README.md" "quick-start: nethttp" go >"$tmp/main.go"
  install=$(readme_block "$IDEM_TOP/clients/go/README.md" "install: modules" sh)
  mkdir "$tmp/home-modules"
  (cd "$IDEM_TOP" && HOME=$tmp/home-modules GOPROXY= bash -euc "$install
    cp '$tmp/main.go' ~/payments/ && cd ~/payments
    go vet . && go build -o '$tmp/quickstart-modules' .") >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; return 1; }
}

go_quickstart() {
  local name=$1 bin=$2 port
  shift 2
  port=$(idem_free_port)
  env "$@" ADDR=127.0.0.1:$port "$bin" >"$tmp/quickstart.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  python3 "$IDEM_TOP/test/conformance/http_check.py" "http://127.0.0.1:$port" || { cat "$tmp/quickstart.log"; return 1; }
  echo "quick start ($name): as the behaviour table says"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}
