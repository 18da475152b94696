#!/usr/bin/env bash
# test/integration/go_package.sh: the Go package clients/go (pgidempotency)
# as a team builds it, offline, from Debian's archive: Go 1.19 and lib/pq
# from /usr/share/gocode, in module mode with no proxy (GOPROXY=off and an
# empty module cache: offline-modules.sh replaces every module of the graph
# by Debian's sources).  go vet, then go test -race (compiled once) against the test
# cluster: a database with the C edition (fresh_db) on lib/pq as it comes,
# one with the portable edition installed as a plain script by a role that
# is no superuser on lib/pq with the README's binary_parameters=yes, and
# the C edition's again on pgx's database/sql driver (-tags pgx,
# PGIDEM_DRIVER=pgx) with its statement_cache_mode=describe.  The build
# and the quick start's checks are go_package.bash's, which
# test/pooler/go.sh shares.  The suite covers the client,
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
# quick start does with DATABASE_URL unset (sslmode=disable
# binary_parameters=yes and the PG* variables, here the test cluster's
# unix socket); the GOPATH build with the DATABASE_URL its comment shows
# for make run's server
# (postgres://postgres@127.0.0.1:PORT/demo?sslmode=disable&binary_parameters=yes), against a
# cluster of this test's own listening on 127.0.0.1 as make run's does
# (IDEM_GO_TCP_PORT, default a free port), since the test cluster has no
# TCP listener.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
# The package does not depend on the server's major: the host's run tests it once.
idem_host_only "tests the Go package"
. "$here/go_package.bash"
. "$IDEM_TOP/test/portable/lib.sh"
started=$(date +%s)

tmp=$(mktemp -d /tmp/idem-go-package.XXXXXX)
chmod 755 "$tmp"
OWNER=idem_go_owner PDB=idem_go_portable
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

gostart=$(date +%s)
go_package_build
cd "$tmp/pgidempotency"
idem_log "go_package: $(go version); module mode offline; gofmt, go vet"
bad=$(gofmt -l ./*.go)
[ -z "$bad" ] || { echo "gofmt: $bad"; exit 1; }
go vet .
go vet -tags pgx .
built=$(date +%s)

# lib/pq as it comes (the package puts each of its statements in a
# transaction of its own) and with the README's binary_parameters=yes;
# pgx with the README's statement_cache_mode=describe (its default is
# refused: TestSendModes)
go_package_suite "$cdb with lib/pq" PGDATABASE=$cdb PGIDEM_DRIVER=pq
go_package_suite "$PDB with lib/pq, binary_parameters=yes" PGDATABASE=$PDB PGIDEM_DRIVER=pq \
  PGIDEM_DSN=binary_parameters=yes
go_package_suite "$cdb with pgx, statement_cache_mode=describe" PGDATABASE=$cdb PGIDEM_DRIVER=pgx \
  PGIDEM_DSN=statement_cache_mode=describe

idem_log "go_package: bursts of duplicates with Wait through small pools"
PGDATABASE=$cdb wait_burst go "$tmp/waitburst.log" "$tmp/waitburst"

idem_log "go_package: the README's installs and quick start over HTTP"
go_quickstart_modules
install=$(readme_block "$IDEM_TOP/clients/go/README.md" "install: gopath" sh)
mkdir "$tmp/home"
(cd "$IDEM_TOP" && HOME=$tmp/home bash -euc "$install
  mkdir -p ~/go/src/payments && cp '$tmp/main.go' ~/go/src/payments/ && cd ~/go/src/payments
  go vet . && go build -o '$tmp/quickstart' .") >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
go_quickstart "module mode, unix socket" "$tmp/quickstart-modules" PGDATABASE=$cdb DATABASE_URL=
tcpstart=$(date +%s)
tcp=${IDEM_GO_TCP_PORT:-$(idem_free_port)}
idem_start_cluster "$IDEM_TEST_BIN" "$tmp/tcp" "$tcp" 127.0.0.1 idempotency
psql -X -q -h "$tmp/tcp" -p "$tcp" -d postgres -v ON_ERROR_STOP=1 -c 'CREATE DATABASE demo' -c '\c demo' -c 'CREATE EXTENSION idempotency'
# the DATABASE_URL of the quick start's comment, on this cluster's port
# (make run's, IDEM_DEMO_PORT, defaults to 54329 and may be in use)
url=$(sed -n 's|^\t// e\.g\. \(postgres://[^ ,]*\), make run.s$|\1|p' "$tmp/main.go")
[ -n "$url" ] || { echo "no DATABASE_URL example in the quick start"; exit 1; }
go_quickstart "GOPATH mode, $url served by 127.0.0.1:$tcp" "$tmp/quickstart" -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
  DATABASE_URL="${url/:54329\//:$tcp/}"
idem_stop_cluster "$IDEM_TEST_BIN" "$tmp/tcp"
tcpdone=$(date +%s)

echo "go_package: $go_passed go tests passed (both editions with lib/pq, the C edition with pgx); setup $((gostart - started))s, go vet and build $((built - gostart))s, the TCP cluster $((tcpdone - tcpstart))s, total $(( $(date +%s) - started ))s"
