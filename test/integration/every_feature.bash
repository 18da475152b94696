# test/integration/every_feature.bash: one session that uses every feature
# whose C caches follow the relcache (keys and their columns, execute,
# scopes, state machines and their trigger, transition, the statement and
# direct write paths, tokens, the inbox, purge_expired), for the tests that
# a backend must live through it (test/integration/relcache_slots.sh,
# test/citus/*.sh).  Sourced after lib.bash, not run.
#
#   EVERY_FEATURE_SETUP   SQL for a database with the extension: the role
#                         regress_relcache_scoped (scopes shop-1), a state
#                         machine, the tables orders and payments
#   every_feature_sql     prints the session's SQL (ending in purge_expired
#                         and a last answer)
#   every_feature_want    prints its answers, one a line, on a backend
#                         whose relcache callback slots suffice
#   every_feature_answers OUT: the answers in psql's output OUT (errors as
#                         "ERROR:  message"), to compare with the above
EVERY_FEATURE_SETUP="
   CREATE ROLE regress_relcache_scoped;
   SELECT idempotency.grant_usage('regress_relcache_scoped');
   SELECT idempotency.grant_scopes('regress_relcache_scoped', ARRAY['shop-1']);
   GRANT regress_relcache_scoped TO postgres;
   SELECT idempotency.define_state_machine('order', '{\"PENDING\": [\"PAID\"]}');
   CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING');
   INSERT INTO orders VALUES ('o1'), ('o2');
   CREATE TABLE payments (id text PRIMARY KEY);
   GRANT ALL ON orders, payments TO regress_relcache_scoped;"

every_feature_sql() {
  cat <<'SQL'
SELECT outcome FROM idempotency.claim('k1');
SELECT idempotency.complete('k1', 1, '{"ok": true}');
SELECT outcome FROM idempotency.claim('k1');
SELECT outcome FROM idempotency.execute('x1', '{}', 'INSERT INTO payments VALUES ($1) RETURNING to_jsonb(payments.*)', ARRAY['p1']);
SELECT idempotency.enforce_state_machine('orders', 'status', 'order');
UPDATE orders SET status = 'PAID' WHERE id = 'o1';
SELECT outcome FROM idempotency.transition('orders', 'id', 'o2', 'status', 'PENDING', 'PAID');
SET idempotency.direct_writes = off;
SELECT outcome FROM idempotency.claim('k2');
RESET idempotency.direct_writes;
SET ROLE regress_relcache_scoped;
SELECT outcome FROM idempotency.claim('k3', NULL, 'shop-1');
SELECT idempotency.claim('k3', NULL, 'shop-2');
RESET ROLE;
SELECT idempotency.issue_token() IS NOT NULL;
SELECT idempotency.process_once('relcache', 'e1');
SELECT 'alive';
CALL idempotency.purge_expired();
SELECT 'alive after purge';
SQL
}

every_feature_want() {
  cat <<'WANT'
claimed

replay
claimed

applied
claimed
claimed
ERROR:  permission denied for scope "shop-2"
t
t
alive
alive after purge
WANT
}

every_feature_answers() {
  grep -v '^DETAIL:\|^HINT:\|^LINE\|^ *^$\|^psql:.*NOTICE' <<<"$1" | sed 's/^psql:<stdin>:[0-9]*: //'
}
