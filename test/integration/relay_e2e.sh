#!/usr/bin/env bash
# relay_e2e.sh: the relay example, examples/relay (relay.js: the
# pg-idempotency package's OutboxRelay, publishing over HTTP to consumer.js,
# which applies each event once with process_once), end to end.  First the
# example's own test (node --test).  Then two relays at once against a
# stream of enqueued events; one is killed (SIGKILL, by PID) while it
# publishes and restarted.  Checks that every committed event is applied
# exactly once and no rolled-back one, in order per aggregate; that every
# event ends up published; that the killed relay's leased events were
# taken over under a new lease; that a redelivery applies nothing; and that
# SIGTERM stops the relays and the consumer cleanly.
. "$(dirname "$0")/lib.bash"
: "${IDEM_TEST_WORK:?}"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_db.bash"
. "$here/node_example.bash"
work_dir relay_e2e
W=$WORK
AGGREGATES=20 ROUNDS=60
EVENTS=$((AGGREGATES * ROUNDS))
pids=()
at_exit 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done'
fail() { echo "FAIL: $*"; for f in "$W"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
# q SQL: in the database of fresh_db (PGDATABASE), as this user
q() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
stopped() {	# stopped PID: SIGTERM, then it must exit 0 within 10 s
  kill -TERM "$1"
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && fail "$1 did not stop on SIGTERM"
  wait "$1" || fail "$1 exited with an error after SIGTERM"
}

node_example "$here/../../examples/relay" >"$W/npm.log" 2>&1 || fail "npm"

fresh_db relay_example
node --test test/*.test.js || fail "the example's test"

fresh_db relay_e2e
CONSUMER_PORT=0 node consumer.js >"$W/consumer.log" 2>&1 &
consumer=$!; pids+=("$consumer")
for _ in $(seq 1 100); do grep -q '^listening on ' "$W/consumer.log" && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$W/consumer.log")
[ -n "$url" ] || fail "the consumer did not start"

# The producer: ROUNDS transactions, each one event per aggregate (seq =
# round), now and then a rolled-back transaction (seq = -1), a bit apart.
produce() {
  local r
  for r in $(seq 1 "$ROUNDS"); do
    q "SELECT count(idempotency.enqueue_event('account', 'acct-' || a, 'deposited',
              jsonb_build_object('seq', $r))) FROM generate_series(1, $AGGREGATES) a" >/dev/null
    if [ $((r % 10)) -eq 0 ]; then
      q "BEGIN; SELECT idempotency.enqueue_event('account', 'acct-1', 'deposited', '{\"seq\": -1}'); ROLLBACK;" >/dev/null
    fi
    sleep 0.05
  done
}

relay() {	# relay NAME: start a relay in the background ($! is its PID)
  CONSUMER_URL=$url RELAY_NAME=$1 RELAY_BATCH=25 RELAY_LEASE='3 seconds' \
    RELAY_POLL_MS=200 RELAY_PUBLISH_DELAY_MS=20 node relay.js >>"$W/$1.log" 2>&1 &
}

# relay1 is killed while it publishes: its last line says "publishing"
# (the event is claimed under the batch's lease token, not yet marked).
# Sets r1, last, token and leased (the ids still leased under the token).
kill_relay1() {	# kill_relay1 MIN_PUBLISHED
  relay relay1; r1=$!; pids+=("$r1")
  for _ in $(seq 1 3000); do
    published=$(grep -c ': publishing ' "$W/relay1.log" 2>/dev/null || true)
    last=$(tail -n 1 "$W/relay1.log" 2>/dev/null || true)
    if [ "${published:-0}" -ge "$1" ] && [[ $last == *": publishing "* ]]; then
      kill -KILL "$r1"
      break
    fi
    sleep 0.01
  done
  wait "$r1" 2>/dev/null || true
  last=$(tail -n 1 "$W/relay1.log")
  [[ $last == *": publishing "* ]] || fail "relay1 was not killed while publishing"
  token=${last##*lease token }
  token=${token%)}
  [[ $token =~ ^-?[0-9]+$ ]] || fail "no lease token in: $last"
  leased=$(q "SELECT coalesce(string_agg(id::text, ','), '') FROM idempotency.outbox_events
              WHERE lease_token = $token AND published_at IS NULL")
}

produce & pids+=($!)
producer=$!
relay relay2; r2=$!; pids+=("$r2")
kill_relay1 50
# a kill just after the last mark of a batch leaves nothing leased: again
for attempt in 2 3; do
  [ -n "$leased" ] && break
  mv "$W/relay1.log" "$W/relay1-$attempt.log"
  kill_relay1 5
done
[ -n "$leased" ] || fail "relay1 left nothing leased under token $token"
echo "killed relay1 (pid $r1) in: $last; left leased: $leased"

# relay1 comes back (a supervisor would restart it)
relay relay1; r1b=$!; pids+=("$r1b")

wait "$producer" || fail "producer"
for _ in $(seq 1 600); do
  [ "$(q "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL")" -eq 0 ] && break
  sleep 0.1
done
stopped "$r2"
stopped "$r1b"
grep -q '^relay2: stopped: published [0-9]*, handed back 0$' "$W/relay2.log" || fail "relay2 did not stop cleanly"

unpublished=$(q "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL")
[ "$unpublished" -eq 0 ] || fail "$unpublished events never published"
total=$(q "SELECT count(*) FROM idempotency.outbox_events")
[ "$total" -eq "$EVENTS" ] || fail "outbox has $total events, expected $EVENTS"
[ "$(q "SELECT count(*) FROM idempotency.outbox_events WHERE id IN ($leased) AND takeovers < 1")" -eq 0 ] ||
  fail "relay1's leased events were not taken over"

# A redelivery of three events applies nothing.
mapfile -t again < <(q "SELECT id || '|' || aggregate_id || '|' || payload FROM idempotency.outbox_events ORDER BY id LIMIT 3")
[ "${#again[@]}" -eq 3 ] || fail "no events to deliver again"
# shellcheck disable=SC2016  # JavaScript, not shell
node -e '
  const url = process.argv[1];
  Promise.all(process.argv.slice(2).map(async (line) => {
    const [id, aggregateId, payload] = line.split("|");
    const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ id, aggregateId, payload: JSON.parse(payload) }) });
    const answer = await r.json();
    if (r.status !== 200 || answer.applied !== false) throw new Error(`event ${id}: ${r.status} ${JSON.stringify(answer)}`);
  })).catch((e) => { console.error(e.message); process.exit(1); });
' "$url" "${again[@]}" ||
  fail "a redelivery was applied again"
stopped "$consumer"
tail -n 1 "$W/consumer.log"
grep -Eq "^applied $EVENTS, duplicates [0-9]+$" "$W/consumer.log" || fail "consumer: $(tail -n 1 "$W/consumer.log")"

[ "$(q "SELECT count(*) FROM applied_events")" -eq "$EVENTS" ] || fail "applied count"
[ "$(q "SELECT count(DISTINCT event_id) FROM applied_events")" -eq "$EVENTS" ] || fail "applied twice"
[ "$(q "SELECT count(*) FROM applied_events WHERE (payload->>'seq')::int < 0")" -eq 0 ] ||
  fail "a rolled-back event was applied"
[ "$(q "SELECT count(*) FROM applied_events a JOIN idempotency.outbox_events e ON e.id = a.event_id
         WHERE e.aggregate_id <> a.aggregate_id OR e.payload <> a.payload")" -eq 0 ] ||
  fail "applied events differ from the outbox"
[ "$(q "SELECT count(*) FROM (SELECT (payload->>'seq')::int AS seq,
          row_number() OVER (PARTITION BY aggregate_id ORDER BY n) AS rank FROM applied_events) x
        WHERE seq <> rank")" -eq 0 ] || fail "applied out of order"
[ "$(q "SELECT count(*) FROM idempotency.processed_events WHERE consumer = 'example-consumer'")" -eq "$EVENTS" ] ||
  fail "processed_events count"

psql -X -q -d postgres -c 'DROP DATABASE relay_e2e' -c 'DROP DATABASE relay_example'
echo "ok: $EVENTS events, two relays, one killed while publishing, each applied exactly once"
