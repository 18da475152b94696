#!/usr/bin/env bash
# test/integration/go_package.sh: the Go package clients/go (pgidempotency)
# as a team builds it, offline, from Debian's archive: Go 1.19 and lib/pq
# from /usr/share/gocode, in module mode with no proxy (GOPROXY=off and an
# empty module cache: offline-modules.sh replaces every module of the graph
# by Debian's sources).  go vet, then go test -race (compiled once) against the test
# cluster: a database with the C edition (fresh_db) and one with the
# portable edition installed as a plain script by a role that is no
# superuser, on lib/pq, and the C edition's again on pgx's database/sql
# driver (-tags pgx, PGIDEM_DRIVER=pgx).  The suite covers the client,
# the middleware over real HTTP (httptest.Server, duplicates behind a
# barrier, chi) and the relay (one killed with SIGKILL mid-batch and
# another finishing, one stopped with SIGTERM handing its batch back).
# Bursts of 20 and 100 duplicates with Wait through pools of 2, 4 and 10
# run once (wait_burst/).  Then the README's two installs run as written
# (GOPATH mode, as Debian builds Go packages, and module mode, each in a
# home of its own) and its quick start is built by both and served on
# 127.0.0.1: a request, its replay, a mismatch, a missing key, another
# caller's request under the same key and a request without a caller
# answer as the behaviour table says.  The module build connects as the
# quick start does with DATABASE_URL unset (sslmode=disable and the PG*
# variables, here the test cluster's unix socket); the GOPATH build with
# the DATABASE_URL its comment shows for make run's server
# (postgres://postgres@127.0.0.1:PORT/demo?sslmode=disable), against a
# cluster of this test's own listening on 127.0.0.1 as make run's does
# (IDEM_GO_TCP_PORT, default a free port), since the test cluster has no
# TCP listener.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
# The package does not depend on the server's major: the host's run tests it once.
idem_host_only "tests the Go package"
idem_ensure_packages golang-go golang-github-lib-pq-dev golang-github-go-chi-chi-dev \
  golang-github-jackc-pgx-v4-dev
. "$here/fresh_db.bash"
. "$here/readme_block.bash"
. "$here/wait_burst/wait_burst.bash"
. "$IDEM_TOP/test/portable/lib.sh"
started=$(date +%s)

tmp=$(mktemp -d /tmp/idem-go-package.XXXXXX)
chmod 755 "$tmp"
OWNER=idem_go_owner PDB=idem_go_portable
server=
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  idem_stop_cluster "$IDEM_TEST_BIN" "$tmp/tcp"
  psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $PDB" -c "DROP ROLE IF EXISTS $OWNER" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

fresh_db idem_go_package
cdb=$PGDATABASE
idem_log "go_package: the portable edition as a plain script in $PDB"
portable_build_edition "$tmp"
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $PDB" \
  -c "DROP ROLE IF EXISTS $OWNER" -c "CREATE ROLE $OWNER LOGIN" -c "CREATE DATABASE $PDB OWNER $OWNER"
portable_install plain "$PDB" "$OWNER"

# the build cache outlives the run (the race-instrumented standard library
# takes most of a first build); IDEM_GO_CACHE= for a cold one.  The module
# cache starts empty: nothing may come from an earlier download.
export GO111MODULE=on GOFLAGS= GOPROXY=off GOMODCACHE=$tmp/modcache
unset GOPATH
export GOCACHE=${IDEM_GO_CACHE-/var/tmp/idempotency-go-cache}
[ -n "$GOCACHE" ] || GOCACHE=$tmp/cache
cp -r "$IDEM_TOP/clients/go" "$tmp/pgidempotency"
cd "$tmp/pgidempotency"
gostart=$(date +%s)
./offline-modules.sh
idem_log "go_package: $(go version); module mode offline; gofmt, go vet"
bad=$(gofmt -l ./*.go)
[ -z "$bad" ] || { echo "gofmt: $bad"; exit 1; }
go vet .
go vet -tags pgx .
# one binary for both drivers: lib/pq, and pgx's stdlib with PGIDEM_DRIVER=pgx
go test -race -tags pgx -c -o "$tmp/pgidempotency.test" .
built=$(date +%s)

total=0
for run in "$cdb lib/pq" "$PDB lib/pq" "$cdb pgx"; do
  set -- $run
  idem_log "go_package: go test -race on $1 with $2"
  (cd "$tmp" && PGDATABASE=$1 PGIDEM_DRIVER=${2#lib/} "$tmp/pgidempotency.test" -test.count=1 -test.v -test.timeout=5m) \
    >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; echo "go test failed on $1 with $2"; exit 1; }
  grep -E '^(--- |ok|PASS|FAIL)|cancelled after|before SIGKILL' "$tmp/run.log"
  n=$(grep -c '^--- PASS' "$tmp/run.log")
  total=$((total + n))
done

idem_log "go_package: bursts of duplicates with Wait through small pools"
# a command of the module: pgidempotency/waitburst
mkdir "$tmp/pgidempotency/waitburst"
cp "$here/wait_burst/main.go" "$tmp/pgidempotency/waitburst/"
go build -o "$tmp/waitburst" ./waitburst
PGDATABASE=$cdb wait_burst go "$tmp/waitburst.log" "$tmp/waitburst"

# the README's installs as written, each in a home of its own (from a
# checkout: they copy clients/go), then the quick start built where they
# say: GOPATH mode, and module mode with offline-modules.sh
idem_log "go_package: the README's installs and quick start over HTTP"
readme_block "$IDEM_TOP/clients/go/README.md" "quick-start: nethttp" go >"$tmp/main.go"
install=$(readme_block "$IDEM_TOP/clients/go/README.md" "install: gopath" sh)
mkdir "$tmp/home"
(cd "$IDEM_TOP" && HOME=$tmp/home bash -euc "$install
  mkdir -p ~/go/src/payments && cp '$tmp/main.go' ~/go/src/payments/ && cd ~/go/src/payments
  go vet . && go build -o '$tmp/quickstart' .") >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
install=$(readme_block "$IDEM_TOP/clients/go/README.md" "install: modules" sh)
mkdir "$tmp/home-modules"
(cd "$IDEM_TOP" && HOME=$tmp/home-modules GOPROXY= bash -euc "$install
  cp '$tmp/main.go' ~/payments/ && cd ~/payments
  go vet . && go build -o '$tmp/quickstart-modules' .") >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# quickstart NAME BINARY ENV...: serves BINARY with ENV and checks its answers
quickstart() {
  local name=$1 bin=$2 port key first expires ahead
  shift 2
  port=$(free_port)
  env "$@" ADDR=127.0.0.1:$port "$bin" >"$tmp/quickstart.log" 2>&1 &
  server=$!
  base=http://127.0.0.1:$port
  for _ in $(seq 100); do curl -s -o /dev/null "$base/" && break; sleep 0.1; done
  key=go-quickstart-${bin##*/}-$$-$(date +%s%N)
  [ "$(post "$key" '{"amount": 5}')" = 201 ] || { cat "$tmp/headers" "$tmp/body" "$tmp/quickstart.log"; exit 1; }
  first=$(cat "$tmp/body")
  expires=$(sed -n 's/^Idempotency-Key-Expires: \(.*\)\r$/\1/Ip' "$tmp/headers")
  ahead=$(( $(date -d "$expires" +%s) - $(date +%s) ))
  [ "$ahead" -gt 86000 ] && [ "$ahead" -le 86402 ] || { echo "Idempotency-Key-Expires: $expires"; exit 1; }
  [ "$(post "$key" '{"amount":5}')" = 201 ] && [ "$(cat "$tmp/body")" = "$first" ] &&
    grep -qi '^Idempotent-Replayed: true' "$tmp/headers" || { echo "no replay"; cat "$tmp/headers" "$tmp/body"; exit 1; }
  [ "$(post "$key" '{"amount": 6}')" = 422 ] && grep -qi '^Content-Type: application/problem+json' "$tmp/headers" ||
    { echo "no 422"; exit 1; }
  [ "$(post "" '{"amount": 6}')" = 400 ] || { echo "no 400"; exit 1; }
  # another caller's request under the same key is its own, not a replay
  [ "$(post "$key" '{"amount": 5}' bob)" = 201 ] && ! grep -qi '^Idempotent-Replayed' "$tmp/headers" ||
    { echo "bob got alice's answer"; cat "$tmp/headers"; exit 1; }
  [ "$(post "$key-nobody" '{"amount": 5}' '')" = 401 ] || { echo "no 401 without a caller"; exit 1; }
  echo "quick start ($name): 201, replay, 422, 400, another caller's own 201, 401 as the behaviour table says"
  kill "$server"
  server=
}
post() {  # post KEY BODY [USER]: prints the status code; the headers and body in $tmp
  curl -s -D "$tmp/headers" -o "$tmp/body" -w '%{http_code}' -X POST "$base/payments" \
    -H 'Content-Type: application/json' ${1:+-H "Idempotency-Key: $1"} -H "X-User: ${3-alice}" -d "$2"
}
quickstart "module mode, unix socket" "$tmp/quickstart-modules" PGDATABASE=$cdb DATABASE_URL=
tcpstart=$(date +%s)
tcp=${IDEM_GO_TCP_PORT:-$(free_port)}
idem_start_cluster "$IDEM_TEST_BIN" "$tmp/tcp" "$tcp" 127.0.0.1 idempotency
psql -X -q -h "$tmp/tcp" -p "$tcp" -d postgres -v ON_ERROR_STOP=1 -c 'CREATE DATABASE demo' -c '\c demo' -c 'CREATE EXTENSION idempotency'
# the DATABASE_URL of the quick start's comment, on this cluster's port
# (make run's, IDEM_DEMO_PORT, defaults to 54329 and may be in use)
url=$(sed -n 's|^\t// e\.g\. \(postgres://[^ ,]*\), make run.s$|\1|p' "$tmp/main.go")
[ -n "$url" ] || { echo "no DATABASE_URL example in the quick start"; exit 1; }
quickstart "GOPATH mode, $url served by 127.0.0.1:$tcp" "$tmp/quickstart" -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
  DATABASE_URL="${url/:54329\//:$tcp/}"
idem_stop_cluster "$IDEM_TEST_BIN" "$tmp/tcp"
tcpdone=$(date +%s)

echo "go_package: $total go tests passed (both editions with lib/pq, the C edition with pgx); setup $((gostart - started))s, go vet and build $((built - gostart))s, the TCP cluster $((tcpdone - tcpstart))s, total $(( $(date +%s) - started ))s"
