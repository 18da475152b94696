#!/usr/bin/env bash
# test/integration/logical_replication_cross_major.sh: a major upgrade with
# logical replication, PostgreSQL 15 to 18 (doc/operations.md, "Major
# upgrade with logical replication").
#
# A PostgreSQL 15 publisher on the host (the private install of test/run.sh,
# $IDEM_TEST_BIN, its own cluster on 127.0.0.1) and a PostgreSQL 18
# subscriber in the chroot of scripts/chroot.sh (/var/tmp/idempotency-
# chroots/pg18, built if missing), with the extension built against 18 in
# there (a private install, as test/run.sh makes).  The subscriber's schema
# is pg_dump --schema-only of the publisher's database: CREATE EXTENSION
# and an application table.  The publication is FOR ALL TABLES, the
# subscription copies what is there, then the publisher runs phased claims,
# a take-over after a lease, completions, fail, release, purge_expired_batch,
# tokens, outbox enqueue/claim/mark_published/mark_failed and inbox
# process_once; the subscriber must apply it all without an error and hold
# the same rows.  Then writes move to 18 as the documentation says (writes
# stopped, caught up, every sequence set past the publisher's, subscription
# dropped): completed keys replay, a key whose lease ran out is resumed with
# a larger fence than any 15 gave, outbox ids and lease tokens carry on.
#
# It holds the lock of the pg18 chroot while it runs, as test/matrix.sh
# does for a PostgreSQL 18 pass (which, in make test, comes after the 15
# pass that runs this script, so the two never wait for each other); the
# servers it starts do not inherit the lock.  Everything is stopped by PID
# and unmounted at the end.  Runs on the host's pass only: inside the 17/18
# chroots it is skipped (exit 0, with a message), and so it is where a
# chroot cannot be made at all (not root).  A chroot that cannot be built
# (no network, say) fails it.
#
# By hand: bash test/integration/logical_replication_cross_major.sh (as root;
# builds a private install of 15 when IDEM_TEST_BIN is not given).
set -euo pipefail
TOP=${IDEM_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
IDEM_TOP=$TOP
. "$TOP/scripts/lib.sh"
. "$TOP/scripts/chroot.sh"
OLD=15
NEW=18
t_start=$SECONDS
skip() { echo "SKIP logical replication $OLD -> $NEW: $*"; exit 0; }
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "==> logical replication $OLD -> $NEW: $* ($((SECONDS - t_start))s)"; }

[ -f /etc/idempotency-chroot ] &&
  skip "inside the $(cat /etc/idempotency-chroot) chroot; the host's run (PostgreSQL $OLD) runs it"
idem_runs_natively "$OLD" || skip "PostgreSQL $OLD is not this system's major"
[ "$(id -u)" -eq 0 ] || skip "needs root for the chroot of PostgreSQL $NEW"

WORK=$(mktemp -d "${IDEM_TEST_WORK:-/tmp}/logrep.XXXXXX")
chmod 755 "$WORK"
if [ -n "${IDEM_TEST_BIN:-}" ]; then
  BIN=$IDEM_TEST_BIN
else
  step "building against PostgreSQL $OLD"
  PG_MAJOR=$OLD
  idem_build || fail "build failed"
  BIN=$(idem_private_install "$WORK") || fail "install failed"
fi
chown -R postgres: "$WORK"
CH=$(idem_chroot_dir "$NEW")
IN=/logrep	# our directory inside the chroot
BIN_NEW=
PUB=$WORK/pub

# 1. the chroot, under its lock (held until this script exits)
step "taking the lock of $CH"
idem_chroot_lock "$NEW"
idem_chroot_ensure "$NEW" || fail "the chroot of PostgreSQL $NEW could not be built"

cleanup() {
  local rc=$?
  if [ -f "$PUB/data/postmaster.pid" ]; then
    runuser -u postgres -- "$BIN/pg_ctl" -D "$PUB/data" -m fast -w -s stop || true
  fi
  if [ -n "$BIN_NEW" ] && [ -f "$CH$IN/sub/data/postmaster.pid" ] && mountpoint -q "$CH/proc"; then
    idem_chroot_exec "$CH" runuser -u postgres -- "$BIN_NEW/pg_ctl" -D "$IN/sub/data" -m fast -w -s stop || true
  fi
  # whatever else still runs in the chroot (by PID), then the mounts
  idem_chroot_release "$CH"
  if [ "$rc" -eq 0 ]; then
    rm -rf "$WORK"
  else
    cp "$CH$IN/sub/server.log" "$WORK/subscriber.log" 2>/dev/null || true
    cp "$CH$IN/build.log" "$WORK/build-$NEW.log" 2>/dev/null || true
    echo "logical replication test files kept in $WORK" >&2
  fi
  rm -rf "${CH:?}$IN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
idem_chroot_mount "$CH" || fail "could not mount proc and /dev in $CH"
idem_chroot_sync_host "$CH"
# in_ch CMD...: CMD in the chroot, without the lock's descriptor (a server
# started there must not keep the chroot locked)
in_ch() { IDEM_CHROOT_ENV="PG_MAJOR" PG_MAJOR=$NEW idem_chroot_exec "$CH" "$@" {IDEM_CHROOT_LOCK_FD}>&-; }

# 2. the extension built and installed (privately) against 18 in there
step "building the extension against PostgreSQL $NEW in the chroot"
rm -rf "${CH:?}$IN"
mkdir -p "$CH$IN/src"
tar -C "$TOP" --exclude=.git --exclude=node_modules --exclude='*.o' --exclude='*.so' \
  --exclude='*.bc' --exclude=results --exclude=output_iso --exclude=tmp_check \
  --exclude='regression.*' --exclude=./test/expected --exclude="./sql/idempotency--1.0.sql" \
  -cf - . | tar -C "$CH$IN/src" -xf -
BIN_NEW=$(in_ch bash -c "IDEM_TOP=$IN/src; . $IN/src/scripts/lib.sh &&
  { idem_build >$IN/build.log 2>&1 || { cat $IN/build.log >&2; exit 1; }; } &&
  idem_private_install $IN") || fail "could not build or install the extension against PostgreSQL $NEW"
[ -x "$CH$BIN_NEW/postgres" ] || fail "no server in $CH$BIN_NEW"

# 3. two servers on 127.0.0.1: 15 here, 18 in the chroot
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 20000))
    [ "$p" != "${1:-}" ] && port_free "$p" && { echo "$p"; return 0; }
  done
  return 1
}
P_OLD=$(pick_port) || fail "no free port"
P_NEW=$(pick_port "$P_OLD") || fail "no free port"
conf() {	# conf PORT SOCKETDIR: the settings of both servers
  cat <<CONF
listen_addresses = '127.0.0.1'
port = $1
unix_socket_directories = '$2'
wal_level = logical
max_replication_slots = 8
max_wal_senders = 8
max_logical_replication_workers = 8
TimeZone = 'UTC'
log_line_prefix = '%m [%p] %d '
CONF
}
step "PostgreSQL $OLD on 127.0.0.1:$P_OLD, PostgreSQL $NEW on 127.0.0.1:$P_NEW"
mkdir -p "$PUB" && chown postgres: "$PUB"
runuser -u postgres -- "$BIN/initdb" -D "$PUB/data" -A trust -U postgres --no-sync -E UTF8 \
  --locale=C.UTF-8 >"$PUB/initdb.log" || fail "initdb $OLD failed"
conf "$P_OLD" "$PUB" >>"$PUB/data/postgresql.conf"
runuser -u postgres -- "$BIN/pg_ctl" -D "$PUB/data" -l "$PUB/server.log" -w -s start {IDEM_CHROOT_LOCK_FD}>&- ||
  { cat "$PUB/server.log"; fail "PostgreSQL $OLD did not start"; }
mkdir -p "$CH$IN/sub"
in_ch chown postgres: "$IN/sub"
in_ch runuser -u postgres -- "$BIN_NEW/initdb" -D "$IN/sub/data" -A trust -U postgres --no-sync -E UTF8 \
  --locale=C.UTF-8 >"$WORK/initdb-new.log" || { cat "$WORK/initdb-new.log"; fail "initdb $NEW failed"; }
conf "$P_NEW" "$IN/sub" >>"$CH$IN/sub/data/postgresql.conf"
in_ch runuser -u postgres -- "$BIN_NEW/pg_ctl" -D "$IN/sub/data" -l "$IN/sub/server.log" -w -s start ||
  { cat "$CH$IN/sub/server.log"; fail "PostgreSQL $NEW did not start"; }
SUBLOG=$CH$IN/sub/server.log

# psql of 15 for both, over TCP; times in UTC so that rows print alike
export PGTZ=UTC
unset PGHOST PGPORT PGDATABASE PGOPTIONS
q_at() {	# q_at PORT DB SQL: run SQL, print the unaligned tuples
  "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$1 dbname=$2 user=postgres" -c "$3"
}
old() { q_at "$P_OLD" app "$1"; }
new() { q_at "$P_NEW" app "$1"; }
[ "$(q_at "$P_NEW" postgres 'SHOW server_version_num')" -ge "${NEW}0000" ] || fail "the subscriber is not PostgreSQL $NEW"
passed=0
check() {	# check WHAT GOT WANT
  if [ "$2" = "$3" ]; then
    passed=$((passed + 1))
  else
    printf 'not ok: %s\n  got:  %s\n  want: %s\n' "$1" "$2" "$3"
    fail "$1"
  fi
}
check_gt() {	# check_gt WHAT GOT BOUND: GOT > BOUND
  [ -n "$2" ] && [ "$2" -gt "$3" ] || fail "$1: $2 is not above $3"
  passed=$((passed + 1))
}

# 4. the publisher's database, with rows before the subscription
q_at "$P_OLD" postgres 'CREATE DATABASE app'
old "CREATE EXTENSION idempotency;
CREATE TABLE ledger (key text PRIMARY KEY, fence bigint NOT NULL);
SELECT idempotency.complete('pre', fence, '{\"pre\": true}', 201) FROM idempotency.claim('pre', '{\"n\": 0}');
SELECT idempotency.issue_token(scope => 'pre');
SELECT idempotency.define_state_machine('order', '{\"PENDING\": [\"PAID\"]}');
SELECT idempotency.enqueue_event('order', 'o0', 'created', '{\"n\": 0}');
SELECT idempotency.process_once('billing', 'pre-e1');" >/dev/null
tables=$(old "SELECT c.oid::regclass::text
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
   AND d.deptype = 'e' AND c.relkind = 'r'
 ORDER BY c.oid::regclass::text COLLATE \"C\"")
tables="$tables public.ledger"
for t in idempotency_keys tokens state_machines outbox_events processed_events; do
  [[ " $(echo $tables) " == *" idempotency.$t "* ]] || fail "idempotency.$t is not a table of the extension"
done

# 5. the subscriber's schema from pg_dump --schema-only, then publication
# and subscription
step "schema by pg_dump --schema-only, publication FOR ALL TABLES, subscription"
q_at "$P_NEW" postgres 'CREATE DATABASE app'
"$BIN/pg_dump" --schema-only "host=127.0.0.1 port=$P_OLD dbname=app user=postgres" >"$WORK/schema.sql"
"$BIN/psql" -X -q -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$P_NEW dbname=app user=postgres" \
  -f "$WORK/schema.sql" >"$WORK/schema.log" 2>&1 || { cat "$WORK/schema.log"; fail "the schema did not load into $NEW"; }
check "the extension on $NEW" "$(new "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" \
  "$(old "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")"
check "no rows came with the schema" "$(new 'SELECT count(*) FROM idempotency.idempotency_keys')" 0
old "CREATE PUBLICATION idem_upgrade FOR ALL TABLES" >/dev/null
for t in $tables; do
  check "$t is published" "$(old "SELECT count(*) FROM pg_publication_tables
    WHERE pubname = 'idem_upgrade' AND schemaname || '.' || tablename = '$t'")" 1
done
new "CREATE SUBSCRIPTION idem_upgrade
  CONNECTION 'host=127.0.0.1 port=$P_OLD dbname=app user=postgres'
  PUBLICATION idem_upgrade WITH (copy_data = true)" >/dev/null

# catch_up WHAT: the subscriber has applied all the publisher wrote so far;
# the first apply error in its log fails the test (a stuck subscription
# retries forever)
catch_up() {
  local lsn err deadline=$((SECONDS + 180))
  lsn=$(old 'SELECT pg_current_wal_lsn()')
  while [ "$SECONDS" -lt "$deadline" ]; do
    err=$(grep -m1 'ERROR:' "$SUBLOG" || true)
    if [ -n "$err" ]; then
      grep -E 'ERROR|DETAIL|CONTEXT' "$SUBLOG" | sed 's/^[^]]*\] //' | sort -u | head -6
      fail "the subscriber on $NEW did not apply $1: ${err#*ERROR:  }"
    fi
    [ "$(new "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')")" = 0 ] &&
    [ "$(old "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'idem_upgrade'
        AND state = 'streaming' AND replay_lsn >= '$lsn'")" = 1 ] && { passed=$((passed + 1)); return 0; }
    sleep 0.1
  done
  fail "the subscriber on $NEW did not catch up with $1 in 180 s"
}
# same_rows WHAT: every published table has the same rows on both
same_rows() {
  local t rows
  for t in $tables; do
    rows="SELECT count(*) || ' ' || coalesce(md5(string_agg(r::text, E'\n' ORDER BY r::text COLLATE \"C\")), '')
      FROM $t r"
    check "$1: $t has the same rows on $NEW" "$(new "$rows")" "$(old "$rows")"
  done
}
catch_up 'the initial copy'
same_rows 'copy_data'

# 6. the workload on 15
step "workload on $OLD"
for i in $(seq 10); do
  scope=$([ $((i % 2)) -eq 0 ] && echo shop || true)
  fence[$i]=$(old "SELECT fence FROM idempotency.claim('k$i', '{\"n\": $i}', scope => '$scope')")
done
catch_up 'the claims'
same_rows 'claims'
for i in $(seq 10); do
  scope=$([ $((i % 2)) -eq 0 ] && echo shop || true)
  old "BEGIN;
INSERT INTO ledger VALUES ('$scope/k$i', ${fence[$i]});
SELECT idempotency.complete('k$i', ${fence[$i]}, '{\"n\": $i, \"ok\": true}', 201, scope => '$scope');
COMMIT;" >/dev/null
done
catch_up 'the completions'
same_rows 'completions'

f1=$(old "SELECT fence FROM idempotency.claim('takeover', '{\"n\": 0}', lease => '1 second')")
held=$(old "SELECT fence FROM idempotency.claim('held', '{\"n\": -1}', lease => '1 second')")
old "SELECT idempotency.complete('exp' || i, c.fence, '{\"gone\": true}', ttl => '1 second')
  FROM generate_series(1, 5) i, idempotency.claim('exp' || i) c;
SELECT idempotency.issue_token(ttl => '1 second') FROM generate_series(1, 2);
SELECT idempotency.process_once('billing', 'old-' || i) FROM generate_series(1, 3) i;
SELECT idempotency.enqueue_event('order', 'old', 'created', '{}') FROM generate_series(1, 2);" >/dev/null
read -r ids token <<<"$(old "SELECT string_agg(id::text, ','), max(lease_token) FROM idempotency.claim_events(2)" | tr '|' ' ')"
check "mark_published" "$(old "SELECT idempotency.mark_published('{$ids}', $token)")" 2
sleep 2
out=$(old "SELECT outcome || ' ' || fence FROM idempotency.claim('takeover', '{\"n\": 0}', lease => '1 minute')")
[[ $out == "resumed "* ]] || fail "the take-over: $out"
f2=${out#resumed }
check_gt "the take-over's fence" "$f2" "$f1"
old "SELECT idempotency.complete('takeover', $f1, '{}')" >/dev/null 2>&1 && fail "the first holder was not fenced"
old "SELECT idempotency.complete('takeover', $f2, '{\"taken\": \"over\"}')" >/dev/null
check "purge_expired_batch" "$(old "SET idempotency.outbox_retention = '1 second';
SET idempotency.processed_retention = '1 second';
SELECT string_agg(relation || ' ' || deleted, ', ' ORDER BY relation) FROM idempotency.purge_expired_batch()")" \
  'idempotency_keys 5, idempotency_keys.response_body 0, outbox_events 2, processed_events 4, tokens 2'
catch_up 'the take-over and the purge'
same_rows 'take-over and purge'

old "SELECT idempotency.checkpoint('ck', fence, 'charged', lease => '1 hour') FROM idempotency.claim('ck', '{\"n\": 1}');
SELECT idempotency.fail('fr', fence, '{\"error\": \"timeout\"}', 503, retryable => true) FROM idempotency.claim('fr', '{\"n\": 2}');
SELECT idempotency.fail('ff', fence, '{\"error\": \"declined\"}', 402, retryable => false) FROM idempotency.claim('ff', '{\"n\": 3}');
SELECT idempotency.release('rel', fence) FROM idempotency.claim('rel', '{\"n\": 4}');" >/dev/null
out=$(old "SELECT outcome || ' ' || fence FROM idempotency.claim('fr', '{\"n\": 2}')")
[[ $out == "resumed "* ]] || fail "a retryable failure: $out"
old "SELECT idempotency.complete('fr', ${out#resumed }, '{\"retried\": true}')" >/dev/null
token=$(old "SELECT idempotency.issue_token()")
spent=$(old "SELECT idempotency.issue_token()")
check "consume_token" "$(old "SELECT idempotency.consume_token('$spent')")" t
old "SELECT idempotency.define_state_machine('order', '{\"PENDING\": [\"PAID\"], \"PAID\": [\"SHIPPED\"]}');
SELECT idempotency.enqueue_event('order', 'o' || i, 'created', jsonb_build_object('n', i)) FROM generate_series(1, 4) i;
SELECT idempotency.enqueue_events(ARRAY['order', 'order'], ARRAY['o5', 'o5'],
  ARRAY['created', 'paid'], ARRAY['{\"n\": 5}', '{\"n\": 6}']::jsonb[]);" >/dev/null
read -r ids token_l <<<"$(old "SELECT string_agg(id::text, ',' ORDER BY id), max(lease_token) FROM idempotency.claim_events(10)" | tr '|' ' ')"
IFS=, read -r -a idv <<<"$ids"
[ "${#idv[@]}" -ge 6 ] || fail "claim_events leased ${#idv[@]} events"
check "mark_published" "$(old "SELECT idempotency.mark_published('{${idv[0]},${idv[1]},${idv[2]}}', $token_l)")" 3
rest=$(IFS=,; echo "${idv[*]:3}")
check "mark_failed" "$(old "SELECT idempotency.mark_failed('{$rest}', 'broker down', $token_l)")" $((${#idv[@]} - 3))
check "process_once" "$(old "SELECT idempotency.process_once('billing', 'e1'), idempotency.process_once('billing', 'e1')")" 't|f'
check "process_once of a batch" \
  "$(old "SELECT string_agg(x, ',') FROM idempotency.process_once('billing', ARRAY['e2', 'e3', 'e1']) x")" e2,e3
catch_up 'the rest of the workload'
same_rows 'the whole workload'
check "no apply or sync error" "$(new "SELECT apply_error_count + sync_error_count
  FROM pg_stat_subscription_stats WHERE subname = 'idem_upgrade'")" 0
grep -q 'publisher did not send replica identity' "$SUBLOG" && fail "the subscriber missed a replica identity"

# 7. the switch, as doc/operations.md says: writes stopped on 15 (none
# come here), caught up, every sequence set past 15's, subscription dropped
step "moving writes to $NEW"
check "the sequences of $NEW were not replicated" \
  "$(new "SELECT count(*) FROM pg_sequences WHERE schemaname = 'idempotency' AND last_value IS NOT NULL")" 0
catch_up 'the last writes'
old "SELECT format('SELECT pg_catalog.setval(%L, %s);',
              format('%I.%I', schemaname, sequencename), last_value + 1000)
  FROM pg_catalog.pg_sequences
 WHERE last_value IS NOT NULL" >"$WORK/setval.sql"
grep -q fence_seq "$WORK/setval.sql" || fail "no setval of fence_seq: $(cat "$WORK/setval.sql")"
"$BIN/psql" -X -q -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$P_NEW dbname=app user=postgres" \
  -f "$WORK/setval.sql" >/dev/null || fail "setval on $NEW failed"
new 'DROP SUBSCRIPTION idem_upgrade' >/dev/null
check "the subscription's slot is gone from $OLD" "$(old 'SELECT count(*) FROM pg_replication_slots')" 0
fence_last=$(old "SELECT last_value FROM pg_sequences WHERE schemaname = 'idempotency' AND sequencename = 'fence_seq'")
max_id=$(old 'SELECT max(id) FROM idempotency.outbox_events')
max_token=$(old 'SELECT max(lease_token) FROM idempotency.outbox_events')

# 8. on 18: answers replay, fences and the outbox carry on
answers="SELECT count(*) FROM idempotency.idempotency_keys
  WHERE status = 'completed' OR (status = 'failed' AND NOT retryable)"
check "completed or finally failed keys on $OLD" "$(old "$answers")" 14
check "every completed key replays its answer on $NEW" "$(new "
SELECT count(*) FILTER (WHERE c.outcome = 'replay' AND c.response_code = k.response_code
                          AND c.response_body = k.response_body)
  FROM idempotency.idempotency_keys k, idempotency.claim(k.idempotency_key, NULL, k.scope) c
 WHERE k.status = 'completed' OR (k.status = 'failed' AND NOT k.retryable)")" 14
out=$(new "SELECT outcome || ' ' || fence FROM idempotency.claim('held', '{\"n\": -1}')")
[[ $out == "resumed "* ]] || fail "the key left held on $OLD: $out"
check_gt "the fence of the key resumed on $NEW" "${out#resumed }" "$fence_last"
new "SELECT idempotency.complete('held', $held, '{}')" >/dev/null 2>&1 && fail "the holder from $OLD was not fenced"
out=$(new "SELECT outcome || ' ' || fence FROM idempotency.claim('after', '{\"n\": 1}')")
[[ $out == "claimed "* ]] || fail "a new key on $NEW: $out"
check_gt "a new key's fence on $NEW" "${out#claimed }" "$fence_last"
check "a key under a live lease" "$(new "SELECT c.outcome || ' ' || k.recovery_point
  FROM idempotency.claim('ck', '{\"n\": 1}') c, idempotency.lookup('ck') k")" 'in_progress charged'
check "an unused token" "$(new "SELECT idempotency.consume_token('$token')")" t
check "a consumed token" "$(new "SELECT idempotency.consume_token('$spent')")" f
check "the inbox" "$(new "SELECT idempotency.process_once('billing', 'e1'), idempotency.process_once('billing', 'e9')")" 'f|t'
check_gt "a new outbox id on $NEW" "$(new "SELECT idempotency.enqueue_event('order', 'o9', 'created', '{}')")" "$max_id"
check_gt "a lease token on $NEW" "$(new 'SELECT max(lease_token) FROM idempotency.claim_events(100)')" "$max_token"
check "the application's rows" "$(new 'SELECT count(*) FROM ledger')" 10

step "done"
echo "logical replication $OLD -> $NEW: $passed checks passed in $((SECONDS - t_start))s"
