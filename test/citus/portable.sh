#!/usr/bin/env bash
# test/citus/portable.sh: the portable edition (doc/portable.md, its plain
# script) on a Citus coordinator and two workers, its tables distributed as
# test/citus/fail_closed.sh distributes the C edition's.  Its bodies read
# and write through SQL statements, which Citus's planner routes to the
# shards, so nothing reaches a shell; what Citus cannot plan fails, and
# writes nothing.  Measured with Citus 13.2.2 (doc/scaling.md, "Citus"):
#   - claim and execute: 42883 (the whole-row argument of the replay check
#     does not exist on the shard's row type), complete: 0A000 (Citus
#     refuses the non-immutable function in its CASE), claim_events and
#     purge_expired: 0A000 (an UPDATE with a STABLE function of a column, a
#     FOR UPDATE across shards) — so keys, execute and the relays are not
#     served, and say so;
#   - process_once, enqueue_event and tokens: routed by their distribution
#     columns, single-node answers on every node;
#   - scopes, scope_grants a reference table: 42501 outside a role's
#     scopes, on every node.
# Every shell stays empty on every node.
. "$(dirname "$0")/../integration/lib.bash"
. "$(dirname "$0")/citus.bash"
. "$IDEM_TOP/test/portable/lib.sh"
work_dir citus_portable
CITUS_PRELOAD=citus CITUS_EXTENSIONS=citus citus_start
portable_build_edition "$WORK" || fail "scripts/portable.py build"

# (Citus warns of each function and view that depends on a local table:
# those are not created on the workers)
runuser -u postgres -- env PGOPTIONS='-c client_min_messages=error' \
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${CITUS_PORTS[coord]}" \
  -U postgres -d "$CITUS_DB" -f "$PORTABLE_EDITION/idempotency--$PORTABLE_VERSION.sql" >/dev/null ||
  fail "the plain script on the coordinator"
cq coord "CREATE ROLE regress_citus_scoped;
  SELECT idempotency.grant_usage('regress_citus_scoped');
  SELECT idempotency.grant_scopes('regress_citus_scoped', ARRAY['shop-1'])" >/dev/null
[ "$(cq coord "SELECT outcome FROM idempotency.claim('before')")" = claimed ] ||
  fail "a claim with the tables local"
fence=$(cq coord "SELECT fence FROM idempotency.lookup('before')")

cq coord "SET citus.enable_unsafe_triggers = on;
  SELECT create_distributed_table('idempotency.idempotency_keys', 'key_hash');
  SELECT create_distributed_table('idempotency.processed_events', 'consumer');
  SELECT create_distributed_table('idempotency.outbox_events', 'id');
  SELECT create_distributed_table('idempotency.tokens', 'token');
  SELECT create_reference_table('idempotency.scope_grants')" >/dev/null 2>&1 ||
  fail "distributing the portable edition's tables"
cq coord "SELECT truncate_local_data_after_distributing_table(t)
  FROM unnest(ARRAY['idempotency.idempotency_keys', 'idempotency.processed_events',
                    'idempotency.outbox_events', 'idempotency.tokens',
                    'idempotency.scope_grants']::regclass[]) t" >/dev/null

# what Citus cannot plan: refused on every node, as measured
declare -A refused=(
  [claim]="42883|SELECT idempotency.claim('k-new')"
  [execute]="42883|SELECT idempotency.execute('x-new', '{}', 'SELECT 1', ARRAY[]::text[])"
  [complete]="0A000|SELECT idempotency.complete('before', $fence, '{}')"
  [claim_events]="0A000|SELECT idempotency.claim_events(10)"
  [purge_expired]="0A000|CALL idempotency.purge_expired()"
)
# (on the workers, the functions that take a row of a table that was local
# when the script ran were not created by Citus: 42883 there for any)
for node in coord w1 w2; do
  for name in "${!refused[@]}"; do
    want=${refused[$name]%%|*}
    state=$(cq_state "$node" "${refused[$name]#*|}")
    [ "$state" = "$want" ] || { [ "$node" != coord ] && [ "$state" = 42883 ]; } ||
      fail "$name on $node: $state, not $want as measured"
  done
done
echo "ok: claim, execute, complete, claim_events and purge_expired are refused on every node"

# what Citus routes: single-node answers, whichever node is called
[ "$(cq coord "SELECT idempotency.process_once('citus', 'e1')")" = t ] || fail "process_once, first"
[ "$(cq w1 "SELECT idempotency.process_once('citus', 'e1')")" = f ] || fail "process_once ran twice"
[ "$(cq w2 "SELECT idempotency.process_once('citus', 'e1')")" = f ] || fail "process_once ran twice"
cq coord "SELECT idempotency.enqueue_event('order', 'o1', 'created', '{}')" >/dev/null ||
  fail "enqueue_event"
[ "$(cq w1 "SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_id = 'o1'")" = 1 ] ||
  fail "the enqueued event is not in its shard"
token=$(cq coord "SELECT idempotency.issue_token()")
[ "$(cq w2 "SELECT idempotency.consume_token('$token')")" = t ] || fail "a fresh token was not consumed"
[ "$(cq w1 "SELECT idempotency.consume_token('$token')")" = f ] || fail "a token was consumed twice"
echo "ok: process_once, enqueue_event and tokens give single-node answers on every node"

for node in coord w1 w2; do
  state=$(cq_state "$node" "SET ROLE regress_citus_scoped; SELECT idempotency.issue_token('shop-2')")
  [ "$state" = 42501 ] || fail "a restricted role's token outside its scopes on $node: $state, not 42501"
  state=$(cq_state "$node" "SET ROLE regress_citus_scoped; SELECT idempotency.issue_token('shop-1')")
  [ "$state" = ok ] || fail "a restricted role's token inside its scopes on $node: $state"
done
echo "ok: scope restrictions hold on every node (scope_grants a reference table)"

citus_assert_shells_empty
[ "$(cq coord "SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key IN ('k-new', 'x-new')")" = 0 ] ||
  fail "a refused call left a key"
[ "$(cq coord "SELECT status FROM idempotency.idempotency_keys WHERE idempotency_key = 'before'")" = processing ] ||
  fail "the refused complete changed the key"
echo "ok: no shell holds a row on any node; the refused calls wrote nothing"
