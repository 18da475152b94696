#!/usr/bin/env bash
# test/integration/java_package.sh: the Java package clients/java
# (org.pgidempotency:pg-idempotency) as a team adds it to its build.  A
# new user in a home of their own follows the README as written, offline:
# its apt-get line, its settings.xml (Debian's /usr/share/maven-repo as
# the mirror of every repository: no network) and its install of the
# package (mvn install of the jar and its pom).  The JUnit 5 suite (the
# JDBC client, the servlet filter over real HTTP in embedded Tomcat 10.1,
# the @Idempotent interceptor through a Spring AOP proxy, the relay killed
# mid-batch and finished by another) runs on that jar with junit5's
# console launcher (one JVM on Debian's jars; the build has no test phase)
# against a fresh database of the C edition, then against one where the
# portable edition was installed as a plain script by a role that is no
# superuser.  Bursts of 20 and 100 duplicates with wait through pools of
# 2, 4 and 10 run once (wait_burst/).  Last, the README's pom and Tomcat
# quick start in a new project, its mvn package and java -jar; the app
# answers real HTTP on 127.0.0.1 as doc/clients.md's behaviour table says.
# JDBC reaches the test cluster through its Unix socket
# (org.pgidempotency.UnixSocketFactory).  The steps are
# java_package.bash's, which test/pooler/java.sh shares.  Host only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
# The package does not depend on the server's major: the host's run tests it once.
idem_host_only "tests the Java package"
. "$here/java_package.bash"
. "$IDEM_TOP/test/portable/lib.sh"
# the README's install line, as written
idem_ensure_packages $(readme_block "$IDEM_TOP/clients/java/README.md" "install: debian" sh |
  tr -d '\\' | sed 's/^ *apt-get install//')
fresh_db idem_java_package
started=$(date +%s)

tmp=$(mktemp -d /tmp/idem-java-package.XXXXXX)
chmod 755 "$tmp"
cleanup() {
  [ -z "$server" ] || kill -- -"$server" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

idem_log "java_package: the README's install (mvn install), as written"
java_install
java_compile_tests
java_junit "the C edition ($PGDATABASE as $PGUSER)" IDEM_EDITION=c

idem_log "java_package: bursts of duplicates with wait through small pools"
wait_burst java "$tmp/wait-burst.log" java -cp "$tmp/test-classes:$cp" org.pgidempotency.WaitBurstApp

# the portable edition, installed as a plain script by a role that is no superuser
portable_build_edition "$tmp"
psql -X -q -v ON_ERROR_STOP=1 -d postgres \
  -c "DROP DATABASE IF EXISTS idem_java_portable" \
  -c "DROP ROLE IF EXISTS idem_java_portable" \
  -c "CREATE ROLE idem_java_portable LOGIN" \
  -c "CREATE DATABASE idem_java_portable OWNER idem_java_portable"
portable_install plain idem_java_portable idem_java_portable
java_junit "the portable edition (idem_java_portable as idem_java_portable)" IDEM_EDITION=portable \
  PGDATABASE=idem_java_portable PGUSER=idem_java_portable

# the README's pom and Tomcat quick start in a new project, its mvn
# package and java -jar, as written
idem_log "java_package: the README's Tomcat quick start, as written"
java_quickstart "jdbc:postgresql://localhost/idem_java_package?user=$PGUSER&socketFactory=org.pgidempotency.UnixSocketFactory&socketFactoryArg=$PGHOST/.s.PGSQL.$PGPORT"
echo "java_package: ok in $(( $(date +%s) - started )) s"
