#!/usr/bin/env bash
# test/citus/fail_closed.sh: on a Citus coordinator and its workers, the C
# edition refuses (0A000) every call that would read or write one of its
# tables that Citus manages, where that relation is an empty shell: a claim
# would find no key there and write a second one that no query through
# Citus sees (doc/scaling.md, "Citus").
#
# First, with the extension's tables local and both libraries preloaded, a
# session that uses every feature gets the single-node answers and lives
# (Citus takes five of a backend's ten relcache callbacks).  Then, in one
# session, a claim before idempotency_keys is distributed by key_hash and a
# claim after (the answer the library caches is forgotten).  Then
# processed_events, outbox_events and tokens are distributed and
# scope_grants made a reference table, and every call that reads or writes
# them on this node raises 0A000 on the coordinator and on both workers
# (claim by both write paths, execute, process_once, enqueue_event, a
# restricted role's scope check), no shell holds a row on any node, tokens
# (read and written by statements, which Citus routes) still work, and the
# every-feature session ends alive.
. "$(dirname "$0")/../integration/lib.bash"
. "$(dirname "$0")/citus.bash"
. "$IDEM_TOP/test/integration/every_feature.bash"
work_dir citus_fail_closed
citus_start

# psql -f on NODE: every statement on its own, errors with their SQLSTATE
session() {
  runuser -u postgres -- "$BIN/psql" -X -q -At -v VERBOSITY=verbose -h 127.0.0.1 \
    -p "${CITUS_PORTS[$1]}" -U postgres -d "$CITUS_DB" -f - 2>&1 || true
}

cq coord "$EVERY_FEATURE_SETUP" >/dev/null
# the role's grants on the workers too, so that its calls there reach the
# scope check (Citus creates the role there and grants the schema, not the
# functions; a grant on a worker is refused unless not propagated)
for node in w1 w2; do
  cq "$node" "SET citus.enable_ddl_propagation = off;
    SELECT idempotency.grant_usage('regress_relcache_scoped')" >/dev/null
done
out=$(every_feature_sql | runuser -u postgres -- "$BIN/psql" -X -q -At -h 127.0.0.1 \
  -p "${CITUS_PORTS[coord]}" -U postgres -d "$CITUS_DB" -f - 2>&1) || true
echo "$out"
grep -q FATAL <<<"$out" && fail "the every-feature session ended with FATAL (Citus loaded, tables local)"
[ "$(every_feature_answers "$out")" = "$(every_feature_want)" ] ||
  fail "the every-feature session's answers differ from a single node's"
echo "ok: every feature, tables local, Citus loaded: single-node answers, no FATAL"

# a session that knows the table as local, then sees it distributed
out=$(session coord <<'SQL'
SELECT outcome FROM idempotency.claim('before');
SET citus.enable_unsafe_triggers = on;
SELECT create_distributed_table('idempotency.idempotency_keys', 'key_hash');
SELECT truncate_local_data_after_distributing_table('idempotency.idempotency_keys');
SELECT outcome FROM idempotency.claim('after');
SQL
)
echo "$out"
[ "$(grep -E '^claimed$|ERROR' <<<"$out")" = "claimed
psql:<stdin>:5: ERROR:  0A000: relation \"idempotency.idempotency_keys\" is a Citus table" ] ||
  fail "a claim in the session that saw idempotency_keys distributed was not refused with 0A000"
echo "ok: the answer cached before the table was distributed is forgotten"

out=$(session coord <<'SQL'
SET citus.enable_unsafe_triggers = on;
SELECT create_distributed_table('idempotency.processed_events', 'consumer');
SELECT create_distributed_table('idempotency.outbox_events', 'id');
SELECT create_distributed_table('idempotency.tokens', 'token');
SELECT create_reference_table('idempotency.scope_grants');
SELECT truncate_local_data_after_distributing_table(t)
  FROM unnest(ARRAY['idempotency.processed_events', 'idempotency.outbox_events',
                    'idempotency.tokens', 'idempotency.scope_grants']::regclass[]) t;
SQL
)
grep ERROR <<<"$out" && fail "distributing the tables: $out"
[ "$(cq coord "SELECT string_agg(logicalrelid::text || ':' || partmethod::text, ' ' ORDER BY logicalrelid::text)
      FROM pg_dist_partition WHERE logicalrelid::text LIKE 'idempotency.%'")" = \
  "idempotency.idempotency_keys:h idempotency.outbox_events:h idempotency.processed_events:h idempotency.scope_grants:n idempotency.tokens:h" ] ||
  fail "the tables are not distributed as the test means"

# every call that reads or writes a Citus table on this node: 0A000, on
# every node
declare -A calls=(
  [claim]="SELECT idempotency.claim('k-new')"
  [claim_statements]="SET idempotency.direct_writes = off; SELECT idempotency.claim('k-new')"
  [claim_replay]="SELECT idempotency.claim('k1')"
  [execute]="SELECT idempotency.execute('x-new', '{}', 'INSERT INTO payments VALUES (\$1) RETURNING to_jsonb(payments.*)', ARRAY['p-new'])"
  [process_once]="SELECT idempotency.process_once('citus', 'e-new')"
  [enqueue_event]="SELECT idempotency.enqueue_event('order', 'o1', 'created', '{}')"
  [scoped_token]="SET ROLE regress_relcache_scoped; SELECT idempotency.issue_token('shop-2')"
  [scoped_claim]="SET ROLE regress_relcache_scoped; SELECT idempotency.claim('k-new', NULL, 'shop-2')"
)
for node in coord w1 w2; do
  for name in "${!calls[@]}"; do
    # payments is the coordinator's table; the workers have none
    [ "$name" = execute ] && [ "$node" != coord ] && continue
    state=$(cq_state "$node" "${calls[$name]}")
    [ "$state" = 0A000 ] || fail "$name on $node: $state, not 0A000"
  done
done
echo "ok: every call that would read or write a shell is refused with 0A000 on every node"

# tokens: statements, which Citus routes to the token's shard
token=$(cq coord "SELECT idempotency.issue_token()")
[ "$(cq coord "SELECT idempotency.consume_token('$token')")" = t ] || fail "a fresh token was not consumed"
[ "$(cq w1 "SELECT idempotency.consume_token('$token')")" = f ] || fail "a token was consumed twice"
[ "$(cq coord "SELECT count(*) FROM idempotency.tokens WHERE token = '$token' AND consumed_at IS NOT NULL")" = 1 ] ||
  fail "the consumed token is not in its shard"
echo "ok: tokens work through Citus"

# nothing was written anywhere but in shards: every shell is empty on every
# node (no page ever written since the local data was truncated), and no
# refused call left a key, an event or a payment that a query through
# Citus sees
citus_assert_shells_empty
[ "$(cq coord "SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key IN ('k-new', 'after')")" = 0 ] ||
  fail "a refused claim left a key"
[ "$(cq coord "SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key IN ('k1', 'k2', 'k3', 'before')")" = 4 ] ||
  fail "the keys claimed before distributing are not in the shards"
[ "$(cq coord "SELECT (SELECT count(*) FROM idempotency.processed_events WHERE event_id = 'e-new')
                    + (SELECT count(*) FROM idempotency.outbox_events)
                    + (SELECT count(*) FROM payments WHERE id = 'p-new')")" = 0 ] ||
  fail "a refused call left an event or a payment"
echo "ok: no shell holds a row on any node; the refused calls wrote nothing"

# the every-feature session again, its tables distributed: refused calls,
# a live session
out=$(every_feature_sql | session coord)
echo "$out"
grep -q FATAL <<<"$out" && fail "the every-feature session ended with FATAL (tables distributed)"
[ "$(grep -c 'ERROR:  0A000: relation "idempotency\.[a-z_]*" is a Citus table' <<<"$out")" -ge 6 ] ||
  fail "the every-feature session's calls were not refused"
[ "$(tail -1 <<<"$out")" = 'alive after purge' ] || fail "the every-feature session did not answer to the end"
echo "ok: every feature, tables distributed: refused, no FATAL"
