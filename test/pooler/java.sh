#!/usr/bin/env bash
# test/pooler/java.sh: the Java package clients/java through PgBouncer in
# transaction mode (test/pooler/pooler.bash), with the configuration its
# README's "Behind a transaction pooler" shows.  The README's install as
# written (test/integration/java_package.bash, shared with
# test/integration/java_package.sh), then the whole JUnit 5 suite (the
# JDBC client, the servlet filter in embedded Tomcat, @Idempotent through
# Spring AOP, the relays) through a pool of 4, each relay without a
# LISTEN connection of its own (it says once that notifications do not
# arrive, and polls) and one with a direct one (woken by NOTIFY); the
# burst app of test/integration/wait_burst through a pool of 2; then the
# README's Tomcat quick start, as written, served through the pool of 4.
# The portable edition's run is java_package.sh's.  Host only.
set -euo pipefail
. "$(dirname "$0")/package.bash"
# before the package's set-up, which installs its toolchain
idem_host_only "tests the Java package through PgBouncer"
. "$IDEM_TOP/test/integration/java_package.bash"
started=$(date +%s)
pooler_package_setup "the Java package" idem_java_pooler

idem_log "java pooler: the README's install (mvn install), as written"
java_install
java_compile_tests
built=$(date +%s)

# the README's line: its JDBC URL's query
query=$(readme_block "$IDEM_TOP/clients/java/README.md" "pooler: url" text | sed -n 's/^jdbc:postgresql:[^?]*?//p')
[ -n "$query" ] || { echo "java pooler: no JDBC URL in the README"; exit 1; }

# the suite's connections (the PG* variables) go through the pool of 4,
# with the README's line; its relays' LISTEN connection is direct, but for
# the one that checks what a relay without one does
through() { echo PGHOST=127.0.0.1 PGPORT=$1 PGDATABASE=$db PGIDEM_JDBC=$query; }
java_junit "the C edition through PgBouncer (pool 4), $query" IDEM_EDITION=c $(through "$port4") PGIDEM_POOLER=1 \
  PGIDEM_LISTEN_HOST="$direct_host" PGIDEM_LISTEN_PORT="$direct_port"
suite=$(date +%s)

idem_log "java pooler: bursts of duplicates with wait through PgBouncer (pool 2)"
(export $(through "$port2") PGIDEM_SERVER_CONNECTIONS=2
  wait_burst java-pgbouncer-2 "$tmp/wait-burst.log" java -cp "$tmp/test-classes:$cp" org.pgidempotency.WaitBurstApp)
burst=$(date +%s)

idem_log "java pooler: the README's Tomcat quick start through PgBouncer (pool 4)"
java_quickstart "jdbc:postgresql://127.0.0.1:$port4/$db?user=$PGUSER&$query"

echo "java pooler: ok through PgBouncer $(pooler_version); install and build $((built - started))s," \
  "suite $((suite - built))s, burst $((burst - suite))s, total $(( $(date +%s) - started ))s"
