#!/usr/bin/env bash
# test/integration/scaleout_sharding.sh: the request keys of
# doc/reference.md (and tokens and process_once) through the PL/Proxy proxy of scaleout/start.sh with 2
# partitions: every outcome, fencing (55000 from the partition reaches the
# client), argument errors, the concurrent-claim race, routing; then an
# online split to 4 partitions under load (scaleout/rebalance.sh) that
# loses no live key, no completed answer and no token.
set -uo pipefail
export SCALEOUT_DIR=$IDEM_TEST_WORK/scaleout PG_BINDIR=$IDEM_TEST_BIN SCALEOUT_PORT=6600
S=$IDEM_TOP/scaleout
. "$S/lib.sh"

failures=0
finish() {
  [ "$failures" -eq 0 ] || export KEEP_DATA=1
  "$S/stop.sh"
}
trap finish EXIT
"$S/start.sh" 2 || exit 1

# check NAME EXPECTED: run the SQL on stdin through the proxy (errors show
# as "ERROR:  <sqlstate>", empty lines dropped) and compare with EXPECTED.
check() {
  local got
  got=$(so_psql proxy -At -v ON_ERROR_STOP=0 -v VERBOSITY=sqlstate \
    -c 'SET client_min_messages = warning' -f - 2>&1 | sed -e 's/^psql:<stdin>:[0-9]*: //' -e '/^SET$/d' -e '/^$/d')
  if [ "$got" = "$2" ]; then
    echo "ok - $1"
  else
    echo "not ok - $1"
    echo "  expected: $2" | sed '2,$s/^/            /'
    echo "  got:      $got" | sed '2,$s/^/            /'
    failures=$((failures + 1))
  fi
}

# ---- request keys, phased: claimed, in_progress, mismatch, replay
check "claim, in_progress, mismatch, checkpoint, complete, replay" \
"claimed|t|processing|started|1
in_progress|t|
mismatch
replay|completed|201|{\"id\": 7}|charged|1
t" <<'SQL'
SELECT outcome, fence IS NOT NULL AS has_fence, status, recovery_point, attempts, fence AS f
  FROM idempotency.claim('order-1', '{"amount": 100, "currency": "EUR"}') \gset
SELECT :'outcome', :'has_fence', :'status', :'recovery_point', :attempts;
SELECT outcome, retry_after > '0'::interval, fence FROM idempotency.claim('order-1', '{"currency":"EUR","amount":100}');
SELECT outcome FROM idempotency.claim('order-1', '{"amount": 999, "currency": "EUR"}');
SELECT idempotency.checkpoint('order-1', :f, 'charged');
SELECT idempotency.complete('order-1', :f, '{"id": 7}', 201);
SELECT outcome, status, response_code, response_body, recovery_point, attempts
  FROM idempotency.claim('order-1', '{"amount": 100, "currency": "EUR"}');
SELECT (idempotency.lookup('order-1')).status = 'completed';
SQL

# ---- a crashed holder: resumed from its recovery point; its stale fence is refused
check "lease lost: resumed with a larger fence, stale holder gets 55000" \
"resumed|t|2|charged
ERROR:  55000
ERROR:  55000
ERROR:  55000
ERROR:  55000
replay|{\"ok\": true}" <<'SQL'
SELECT fence AS old FROM idempotency.claim('order-2', '{"n": 2}', lease => '1 second') \gset
SELECT idempotency.checkpoint('order-2', :old, 'charged', '1 second');
SELECT pg_sleep(1.2);
SELECT outcome, fence AS new, attempts, recovery_point FROM idempotency.claim('order-2', '{"n": 2}') \gset
SELECT :'outcome', :new > :old, :attempts, :'recovery_point';
SELECT idempotency.complete('order-2', :old, '{"stale": true}');
SELECT idempotency.checkpoint('order-2', :old, 'refunded');
SELECT idempotency.fail('order-2', :old);
SELECT idempotency.release('order-2', :old);
SELECT idempotency.complete('order-2', :new, '{"ok": true}');
SELECT outcome, response_body FROM idempotency.claim('order-2', '{"n": 2}');
SQL

check "the partition's 55000 message reaches the client behind PL/Proxy's prefix" \
'ERROR:  idempotency.complete(7): [idempotency] REMOTE ERROR: idempotency lease lost for key "order-2"' <<'SQL'
\set VERBOSITY terse
SELECT idempotency.complete('order-2', 1, '{}');
SQL

check "fail: retryable resumes, final replays the error" \
"resumed|2|t
replay|402|{\"error\": \"card declined\"}" <<'SQL'
SELECT fence AS f FROM idempotency.claim('order-3') \gset
SELECT idempotency.fail('order-3', :f, '{"error": "timeout"}', 504, retryable => true);
SELECT outcome, attempts, fence > :f AS larger, fence AS f2 FROM idempotency.claim('order-3') \gset
SELECT :'outcome', :attempts, :'larger';
\set f :f2
SELECT idempotency.fail('order-3', :f, '{"error": "card declined"}', 402, false);
SELECT outcome, response_code, response_body FROM idempotency.claim('order-3');
SQL

check "release forgets the claim" \
"t
claimed" <<'SQL'
SELECT fence AS f FROM idempotency.claim('order-4') \gset
SELECT idempotency.release('order-4', :f);
SELECT idempotency.lookup('order-4') IS NULL;
SELECT outcome FROM idempotency.claim('order-4');
SQL

check "an expired key reads as NULL and is claimed again" \
"t
claimed" <<'SQL'
SELECT fence AS f FROM idempotency.claim('order-5', ttl => '1 second', lease => '1 second') \gset
SELECT idempotency.complete('order-5', :f, '{}');
SELECT pg_sleep(1.2);
SELECT idempotency.lookup('order-5') IS NULL;
SELECT outcome FROM idempotency.claim('order-5');
SQL

check "scopes are independent" \
"claimed
claimed
in_progress" <<'SQL'
SELECT outcome FROM idempotency.claim('shared', scope => 'tenant-a');
SELECT outcome FROM idempotency.claim('shared', scope => 'tenant-b');
SELECT outcome FROM idempotency.claim('shared', scope => 'tenant-a');
SQL

check "bad arguments: 22023 and 54000 from the partition" \
"ERROR:  22023
ERROR:  22023
ERROR:  22023
ERROR:  22023
ERROR:  22023
ERROR:  22023
ERROR:  22023
ERROR:  54000" <<'SQL'
SELECT idempotency.claim(NULL);
SELECT idempotency.claim('');
SELECT idempotency.claim(repeat('k', 256));
SELECT idempotency.claim('k', scope => NULL);
SELECT idempotency.claim('k', ttl => '1 second');
SELECT idempotency.claim('k', lease => '-1 second');
SELECT idempotency.complete('order-4', NULL, '{}');
SELECT fence AS f FROM idempotency.claim('big') \gset
SELECT idempotency.complete('big', :f, jsonb_build_object('x', repeat('x', 1100000)));
SQL

check "one transaction does not hold through the proxy: the claim committed on its partition" \
"claimed
in_progress" <<'SQL'
BEGIN;
SELECT outcome FROM idempotency.claim('tx-1');
ROLLBACK;
SELECT outcome FROM idempotency.claim('tx-1');
SQL

check "privileges: a role granted on the proxy works, through the partitions' non-superuser mapping; others get 42501" \
"claimed
t
ERROR:  42501" <<'SQL'
CREATE ROLE regress_app LOGIN;
CREATE ROLE regress_nobody LOGIN;
SELECT idempotency_shard.grant_usage('regress_app');
SET ROLE regress_app;
SELECT outcome FROM idempotency.claim('app-1');
SELECT idempotency.consume_token(idempotency.issue_token());
RESET ROLE;
SET ROLE regress_nobody;
SELECT outcome FROM idempotency.claim('app-2');
RESET ROLE;
DROP OWNED BY regress_app, regress_nobody;
DROP ROLE regress_app, regress_nobody;
SQL
if [ "$(so_psql p0 -Atc "SELECT rolsuper FROM pg_roles WHERE rolname = 'idempotency_proxy'")" = f ]; then
  echo "ok - the proxy logs in to the partitions as a role without superuser rights"
else echo "not ok - the proxy's partition role"; failures=$((failures + 1)); fi

# ---- concurrent claims of one key from 8 sessions of the proxy
start=$(so_psql proxy -Atc "SELECT now() + interval '2 seconds'")
for i in $(seq 8); do
  so_psql proxy -At -c "SELECT pg_sleep_until('$start')" \
    -c "SELECT outcome FROM idempotency.claim('race-1', '{\"n\": 1}')" >"$SCALEOUT_DIR/race.$i" 2>&1 &
done
wait
got=$(cat "$SCALEOUT_DIR"/race.* | grep -v '^$' | sort | uniq -c | awk '{print $2 "=" $1}' | paste -sd' ')
expected="claimed=1 in_progress=7"
if [ "$got" = "$expected" ]; then echo "ok - 8 concurrent claims: $got"; else
  echo "not ok - 8 concurrent claims: expected $expected, got $got"; failures=$((failures + 1)); fi

# ---- tokens and the inbox
check "tokens: true once, false again, in another scope and after expiry" \
"t|f
f
f" <<'SQL'
SELECT idempotency.issue_token('checkout') AS t \gset
SELECT idempotency.consume_token(:'t', 'checkout'), idempotency.consume_token(:'t', 'checkout');
SELECT idempotency.consume_token(idempotency.issue_token('checkout'), 'cart');
SELECT idempotency.consume_token(t, 'checkout') FROM idempotency.issue_token('checkout', '1 second') t, pg_sleep(1.1);
SQL

if [ "$(so_psql p0 -Atc "SELECT to_regprocedure('idempotency.process_once(text,text)') IS NOT NULL")" = t ]; then
  check "process_once: true, then false" \
"t
f
t" <<'SQL'
SELECT idempotency.process_once('billing', 'evt-1');
SELECT idempotency.process_once('billing', 'evt-1');
SELECT idempotency.process_once('shipping', 'evt-1');
SQL
else
  echo "ok - process_once # SKIP the partitions' extension has no process_once yet"
fi

# ---- routing: every row is on partition route & (N - 1), and both get some
routing() {	# routing N: one line per partition
  local i
  for ((i = 0; i < $1; i++)); do
    so_psql "p$i" -Atc "SELECT count(*) > 0, bool_and(idempotency_shard.route(scope, idempotency_key) & $(($1 - 1)) = $i)
                          FROM idempotency.idempotency_keys"
  done | paste -sd' '
}
so_psql proxy -Atc "SELECT count(*) FROM generate_series(1, 64) g, idempotency.claim('spread-' || g) c" >/dev/null
got=$(routing 2)
if [ "$got" = "t|t t|t" ]; then echo "ok - keys are spread over 2 partitions by route()"; else
  echo "not ok - routing over 2 partitions: $got"; failures=$((failures + 1)); fi

# ---- split 2 -> 4 under load
so_psql proxy -c 'SET client_min_messages = warning' -c "
  CREATE TABLE live AS
    SELECT 'live-' || g AS key, (idempotency.claim('live-' || g, '{\"n\": 1}', lease => '10 minutes')).fence
      FROM generate_series(1, 100) g;
  CREATE TABLE done AS SELECT 'done-' || g AS key FROM generate_series(1, 100) g;
  SELECT count(idempotency.complete(d.key, c.fence, jsonb_build_object('key', d.key)))
    FROM done d, idempotency.claim(d.key) c;
  CREATE TABLE tokens AS SELECT idempotency.issue_token('checkout') AS token FROM generate_series(1, 20);
  SELECT fence AS short_fence FROM idempotency.claim('short', lease => '1 second')" -At >"$SCALEOUT_DIR/before.out" || failures=$((failures + 1))
short_fence=$(tail -1 "$SCALEOUT_DIR/before.out")

load() {	# claim and complete bg-<batch>-<n> until the stop file exists
  local b=0 k
  while [ ! -e "$SCALEOUT_DIR/stop-load" ]; do
    b=$((b + 1))
    for k in $(seq 20); do
      echo "SELECT idempotency.complete(c.key, c.fence, '{\"bg\": true}') FROM (SELECT 'bg-$b-$k' AS key, * FROM idempotency.claim('bg-$b-$k')) c;"
      printf '\\if :ERROR\n\\else\n\\echo done bg-%s-%s\n\\endif\n' "$b" "$k"
    done | so_psql proxy -At -v ON_ERROR_STOP=0 -f - 2>/dev/null | grep '^done ' >>"$SCALEOUT_DIR/load.out"
  done
}
load &
load_pid=$!
sleep 1
"$S/rebalance.sh" >"$SCALEOUT_DIR/rebalance.log" 2>&1 || { cat "$SCALEOUT_DIR/rebalance.log"; failures=$((failures + 1)); }
sleep 1
touch "$SCALEOUT_DIR/stop-load"
wait "$load_pid"
cat "$SCALEOUT_DIR/rebalance.log"

sed 's/^done //' "$SCALEOUT_DIR/load.out" | so_psql proxy -c 'CREATE TABLE bg (key text)' -c '\copy bg FROM pstdin'
check "after the split: live keys complete with their fences, answers replay, tokens consume once" \
"100
100
20|0" <<'SQL'
SELECT count(idempotency.complete(key, fence, '{"live": true}')) FROM live;
SELECT count(*) FROM done d, idempotency.claim(d.key) c
 WHERE c.outcome = 'replay' AND c.response_body = jsonb_build_object('key', d.key);
SELECT count(*) FILTER (WHERE idempotency.consume_token(token, 'checkout')),
       count(*) FILTER (WHERE idempotency.consume_token(token, 'checkout')) FROM tokens;
SQL
check "the fence of a key that moved still only grows" "resumed|t" <<SQL
SELECT outcome, fence > $short_fence FROM idempotency.claim('short');
SQL
check "every request the load saw completed, during the split too, replays" "t|t" <<'SQL'
SELECT count(*) > 40, bool_and(c.outcome = 'replay' AND c.response_body = '{"bg": true}')
  FROM bg, idempotency.claim(bg.key) c;
SQL
got=$(routing 4)
if [ "$got" = "t|t t|t t|t t|t" ]; then echo "ok - after the split, rows are spread over 4 partitions by route()"; else
  echo "not ok - routing over 4 partitions: $got"; failures=$((failures + 1)); fi
total=$(($(for i in 0 1 2 3; do so_psql "p$i" -Atc 'SELECT count(*) FROM idempotency.idempotency_keys'; done | paste -sd+)))
distinct=$(so_psql proxy -Atc "SELECT 64 + 100 + 100 + 1 + (SELECT count(*) FROM bg)")
echo "# rows on the partitions: $total; keys known to the client (at least): $distinct"
[ "$total" -ge "$distinct" ] || { echo "not ok - rows were lost"; failures=$((failures + 1)); }

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
