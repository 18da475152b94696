#!/usr/bin/env bash
# test/pooler/go.sh: the Go package clients/go through PgBouncer in
# transaction mode (test/pooler/pooler.bash), with the configuration its
# README's "Behind a transaction pooler" shows.  The whole suite (the
# client, the middleware over real HTTP with chi, the relays) on lib/pq
# and on pgx's database/sql driver through a pool of 4, each relay without
# a LISTEN connection of its own (it says once that notifications do not
# arrive, and polls) and one with a direct one (woken by NOTIFY); the
# burst app of test/integration/wait_burst through a pool of 2; then the
# README's quick start, as written, served through the pool of 4.  The
# build, go vet and the GOPATH install are test/integration/go_package.sh's
# (test/integration/go_package.bash is shared).  Host only.
set -euo pipefail
. "$(dirname "$0")/package.bash"
# before the package's set-up, which installs its toolchain
idem_host_only "tests the Go package through PgBouncer"
. "$IDEM_TOP/test/integration/go_package.bash"
started=$(date +%s)
pooler_package_setup "the Go package" idem_go_pooler
go_package_build
built=$(date +%s)

# the README's lines: the query of each DATABASE_URL of its block
readme_query() {
  readme_block "$IDEM_TOP/clients/go/README.md" "pooler: dsn" sh |
    sed -n "s|^DATABASE_URL='[^?]*?\([^']*\)' *# $1\$|\1|p"
}
pq_query=$(readme_query lib/pq)
pgx_query=$(readme_query "pgx v4")
[ -n "$pq_query" ] && [ -n "$pgx_query" ] || { echo "go pooler: no DSN lines in the README"; exit 1; }

# the suite's connections (the PG* variables) go through the pool of 4,
# with the README's line; its relays' LISTEN connection is direct, but for
# the one that checks what a relay without one does
through() { echo PGHOST=127.0.0.1 PGPORT=$1 PGSSLMODE=disable PGDATABASE=$db; }
direct="PGIDEM_LISTEN_DSN=host=$direct_host port=$direct_port sslmode=disable"
go_package_suite "lib/pq through PgBouncer (pool 4), $pq_query" $(through "$port4") PGIDEM_POOLER=1 \
  PGIDEM_DRIVER=pq "PGIDEM_DSN=${pq_query//&/ }" "$direct"
go_package_suite "pgx through PgBouncer (pool 4), $pgx_query" $(through "$port4") PGIDEM_POOLER=1 \
  PGIDEM_DRIVER=pgx "PGIDEM_DSN=${pgx_query//&/ }" "$direct"
suites=$(date +%s)

idem_log "go pooler: bursts of duplicates with Wait through PgBouncer (pool 2)"
(export $(through "$port2") PGIDEM_SERVER_CONNECTIONS=2 "PGIDEM_DSN=${pq_query//&/ }"
  wait_burst go-pgbouncer-2 "$tmp/waitburst.log" "$tmp/waitburst")
burst=$(date +%s)

idem_log "go pooler: the README's quick start through PgBouncer (pool 4)"
go_quickstart_modules
go_quickstart "module mode, through PgBouncer" "$tmp/quickstart-modules" \
  DATABASE_URL="$(pooler_url "$tmp/pool4" "$db")?$pq_query"

echo "go pooler: $go_passed go tests passed through PgBouncer $(pooler_version); build $((built - started))s," \
  "suites $((suites - built))s, burst $((burst - suites))s, total $(( $(date +%s) - started ))s"
