#!/usr/bin/env bash
# test/integration/pgaudit.sh: pgaudit's object audit logs the rows that the
# extension writes without a statement (doc/reference.md, "Writes") as it
# logs those its statements write.
#
# A cluster of its own, with pgaudit preloaded (Debian's
# postgresql-$PG_MAJOR-pgaudit, which test/run.sh installs), and
# pgaudit.role an auditor role granted SELECT, INSERT and UPDATE on the
# extension's tables.  As the extension owner, a claim, its completion, a
# mark and an event each log one "AUDIT: OBJECT" line for the table they
# write: on the direct path, on the statement path (a no-op
# statement-level trigger on each table), and on the direct path with
# pgaudit.log_rows on (where pgaudit keeps the checked range table until
# the calling statement ends).  As an application role, neither path logs
# (pgaudit leaves out what runs as another role than the session's, and
# the bookkeeping runs as the extension owner).  A mark made by a trigger
# that logical replication's apply worker fires, outside any statement,
# takes the statement and is logged (pgaudit 1.7 and 17 crashed when the
# permission check came without a statement).
#
# Skips (exit 0, saying why) where pgaudit is not installed, as in a chroot
# whose Debian suite has no pgaudit for that major.
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
[ -f "$("$BIN/pg_config" --pkglibdir)/pgaudit.so" ] ||
  skip "postgresql-$PG_MAJOR-pgaudit is not installed (Debian $(cat /etc/idempotency-chroot 2>/dev/null || echo "$(. /etc/os-release && echo "$VERSION_CODENAME")") may have no such package)"

work_dir pgaudit
CLUSTER=$WORK/cluster
LOG=$CLUSTER/server.log
PORT=${PGPORT:-5432}	# its socket is in $CLUSTER: no clash with the test cluster's
# a crashed apply worker's restarts can hold up a fast shutdown
at_exit 'idem_stop_cluster "$BIN" "$CLUSTER"
  [ -f "$CLUSTER/data/postmaster.pid" ] &&
    runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -m immediate -w -s stop'
fail() {
  echo "FAIL: $*"
  echo "---- server log (end)"
  tail -40 "$LOG"
  exit 1
}
idem_start_cluster "$BIN" "$CLUSTER" "$PORT" '' 'pgaudit' || fail "the cluster did not start"
# run DB SQL [psql options]: as postgres, unless ROLE is set
run() {
  local db=$1 sql=$2
  shift 2
  runuser -u postgres -- env PGOPTIONS="-c client_min_messages=warning ${OPTS:-}" \
    "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CLUSTER" -p "$PORT" -U "${ROLE:-postgres}" \
    -d "$db" "$@" -c "$sql"
}

run postgres "CREATE DATABASE audit"
run audit "CREATE EXTENSION idempotency;
  CREATE ROLE auditor NOLOGIN;
  GRANT SELECT, INSERT, UPDATE ON idempotency.idempotency_keys,
    idempotency.processed_events, idempotency.outbox_events TO auditor;
  ALTER DATABASE audit SET pgaudit.role = 'auditor';
  CREATE ROLE app LOGIN;
  SELECT idempotency.grant_usage('app');
  CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS \$\$BEGIN RETURN NULL; END\$\$;" >/dev/null

# audited WHAT COMMAND TABLE SQL: run SQL in database audit, and count the
# object audit lines it logged: exactly one, of COMMAND on TABLE (or none
# when COMMAND is "none").  Prints SQL's output.
audited() {
  local what=$1 command=$2 table=$3 sql=$4 size out lines
  size=$(stat -c %s "$LOG")
  out=$(run audit "$sql") || fail "$what: $out"
  lines=$(tail -c +$((size + 1)) "$LOG" | grep 'AUDIT: OBJECT,' || true)
  if [ "$command" = none ]; then
    [ -z "$lines" ] || fail "$what: logged $lines"
  else
    [ "$(grep -c . <<<"$lines")" = 1 ] && grep -q ",WRITE,$command,TABLE,$table," <<<"$lines" ||
      fail "$what: expected one line for $command on $table, got: ${lines:-nothing}"
  fi
  echo "$what: ${lines:-nothing logged, as expected}" >&2
  echo "$out"
}
K=idempotency.idempotency_keys
calls() {	# calls PATH: claim, complete, mark, event, each audited once
  local path=$1 fence
  fence=$(audited "$path: claim" INSERT $K "SELECT fence FROM idempotency.claim('$path-1', '{}')")
  audited "$path: complete" UPDATE $K "SELECT idempotency.complete('$path-1', $fence, '{}')" >/dev/null
  audited "$path: process_once" INSERT idempotency.processed_events \
    "SELECT idempotency.process_once('c', '$path-e1')" >/dev/null
  audited "$path: enqueue_event" INSERT idempotency.outbox_events \
    "SELECT idempotency.enqueue_event('order', '$path', 'Paid', '{}')" >/dev/null
}
calls direct
if [ -n "$(run audit "SELECT 1 FROM pg_settings WHERE name = 'pgaudit.log_rows'")" ]; then
  OPTS="-c pgaudit.log_rows=on" calls direct-log-rows
else
  echo "this pgaudit has no pgaudit.log_rows: not tried" >&2
fi
# an application role: pgaudit logs neither path's bookkeeping, which runs
# as the extension owner
fence=$(ROLE=app audited "app: claim" none - "SELECT fence FROM idempotency.claim('app-1', '{}')")
ROLE=app audited "app: complete" none - "SELECT idempotency.complete('app-1', $fence, '{}')" >/dev/null

run audit "CREATE TRIGGER force_statement AFTER INSERT OR UPDATE ON $K
    FOR EACH STATEMENT EXECUTE FUNCTION noop();
  CREATE TRIGGER force_statement AFTER INSERT ON idempotency.processed_events
    FOR EACH STATEMENT EXECUTE FUNCTION noop();
  CREATE TRIGGER force_statement AFTER INSERT ON idempotency.outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION noop();"
calls statement
fence=$(ROLE=app audited "app, statement: claim" none - "SELECT fence FROM idempotency.claim('app-2', '{}')")
ROLE=app audited "app, statement: complete" none - "SELECT idempotency.complete('app-2', $fence, '{}')" >/dev/null
run audit "DROP TRIGGER force_statement ON $K;
  DROP TRIGGER force_statement ON idempotency.processed_events;
  DROP TRIGGER force_statement ON idempotency.outbox_events;"

# A mark made by a row trigger that the apply worker of a subscription (to
# another database of this cluster) fires: no statement runs there.
run postgres "CREATE DATABASE audit_pub"
run audit_pub "CREATE TABLE orders (id int PRIMARY KEY); CREATE PUBLICATION orders FOR TABLE orders"
# made here: CREATE SUBSCRIPTION would wait for its own database's
# transaction to end to make it
run audit_pub "SELECT pg_create_logical_replication_slot('orders', 'pgoutput')" >/dev/null
run audit "CREATE TABLE orders (id int PRIMARY KEY);
  CREATE FUNCTION mark_order() RETURNS trigger LANGUAGE plpgsql AS \$\$
  BEGIN
    IF idempotency.process_once('replica', NEW.id::text) THEN
      RAISE LOG 'order % marked', NEW.id;
    END IF;
    RETURN NULL;
  END \$\$;
  CREATE TRIGGER mark_order AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION mark_order();
  ALTER TABLE orders ENABLE ALWAYS TRIGGER mark_order;
  CREATE SUBSCRIPTION orders CONNECTION 'host=$CLUSTER port=$PORT dbname=audit_pub user=postgres'
    PUBLICATION orders WITH (create_slot = false, slot_name = 'orders', copy_data = false);"
size=$(stat -c %s "$LOG")
run audit_pub "INSERT INTO orders VALUES (1)"
for i in $(seq 60); do
  [ "$(run audit "SELECT count(*) FROM idempotency.processed_events WHERE consumer = 'replica'")" = 1 ] && break
  tail -c +$((size + 1)) "$LOG" | grep -q 'terminated by signal' && fail "the apply worker crashed"
  sleep 0.5
done
[ "$(run audit "SELECT count(*) FROM idempotency.processed_events WHERE consumer = 'replica'")" = 1 ] ||
  fail "the apply worker's trigger made no mark"
new=$(tail -c +$((size + 1)) "$LOG")
grep -q 'order 1 marked' <<<"$new" || fail "the trigger did not run in the apply worker"
grep -q ',WRITE,INSERT,TABLE,idempotency.processed_events,' <<<"$new" ||
  fail "the apply worker's mark was not logged"
! grep -qE 'terminated by signal|pgaudit stack is empty' <<<"$new" || fail "the apply worker crashed"
echo "apply worker: $(grep 'AUDIT: OBJECT,' <<<"$new")" >&2
run audit "DROP SUBSCRIPTION orders"

grep -qE 'terminated by signal|server process .* was terminated' "$LOG" && fail "a backend crashed"
echo "pgaudit: every write audited once on both paths"
