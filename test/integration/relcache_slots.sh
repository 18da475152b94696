#!/usr/bin/env bash
# test/integration/relcache_slots.sh: the library takes one relcache
# callback of the ten a backend has, whatever it does.  Other libraries
# loaded beside it take some (Citus five), and a backend that asks for an
# eleventh ends with FATAL.  Builds test/modules/relcache_hog (PGXS) into
# the private install of test/run.sh ($IDEM_TEST_BIN), finds how many
# slots a fresh session of the test cluster has free, takes all but one,
# and then uses every feature whose C caches follow the relcache (keys and
# their columns, execute, scopes, state machines and their trigger,
# transition, the statement and direct write paths, purge_expired): the
# session must live to answer, where the library used to ask for six.
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
work_dir relcache_slots
DB=regress_relcache_slots
at_exit 'q postgres "DROP DATABASE IF EXISTS $DB"; q postgres "DROP ROLE IF EXISTS regress_relcache_scoped"'
install_test_module relcache_hog

q postgres "DROP DATABASE IF EXISTS $DB"
q postgres "DROP ROLE IF EXISTS regress_relcache_scoped"
q postgres "CREATE DATABASE $DB"
q "$DB" "CREATE EXTENSION idempotency;
   CREATE FUNCTION relcache_hog_take(int) RETURNS int AS 'relcache_hog' LANGUAGE C STRICT;
   CREATE ROLE regress_relcache_scoped;
   SELECT idempotency.grant_usage('regress_relcache_scoped');
   SELECT idempotency.grant_scopes('regress_relcache_scoped', ARRAY['shop-1']);
   GRANT regress_relcache_scoped TO postgres;
   SELECT idempotency.define_state_machine('order', '{\"PENDING\": [\"PAID\"]}');
   CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING');
   INSERT INTO orders VALUES ('o1'), ('o2');
   CREATE TABLE payments (id text PRIMARY KEY);
   GRANT ALL ON orders, payments TO regress_relcache_scoped;" >/dev/null

# the slots a session has free once core's own lazily registered
# callbacks (the type cache's) are in: the most it can take and live
warm="SELECT ROW(1, 'a') = ROW(1, 'a'), count(to_jsonb(o)) FROM orders o"
free=0
for n in 10 9 8 7 6 5 4 3 2 1; do
  if q "$DB" "$warm; SELECT relcache_hog_take($n)" >/dev/null 2>&1; then free=$n; break; fi
done
[ "$free" -ge 2 ] || fail "a fresh session has $free relcache callback slots free"
echo "a fresh session has $free relcache callback slots free; taking $((free - 1))"

every_feature="
$warm;
SELECT relcache_hog_take($((free - 1)));
SELECT outcome FROM idempotency.claim('k1');
SELECT idempotency.complete('k1', 1, '{\"ok\": true}');
SELECT outcome FROM idempotency.claim('k1');
SELECT outcome FROM idempotency.execute('x1', '{}', 'INSERT INTO payments VALUES (\$1) RETURNING to_jsonb(payments.*)', ARRAY['p1']);
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
"
out=$(as_pg "$BIN/psql" -X -q -At -d "$DB" -f - <<<"$every_feature
CALL idempotency.purge_expired();
SELECT 'alive after purge';" 2>&1) || true
echo "$out"
grep -q 'FATAL' <<<"$out" && fail "the session ended with FATAL"
# every answer as on a backend with all its slots free
want="t|2
$((free - 1))
claimed

replay
claimed

applied
claimed
claimed
ERROR:  permission denied for scope \"shop-2\"
t
t
alive
alive after purge"
got=$(grep -v '^DETAIL:\|^LINE\|^ *^$\|^psql:.*NOTICE' <<<"$out" | sed 's/^psql:<stdin>:[0-9]*: //')
[ "$got" = "$want" ] || { diff <(echo "$want") <(echo "$got") || true; fail "answers differ"; }
echo "ok: every feature ran with one relcache callback slot left"
