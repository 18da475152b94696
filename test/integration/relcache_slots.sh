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
. "$(dirname "$0")/every_feature.bash"
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
   $EVERY_FEATURE_SETUP" >/dev/null

# the slots a session has free once core's own lazily registered
# callbacks (the type cache's) are in: the most it can take and live
warm="SELECT ROW(1, 'a') = ROW(1, 'a'), count(to_jsonb(o)) FROM orders o"
free=0
for n in 10 9 8 7 6 5 4 3 2 1; do
  if q "$DB" "$warm; SELECT relcache_hog_take($n)" >/dev/null 2>&1; then free=$n; break; fi
done
[ "$free" -ge 2 ] || fail "a fresh session has $free relcache callback slots free"
echo "a fresh session has $free relcache callback slots free; taking $((free - 1))"

out=$(as_pg "$BIN/psql" -X -q -At -d "$DB" -f - <<<"$warm;
SELECT relcache_hog_take($((free - 1)));
$(every_feature_sql)" 2>&1) || true
echo "$out"
grep -q 'FATAL' <<<"$out" && fail "the session ended with FATAL"
# every answer as on a backend with all its slots free
want="t|2
$((free - 1))
$(every_feature_want)"
got=$(every_feature_answers "$out")
[ "$got" = "$want" ] || { diff <(echo "$want") <(echo "$got") || true; fail "answers differ"; }
echo "ok: every feature ran with one relcache callback slot left"
