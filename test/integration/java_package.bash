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
#   ephemeral port; checks its answers as doc/clients.md's behaviour table
#   says and the payments of PGDATABASE, then stops it.

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
  python3 - "$port" <<'PY' || { cat "$tmp/app.log"; return 1; }
import json, sys, threading, urllib.error, urllib.request, uuid
from datetime import datetime, timedelta, timezone

url = "http://127.0.0.1:%s/payments" % sys.argv[1]


def post(body, key=None, user="alice"):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    if user:
        headers["X-User"] = user
    req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def problem(reply, status):
    assert reply[0] == status, reply
    assert reply[1]["Content-Type"] == "application/problem+json", reply[1]
    doc = json.loads(reply[2])
    assert doc["type"] == "about:blank" and doc["status"] == status and doc["title"] and doc["detail"], doc


key = "quick-" + uuid.uuid4().hex
problem(post({"amount": 5}), 400)                       # no key
problem(post({"amount": 5}, "k" * 401), 400)            # over 400 characters
problem(post({"amount": 5}, key, user=None), 401)       # no caller
first = post({"amount": 5}, key)
again = post({"amount": 5}, key)
assert first[0] == 201 and first[1].get("Idempotent-Replayed") is None, first
assert json.loads(first[2])["paid"] == 5, first
assert again[0] == 201 and again[1]["Idempotent-Replayed"] == "true" and again[2] == first[2], again
assert again[1]["Location"] == first[1]["Location"], again[1]
expires = first[1]["Idempotency-Key-Expires"]
ahead = datetime.strptime(expires, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=timezone.utc) - datetime.now(timezone.utc)
assert abs(ahead - timedelta(days=1)) < timedelta(seconds=10), expires
assert again[1]["Idempotency-Key-Expires"] == expires, again[1]
problem(post({"amount": 6}, key), 422)

# concurrent duplicates: one payment, the others 409 (Retry-After) or its replay
dup = "dup-" + uuid.uuid4().hex
barrier = threading.Barrier(8)
replies = []
def send():
    barrier.wait()
    replies.append(post({"amount": 7, "slow": True}, dup))
threads = [threading.Thread(target=send) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ran = [r for r in replies if r[0] == 201 and r[1].get("Idempotent-Replayed") is None]
busy = [r for r in replies if r[0] == 409]
replayed = [r for r in replies if r[0] == 201 and r[1].get("Idempotent-Replayed") == "true"]
assert len(ran) == 1 and len(busy) + len(replayed) == 7, [(r[0], r[2]) for r in replies]
for r in busy:
    problem(r, 409)
    assert int(r[1]["Retry-After"]) >= 1, r[1]
for r in replayed:
    assert r[2] == ran[0][2], r
print("quick start over HTTP: 400, 400, 401, 201, byte-identical replay, 422; 8 concurrent duplicates: "
      "1 run, %d 409, %d replays" % (len(busy), len(replayed)))
PY
  local payments
  payments=$(psql -X -At -c "SELECT count(*) FROM payments WHERE amount = 7")
  [ "$payments" = 1 ] || { echo "java: $payments payments of the duplicates, not 1" >&2; return 1; }
  kill -- -"$server"
  wait "$server" 2>/dev/null || true
  server=
}
