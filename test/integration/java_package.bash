# test/integration/java_package.bash: sourced by
# test/integration/java_package.sh and test/pooler/java.sh (not run).  The
# Java package as a new user installs it from the README, offline, its
# JUnit 5 suite, and the README's Tomcat quick start checked over HTTP.
# Sourced after scripts/lib.sh, it installs Java, Maven and the jars
# from Debian and sources fresh_db.bash, readme_block.bash and
# wait_burst/wait_burst.bash; the functions need $tmp (a directory of the
# caller's, mode 755).
#
# java_install: a new user in a home of their own ($home): the README's
#   settings.xml (Debian's /usr/share/maven-repo as the mirror of every
#   repository: no network) and its install of the package from a
#   checkout, as written; $jar is the installed jar.  Maven reads ~ from
#   Java's user.home (the passwd entry), not from HOME: MAVEN_OPTS says it.
# java_compile_tests: the suite's classpath ($cp: the jar, its
#   dependencies and the test stack; tomcat10-embed-core brings the
#   Servlet 6.0 API the jar runs on, the jar is compiled against Servlet
#   5.0) and the test sources with wait_burst/WaitBurstApp.java compiled
#   into $tmp/test-classes.
# java_junit LABEL ENV...: the suite with junit5's console launcher (one
#   JVM on Debian's jars) and ENV (IDEM_EDITION, PG* ...); prints its
#   summary, or its log and fails.
# java_quickstart JDBC_URL: the README's pom and Tomcat quick start in a
#   new project of $home, built and run by its run block as written (in a
#   process group of its own, $server) with JDBC_URL, on 127.0.0.1 and an
#   ephemeral port; runs test/conformance/http.json against it (the
#   behaviour table of doc/clients.md), checks that its 8 duplicates made
#   one payment in PGDATABASE, then stops it.

idem_ensure_packages openjdk-17-jdk-headless maven maven-repo-helper libpostgresql-jdbc-java \
  libjakarta-servlet-api-java libtomcat10-embed-java junit5 libjackson2-databind-java \
  libaopalliance-java libspring-aop-java libspring-context-java libmaven-compiler-plugin-java \
  libmaven-resources-plugin-java libmaven-jar-plugin-java libmaven-install-plugin-java libsurefire-java
. "$IDEM_TOP/test/integration/fresh_db.bash"
. "$IDEM_TOP/test/integration/readme_block.bash"
. "$IDEM_TOP/test/integration/wait_burst/wait_burst.bash"
J=/usr/share/java
server=

java_readme() { readme_block "$IDEM_TOP/clients/java/README.md" "$@"; }

java_install() {
  home=$tmp/home
  mkdir -p "$home/.m2" "$home/checkout/clients" "$home/payments/src/main/java"
  java_readme "quick-start: settings" xml >"$home/.m2/settings.xml"
  cp -r "$IDEM_TOP/clients/java" "$home/checkout/clients/"
  rm -rf "$home/checkout/clients/java/target"
  export MAVEN_OPTS="-Duser.home=$home"
  (cd "$home/checkout" && HOME=$home bash -euc "$(java_readme "install: maven" sh)") >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; return 1; }
  jar=$home/.m2/repository/org/pgidempotency/pg-idempotency/0.1.0/pg-idempotency-0.1.0.jar
  [ -f "$jar" ] && [ -f "${jar%.jar}.pom" ] || { echo "java_install: the jar or its pom was not installed" >&2; return 1; }
}

java_compile_tests() {
  cp=$jar:$J/postgresql.jar:$J/jackson-databind.jar:$J/jackson-core.jar:$J/jackson-annotations.jar
  cp=$cp:$J/tomcat10-embed-core.jar:$J/aopalliance.jar:$J/spring3-aop.jar:$J/spring3-core.jar
  cp=$cp:$J/spring3-beans.jar:$J/spring3-context.jar:$J/spring3-expression.jar:$J/commons-logging.jar
  mkdir "$tmp/test-classes"
  javac -nowarn -d "$tmp/test-classes" -cp "$cp:$J/junit-jupiter-api.jar:$J/opentest4j.jar:$J/apiguardian-api.jar:$J/junit-platform-commons.jar" \
    $(find "$IDEM_TOP/clients/java/src/test/java" -name '*.java') "$IDEM_TOP/test/integration/wait_burst/WaitBurstApp.java" 2>&1 |
    grep -v '^Note:' || true
  [ -f "$tmp/test-classes/org/pgidempotency/ClientTest.class" ] || { echo "java: the tests do not compile" >&2; return 1; }
}

java_junit() {
  local label=$1 log=$tmp/junit.log
  shift
  idem_log "JUnit 5: $label"
  if ! env "$@" java -jar $J/junit-platform-console-standalone.jar -cp "$tmp/test-classes:$cp" \
       --disable-banner --disable-ansi-colors --details=tree --scan-class-path >"$log" 2>&1; then
    cat "$log"
    echo "java: JUnit failed: $label" >&2
    return 1
  fi
  grep -E 'tests (successful|failed)|Test run finished|polling every' "$log"
}

java_quickstart() {
  local port=
  java_readme "quick-start: pom" xml >"$home/payments/pom.xml"
  java_readme "quick-start: tomcat" java >"$home/payments/src/main/java/App.java"
  : >"$tmp/app.log"
  (cd "$home/payments" && HOME=$home JDBC_URL=$1 PORT=0 exec setsid bash -euc "$(java_readme "quick-start: run" sh)") \
    >"$tmp/app.log" 2>&1 &   # Tomcat's base dir: ./tomcat.0
  server=$!
  for _ in $(seq 1 1200); do
    port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/app.log")
    [ -n "$port" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$tmp/app.log"; return 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$tmp/app.log"; echo "java: the app did not start" >&2; return 1; }
  unzip -p "$home/payments/target/payments-1.jar" META-INF/MANIFEST.MF | tr -d '\r\n ' | grep -q 'pg-idempotency-0.1.0.jar' ||
    { echo "java: the app's classpath lacks pg-idempotency" >&2; return 1; }
  idem_log "java: the quick start's app over HTTP on 127.0.0.1:$port"
  python3 "$IDEM_TOP/test/conformance/http_check.py" "http://127.0.0.1:$port" || { cat "$tmp/app.log"; return 1; }
  local payments
  payments=$(psql -X -At -c "SELECT count(*) FROM payments WHERE amount = 7")
  [ "$payments" = 1 ] || { echo "java: $payments payments of the duplicates, not 1" >&2; return 1; }
  kill -- -"$server"
  wait "$server" 2>/dev/null || true
  server=
}
