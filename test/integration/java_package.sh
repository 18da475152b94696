#!/usr/bin/env bash
# test/integration/java_package.sh: the Java package clients/java
# (org.pgidempotency:pg-idempotency) as a team adds it to its build.
# Maven builds and installs the jar and its pom into a local repository of
# this run, with nothing but Debian's /usr/share/maven-repo behind it (a
# mirror of every repository: no network); the JUnit 5 suite (the JDBC
# client, the servlet filter over real HTTP in embedded Tomcat 10.1, the
# @Idempotent interceptor through a Spring AOP proxy, the relay killed
# mid-batch and finished by another) runs with junit5's console launcher
# (one JVM on Debian's jars; the build has no test phase) against a
# fresh database of the C edition, then against one where the portable
# edition was installed as a plain script by a role that is no superuser.
# Bursts of 20 and 100 duplicates with wait through pools of 2, 4 and 10
# run once (wait_burst/).  Last, a new user in a home of their own follows
# the README as written, offline: its apt-get line, its settings.xml, its
# install of the package, its pom and Tomcat quick start in a new project,
# and its mvn package and java -jar; the app answers real HTTP on
# 127.0.0.1 as doc/clients.md's behaviour table says.
# JDBC reaches the test cluster through its Unix socket
# (org.pgidempotency.UnixSocketFactory).  Host only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
# The package does not depend on the server's major: the host's run tests it once.
idem_host_only "tests the Java package"
idem_ensure_packages openjdk-17-jdk-headless maven maven-repo-helper libpostgresql-jdbc-java \
  libjakarta-servlet-api-java libtomcat10-embed-java junit5 libjackson2-databind-java \
  libaopalliance-java libspring-aop-java libspring-context-java libmaven-compiler-plugin-java \
  libmaven-resources-plugin-java libmaven-jar-plugin-java libmaven-install-plugin-java libsurefire-java
. "$here/fresh_db.bash"
. "$here/readme_block.bash"
. "$here/wait_burst/wait_burst.bash"
. "$IDEM_TOP/test/portable/lib.sh"
# the README's install line, as written
idem_ensure_packages $(readme_block "$IDEM_TOP/clients/java/README.md" "install: debian" sh |
  tr -d '\\' | sed 's/^ *apt-get install//')
fresh_db idem_java_package
started=$(date +%s)

J=/usr/share/java
tmp=$(mktemp -d /tmp/idem-java-package.XXXXXX)
chmod 755 "$tmp"
server=
cleanup() {
  [ -z "$server" ] || kill -- -"$server" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
cp -r "$IDEM_TOP/clients/java" "$tmp/src"
rm -rf "$tmp/src/target"
cat > "$tmp/settings.xml" <<XML
<settings>
  <localRepository>$tmp/m2</localRepository>
  <mirrors>
    <mirror><id>debian</id><mirrorOf>*</mirrorOf><url>file:///usr/share/maven-repo</url></mirror>
  </mirrors>
</settings>
XML
mvn() { command mvn -B -q -s "$tmp/settings.xml" "$@"; }

idem_log "java_package: mvn install"
(cd "$tmp/src" && mvn -Dmaven.test.skip=true install) >"$tmp/mvn.log" 2>&1 || { cat "$tmp/mvn.log"; exit 1; }
jar=$tmp/m2/org/pgidempotency/pg-idempotency/0.1.0/pg-idempotency-0.1.0.jar
[ -f "$jar" ] && [ -f "${jar%.jar}.pom" ] || { echo "java_package: the jar or its pom was not installed" >&2; exit 1; }

# the suite's classpath: the installed jar, its dependencies, and the test
# stack (tomcat10-embed-core brings the Servlet 6.0 API the jar runs on;
# the jar is compiled against Servlet 5.0)
cp=$jar:$J/postgresql.jar:$J/jackson-databind.jar:$J/jackson-core.jar:$J/jackson-annotations.jar
cp=$cp:$J/tomcat10-embed-core.jar:$J/aopalliance.jar:$J/spring3-aop.jar:$J/spring3-core.jar
cp=$cp:$J/spring3-beans.jar:$J/spring3-context.jar:$J/spring3-expression.jar:$J/commons-logging.jar
mkdir "$tmp/test-classes"
javac -nowarn -d "$tmp/test-classes" -cp "$cp:$J/junit-jupiter-api.jar:$J/opentest4j.jar:$J/apiguardian-api.jar:$J/junit-platform-commons.jar" \
  $(find "$tmp/src/src/test/java" -name '*.java') "$here/wait_burst/WaitBurstApp.java" 2>&1 | grep -v '^Note:' || true
[ -f "$tmp/test-classes/org/pgidempotency/ClientTest.class" ] || { echo "java_package: the tests do not compile" >&2; exit 1; }

junit() {	# junit EDITION: the suite against the database of PGDATABASE as PGUSER
  local log=$tmp/junit-$1.log
  idem_log "java_package: JUnit 5, $1 edition ($PGDATABASE as $PGUSER)"
  if ! IDEM_EDITION=$1 java -jar $J/junit-platform-console-standalone.jar -cp "$tmp/test-classes:$cp" \
       --disable-banner --disable-ansi-colors --details=tree --scan-class-path >"$log" 2>&1; then
    cat "$log"
    echo "java_package: JUnit failed on the $1 edition" >&2
    exit 1
  fi
  grep -E 'tests (successful|failed)|Test run finished' "$log"
}
junit c

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
PGDATABASE=idem_java_portable PGUSER=idem_java_portable junit portable

# a new user, offline, in a home of their own: the README's settings.xml,
# its install of the package from a checkout, its pom and Tomcat quick
# start in a new project, and its build-and-run commands, all as written
idem_log "java_package: the README's install and Tomcat quick start, as written"
home=$tmp/home
mkdir -p "$home/.m2" "$home/checkout/clients" "$home/payments/src/main/java"
readme() { readme_block "$IDEM_TOP/clients/java/README.md" "$@"; }
readme "quick-start: settings" xml >"$home/.m2/settings.xml"
cp -r "$IDEM_TOP/clients/java" "$home/checkout/clients/"
rm -rf "$home/checkout/clients/java/target"
# Maven reads ~ from Java's user.home (the passwd entry), not from HOME
export MAVEN_OPTS="-Duser.home=$home"
(cd "$home/checkout" && HOME=$home bash -euc "$(readme "install: maven" sh)") >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
readme "quick-start: pom" xml >"$home/payments/pom.xml"
readme "quick-start: tomcat" java >"$home/payments/src/main/java/App.java"

# the app on 127.0.0.1, an ephemeral port (it prints it); the run block in
# a process group of its own (mvn, then java), stopped as one
cd "$home/payments"
socket_file=$PGHOST/.s.PGSQL.$PGPORT
: >"$tmp/app.log"
HOME=$home JDBC_URL="jdbc:postgresql://localhost/idem_java_package?user=$PGUSER&socketFactory=org.pgidempotency.UnixSocketFactory&socketFactoryArg=$socket_file" \
  PORT=0 setsid bash -euc "$(readme "quick-start: run" sh)" >"$tmp/app.log" 2>&1 &   # Tomcat's base dir: ./tomcat.0
server=$!
for _ in $(seq 1 1200); do
  port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/app.log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/app.log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$tmp/app.log"; echo "java_package: the app did not start" >&2; exit 1; }
unzip -p "$home/payments/target/payments-1.jar" META-INF/MANIFEST.MF | tr -d '\r\n ' | grep -q 'pg-idempotency-0.1.0.jar' ||
  { echo "java_package: the app's classpath lacks pg-idempotency" >&2; exit 1; }

idem_log "java_package: the quick start's app over HTTP on 127.0.0.1:$port"
python3 - "$port" <<'PY' || { cat "$tmp/app.log"; exit 1; }
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
payments=$(psql -X -At -d idem_java_package -c "SELECT count(*) FROM payments WHERE amount = 7")
[ "$payments" = 1 ] || { echo "java_package: $payments payments of the duplicates, not 1" >&2; exit 1; }
kill -- -"$server"
wait "$server" 2>/dev/null || true
server=
echo "java_package: ok in $(( $(date +%s) - started )) s"
