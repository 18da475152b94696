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
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
idem_host_only "tests the Java package through PgBouncer"
idem_ensure_packages openjdk-17-jdk-headless maven libpostgresql-jdbc-java libtomcat10-embed-java junit5 \
  libjackson2-databind-java libaopalliance-java libspring-aop-java libspring-context-java pgbouncer
it=$IDEM_TOP/test/integration
. "$it/fresh_db.bash"
. "$it/readme_block.bash"
. "$it/wait_burst/wait_burst.bash"
. "$it/java_package.bash"
. "$here/pooler.bash"
started=$(date +%s)

tmp=$(mktemp -d /tmp/idem-java-pooler.XXXXXX)
chmod 755 "$tmp"
cleanup() {
  [ -z "$server" ] || kill -- -"$server" 2>/dev/null || true
  pooler_stop "$tmp/pool4"
  pooler_stop "$tmp/pool2"
  rm -rf "$tmp"
}
trap cleanup EXIT

fresh_db idem_java_pooler
db=$PGDATABASE
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port4=$(free_port)
pooler_start "$tmp/pool4" "$port4" 4
port2=$(free_port)
pooler_start "$tmp/pool2" "$port2" 2

idem_log "java pooler: the README's install (mvn install), as written"
java_install
java_compile_tests
built=$(date +%s)

# the suite's connections (the PG* variables) go through the pool of 4,
# with the README's line; its relays' LISTEN connection is direct, but for
# the one that checks what a relay without one does
through() { echo PGHOST=127.0.0.1 PGPORT=$1 PGDATABASE=$db PGIDEM_JDBC=prepareThreshold=0; }
java_junit "the C edition through PgBouncer (pool 4)" IDEM_EDITION=c $(through "$port4") PGIDEM_POOLER=1 \
  PGIDEM_LISTEN_HOST="$PGHOST" PGIDEM_LISTEN_PORT="$PGPORT"
suite=$(date +%s)

idem_log "java pooler: bursts of duplicates with wait through PgBouncer (pool 2)"
(export $(through "$port2") PGIDEM_SERVER_CONNECTIONS=2; wait_burst java-pgbouncer-2 "$tmp/wait-burst.log" \
  java -cp "$tmp/test-classes:$cp" org.pgidempotency.WaitBurstApp)
burst=$(date +%s)

idem_log "java pooler: the README's Tomcat quick start through PgBouncer (pool 4)"
java_quickstart "jdbc:postgresql://127.0.0.1:$port4/$db?user=$PGUSER&prepareThreshold=0"

echo "java pooler: ok through PgBouncer $(pooler_version); install and build $((built - started))s," \
  "suite $((suite - built))s, burst $((burst - suite))s, total $(( $(date +%s) - started ))s"
