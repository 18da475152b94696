#!/usr/bin/env bash
# test/integration/role_bindings.sh: role bindings survive pg_dump /
# pg_restore and a binary logical subscription by the role they NAME
# (doc/reference.md, "Threat model"; doc/operations.md).
#
# Two clusters, A and B, whose roles are created in another order, so that
# an OID of A names another role in B: the first role created in A (a
# holder that A then drops) has the OID of the first role created in B (a
# stranger).
#
# 1. pg_dump of a database of A, where a key is held by the dropped role
#    (its regrole dumps as a bare OID) and one by a live role, restored
#    into B: the stranger, who has the dropped role's OID there, is refused
#    (42501) on the dropped role's key; the live holder completes its own;
#    a superuser releases the dropped role's key.
# 2. A logical subscription WITH (binary = true) from A to B: after the
#    initial copy A restricts two tenants to scopes, a role claims a key,
#    a tenant stores an answer and a relay leases events; the rows reach B
#    with A's OIDs.  After the switch of doc/operations.md (sequences set
#    past A's, the subscription dropped), on B the holder completes its key
#    and the role that has its OID there is refused, the relay marks its
#    events and others are refused, and the tenant restricted to scope c
#    cannot read scope s, nor see it in stats, while the tenant of s can.
#
# It runs on both editions in turn: the C edition (the private install of
# test/run.sh, $IDEM_TEST_BIN, or one built here), then the portable
# edition's plain script (test/portable/lib.sh), installed by a role that
# is no superuser; ROLE_BINDINGS_EDITION=c or portable runs one.  The clusters listen on unix sockets
# only, in a work directory of their own; ROLE_BINDINGS_PORT (default
# 5643) and the next port name their sockets.  Both are stopped by PID
# (pg_ctl) at the end.
. "$(dirname "$0")/lib.bash"
# both editions, each in a run of its own, unless one is named
if [ -z "${ROLE_BINDINGS_EDITION:-}" ]; then
  ROLE_BINDINGS_EDITION=c bash "$0" && ROLE_BINDINGS_EDITION=portable bash "$0"
  exit
fi
EDITION=$ROLE_BINDINGS_EDITION
fail() { echo "FAIL ($EDITION): $*"; exit 1; }
step() { echo "==> role bindings ($EDITION): $*"; }

work_dir role_bindings
case $EDITION in
c)
  if [ -z "$BIN" ]; then
    idem_build || fail "build failed"
    BIN=$(idem_private_install "$WORK") || fail "install failed"
  fi
  ;;
portable)
  . "$TOP/test/portable/lib.sh"
  BIN=$(portable_server_copy "$WORK") || fail "no server copy"
  portable_build_edition "$WORK" || fail "the portable edition does not build"
  ;;
*) fail "ROLE_BINDINGS_EDITION must be c or portable" ;;
esac
PA=${ROLE_BINDINGS_PORT:-5643}
PB=$((PA + 1))
A=$WORK/a
B=$WORK/b
at_exit 'idem_stop_cluster "$BIN" "$A"; idem_stop_cluster "$BIN" "$B"'
idem_start_cluster "$BIN" "$A" "$PA" "" ""
idem_start_cluster "$BIN" "$B" "$PB" "" ""

# q a|b DB [psql args]: as postgres on A or B
q() {
  local dir=$A port=$PA
  [ "$1" = b ] && dir=$B port=$PB
  shift
  local db=$1
  shift
  runuser -u postgres -- env PGOPTIONS='-c client_min_messages=warning' \
    "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d "$db" "$@"
}
# as a|b DB ROLE SQL: SQL run as ROLE
as() { q "$1" "$2" -c "SET ROLE $3" -c "$4"; }
# refused a|b DB ROLE SQL: SQL run as ROLE fails with 42501
refused() {
  local out
  if out=$(q "$1" "$2" -v VERBOSITY=verbose -c "SET ROLE $3" -c "$4" 2>&1); then
    fail "$3 was not refused on $1: $4"
  fi
  grep -q 'ERROR:  42501' <<<"$out" || fail "$3 on $1: $4: $out"
}
same() { [ "$2" = "$3" ] || fail "$1: expected [$2], got [$3]"; }

# The roles first, before anything else takes an OID: in A the holder that
# A drops comes first, in B the stranger; the others in another order.
OWNER=regress_rb_owner
q a postgres -c "CREATE ROLE $OWNER LOGIN CREATEDB;
  CREATE ROLE regress_rb_dropped; CREATE ROLE regress_rb_stranger; CREATE ROLE regress_rb_app;
  CREATE ROLE regress_rb_tenant_c; CREATE ROLE regress_rb_tenant_s; CREATE ROLE regress_rb_relay"
q b postgres -c "CREATE ROLE $OWNER LOGIN CREATEDB;
  CREATE ROLE regress_rb_stranger; CREATE ROLE regress_rb_tenant_s; CREATE ROLE regress_rb_tenant_c;
  CREATE ROLE regress_rb_relay; CREATE ROLE regress_rb_app"
same "the dropped holder's OID in A is the stranger's in B" \
  "$(q a postgres -c "SELECT 'regress_rb_dropped'::regrole::oid")" \
  "$(q b postgres -c "SELECT 'regress_rb_stranger'::regrole::oid")"

# install SIDE DB: a new database with the extension, each role given grant_usage
install() {
  local side=$1 db=$2 r
  q "$side" postgres -c "CREATE DATABASE $db OWNER $OWNER"
  if [ "$EDITION" = c ]; then
    q "$side" "$db" -c "CREATE EXTENSION idempotency"
  else
    local dir=$A port=$PA
    [ "$side" = b ] && dir=$B port=$PB
    PATH=$BIN:$PATH PGHOST=$dir PGPORT=$port portable_install plain "$db" "$OWNER"
  fi
  for r in $(q "$side" postgres -c "SELECT rolname FROM pg_roles WHERE rolname LIKE 'regress_rb_%' AND rolname <> '$OWNER'"); do
    q "$side" "$db" -c "SELECT idempotency.grant_usage('$r')" >/dev/null
  done
}

step "pg_dump of a dropped holder's key, pg_restore where a stranger has its OID"
install a rbdump
f_dropped=$(as a rbdump regress_rb_dropped "SELECT fence FROM idempotency.claim('k-dropped', NULL, 'x')")
f_app=$(as a rbdump regress_rb_app "SELECT fence FROM idempotency.claim('k-app', NULL, 'x')")
q a rbdump -c "DROP OWNED BY regress_rb_dropped" -c "DROP ROLE regress_rb_dropped"
runuser -u postgres -- "$BIN/pg_dump" -Fc -h "$A" -p "$PA" -U postgres -d rbdump -f "$WORK/rbdump.dump"
q b postgres -c "CREATE DATABASE rbdump OWNER $OWNER"
runuser -u postgres -- "$BIN/pg_restore" -h "$B" -p "$PB" -U postgres -d rbdump --exit-on-error "$WORK/rbdump.dump"
same "the restored key's OID names the stranger" "regress_rb_stranger|regress_rb_dropped" \
  "$(q b rbdump -c "SELECT holder_role, holder_role_name FROM idempotency.idempotency_keys WHERE idempotency_key = 'k-dropped'")"
refused b rbdump regress_rb_stranger "SELECT idempotency.complete('k-dropped', $f_dropped, '{\"forged\": true}', scope => 'x')"
refused b rbdump regress_rb_stranger "SELECT idempotency.release('k-dropped', $f_dropped, 'x')"
as b rbdump regress_rb_app "SELECT idempotency.complete('k-app', $f_app, '{\"by\": \"app\"}', scope => 'x')" >/dev/null
q b rbdump -c "SELECT idempotency.release('k-dropped', $f_dropped, 'x')" >/dev/null
same "after the restore" "k-app|completed" \
  "$(q b rbdump -c "SELECT idempotency_key, status FROM idempotency.idempotency_keys ORDER BY 1")"

step "a binary logical subscription to B, then the switch"
install a rbpub
q b postgres -c "CREATE DATABASE rbpub OWNER $OWNER"
runuser -u postgres -- "$BIN/pg_dump" --schema-only -h "$A" -p "$PA" -U postgres -d rbpub |
  q b rbpub >/dev/null
q a rbpub -c "CREATE PUBLICATION rb FOR TABLES IN SCHEMA idempotency"
q b rbpub -c "CREATE SUBSCRIPTION rb CONNECTION 'host=$A port=$PA dbname=rbpub user=postgres'
  PUBLICATION rb WITH (binary = true)"
# caught_up SQL EXPECTED: wait until SQL on B returns EXPECTED
caught_up() {
  local i
  for i in $(seq 300); do
    [ "$(q b rbpub -c "$1")" = "$2" ] && return 0
    sleep 0.2
  done
  fail "B did not catch up: $1 is $(q b rbpub -c "$1"), not $2"
}
caught_up "SELECT count(*) FILTER (WHERE srsubstate <> 'r') FROM pg_subscription_rel" 0
# what A writes after the initial copy (applied row by row, in binary)
q a rbpub -c "SELECT idempotency.grant_scopes('regress_rb_tenant_c', ARRAY['c']),
                     idempotency.grant_scopes('regress_rb_tenant_s', ARRAY['s'])" >/dev/null
f_app=$(as a rbpub regress_rb_app "SELECT fence FROM idempotency.claim('k-app', NULL, 'x')")
f_s=$(as a rbpub regress_rb_tenant_s "SELECT fence FROM idempotency.claim('k-s', NULL, 's')")
as a rbpub regress_rb_tenant_s "SELECT idempotency.complete('k-s', $f_s, '{\"secret\": true}', scope => 's')" >/dev/null
q a rbpub -c "SELECT idempotency.enqueue_event('rb', 'e' || i, 'made', '{}') FROM generate_series(1, 2) i" >/dev/null
token=$(as a rbpub regress_rb_relay "SELECT max(lease_token) FROM idempotency.claim_events(10)")
ids=$(q a rbpub -c "SELECT string_agg(id::text, ',' ORDER BY id) FROM idempotency.outbox_events")
caught_up "SELECT (SELECT count(*) FROM idempotency.scope_grants) || ' ' ||
  (SELECT count(*) FROM idempotency.idempotency_keys WHERE status = 'completed') || ' ' ||
  (SELECT count(*) FROM idempotency.outbox_events WHERE lease_token IS NOT NULL)" "2 1 2"
# the switch (doc/operations.md, step 6): sequences past A's, no subscription
q a rbpub -c "SELECT format('SELECT pg_catalog.setval(%L, %s);', format('%I.%I', schemaname, sequencename), last_value + 1000)
                FROM pg_catalog.pg_sequences WHERE last_value IS NOT NULL" | q b rbpub >/dev/null
q b rbpub -c "DROP SUBSCRIPTION rb"
# the OIDs did move: the regrole columns name other roles on B
same "OIDs on B" "regress_rb_tenant_c|regress_rb_app" \
  "$(q b rbpub -c "SELECT holder_role, holder_role_name FROM idempotency.idempotency_keys WHERE idempotency_key = 'k-app'")"

step "on B, after the switch"
refused b rbpub regress_rb_tenant_c "SELECT idempotency.complete('k-app', $f_app, '{\"forged\": true}', scope => 'x')"
refused b rbpub regress_rb_stranger "SELECT idempotency.release('k-app', $f_app, 'x')"
as b rbpub regress_rb_app "SELECT idempotency.complete('k-app', $f_app, '{\"by\": \"app\"}', scope => 'x')" >/dev/null
refused b rbpub regress_rb_tenant_c "SELECT idempotency.mark_published(ARRAY[$ids], $token)"
refused b rbpub regress_rb_app "SELECT idempotency.mark_failed(ARRAY[$ids], 'forged', $token)"
same "the relay marks its events" 2 \
  "$(as b rbpub regress_rb_relay "SELECT idempotency.mark_published(ARRAY[$ids], $token)")"
refused b rbpub regress_rb_tenant_c "SELECT idempotency.lookup('k-s', 's')"
refused b rbpub regress_rb_tenant_c "SELECT idempotency.claim('k-s', NULL, 's')"
same "tenant c claims in c" claimed \
  "$(as b rbpub regress_rb_tenant_c "SELECT outcome FROM idempotency.claim('k-c', NULL, 'c')")"
same "tenant c sees its scope only" c \
  "$(as b rbpub regress_rb_tenant_c "SELECT string_agg(scope, ',' ORDER BY scope) FROM idempotency.stats WHERE scope IS NOT NULL")"
same "tenant s reads its answer" '{"secret": true}' \
  "$(as b rbpub regress_rb_tenant_s "SELECT response_body FROM idempotency.lookup('k-s', 's')")"
refused b rbpub regress_rb_tenant_s "SELECT idempotency.lookup('k-c', 'c')"
same "restrictions by name on B" "regress_rb_tenant_c|c
regress_rb_tenant_s|s" \
  "$(q b rbpub -c "SELECT role_name, scope FROM idempotency.scope_grants ORDER BY 1")"
echo "ok role bindings ($EDITION): dump/restore and binary subscription"
