#!/usr/bin/env bash
# relay_e2e.sh: two outbox relays (examples/relay) at once against a stream
# of enqueued events; one is killed (SIGKILL, by PID) in the middle of a
# batch and restarted.  Checks that every committed event reaches the sink
# at least once and no rolled-back one does, that per aggregate the events
# first arrive in order, that every event ends up published, and that a
# consumer using process_once applies each event exactly once, in order.
set -euo pipefail
: "${IDEM_TOP:?}" "${IDEM_TEST_WORK:?}"
export PGDATABASE=relay_e2e
W=$IDEM_TEST_WORK/relay_e2e
rm -rf "$W" && mkdir -p "$W"
AGGREGATES=20 ROUNDS=60
EVENTS=$((AGGREGATES * ROUNDS))
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$W"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
q() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }

cp -r "$IDEM_TOP/examples/relay" "$W/relay"
(cd "$W/relay" && npm ci --no-audit --no-fund --loglevel=error) >"$W/npm.log" 2>&1 || fail "npm ci"

psql -X -q -d postgres -c 'DROP DATABASE IF EXISTS relay_e2e' -c 'CREATE DATABASE relay_e2e'
q "CREATE EXTENSION idempotency;
   CREATE TABLE applied_events (n bigserial PRIMARY KEY, aggregate_id text, event_id bigint, payload jsonb);"

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
  RELAY_NAME=$1 RELAY_SINK=$W/sink.jsonl RELAY_BATCH=25 RELAY_LEASE='3 seconds' \
    RELAY_POLL_MS=200 RELAY_PUBLISH_DELAY_MS=4 RELAY_EXIT_WHEN_IDLE_MS=6000 \
    node "$W/relay/relay.js" >>"$W/$1.log" 2>&1 &
}

produce & pids+=($!)
producer=$!
relay relay1; r1=$!; pids+=("$r1")
relay relay2; r2=$!; pids+=("$r2")

# Kill relay1 while it is publishing a batch: its last log line says
# "batch start" (claimed, not yet marked published).
for _ in $(seq 1 3000); do
  batches=$(grep -c 'batch done' "$W/relay1.log" 2>/dev/null || true)
  last=$(tail -n 1 "$W/relay1.log" 2>/dev/null || true)
  if [ "${batches:-0}" -ge 2 ] && [[ $last == *"batch start"* ]]; then
    kill -KILL "$r1"
    break
  fi
  sleep 0.01
done
wait "$r1" 2>/dev/null || true
[[ $(tail -n 1 "$W/relay1.log") == *"batch start"* ]] || fail "relay1 was not killed mid-batch"
killed_batch=$(tail -n 1 "$W/relay1.log")
echo "killed relay1 (pid $r1) in: $killed_batch"
leased=$(q "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL AND locked_until > now()")
echo "events leased when relay1 died: $leased"

# relay1 comes back (a supervisor would restart it)
relay relay1; r1b=$!; pids+=("$r1b")

wait "$producer" || fail "producer"
for p in "$r2" "$r1b"; do
  for _ in $(seq 1 600); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && fail "relay $p did not finish"
  wait "$p" || fail "relay $p exited with an error"
done

unpublished=$(q "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL")
[ "$unpublished" -eq 0 ] || fail "$unpublished events never published"
total=$(q "SELECT count(*) FROM idempotency.outbox_events")
[ "$total" -eq "$EVENTS" ] || fail "outbox has $total events, expected $EVENTS"

# The sink, loaded as the order of arrival.
q "CREATE TABLE sink (line bigserial, event jsonb)"
psql -X -q -v ON_ERROR_STOP=1 -c "\\copy sink (event) FROM '$W/sink.jsonl' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"
lines=$(q "SELECT count(*) FROM sink")
distinct=$(q "SELECT count(DISTINCT event->>'id') FROM sink")
echo "sink: $lines lines, $distinct distinct events (relay1, before and after its restart: $(grep -c '"relay":"relay1"' "$W/sink.jsonl" || true))"
[ "$distinct" -eq "$EVENTS" ] || fail "$distinct distinct events arrived, expected $EVENTS"
[ "$(q "SELECT count(*) FROM sink WHERE (event->'payload'->>'seq')::int < 0")" -eq 0 ] ||
  fail "a rolled-back event arrived"
[ "$(q "SELECT count(*) FROM sink s JOIN idempotency.outbox_events e ON e.id = (s.event->>'id')::bigint
         WHERE e.aggregate_id <> s.event->>'aggregate_id' OR e.payload <> s.event->'payload'")" -eq 0 ] ||
  fail "sink content differs from the outbox"

# In order per aggregate: the first arrivals of an aggregate's events come
# with seq 1, 2, 3, ... (redeliveries after the kill may repeat some).
out_of_order=$(q "
  WITH first AS (
    SELECT event->>'aggregate_id' AS agg, (event->'payload'->>'seq')::int AS seq, min(line) AS line
      FROM sink GROUP BY 1, 2)
  SELECT count(*) FROM (
    SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY line) AS rank FROM first) x
   WHERE seq <> rank")
[ "$out_of_order" -eq 0 ] || fail "$out_of_order events first arrived out of order"
# and a later event never arrived before every earlier one had
overtaken=$(q "
  SELECT count(*) FROM sink a JOIN sink b
    ON a.event->>'aggregate_id' = b.event->>'aggregate_id'
   AND (a.event->'payload'->>'seq')::int > (b.event->'payload'->>'seq')::int
   AND a.line < (SELECT min(line) FROM sink c WHERE c.event->>'id' = b.event->>'id')")
[ "$overtaken" -eq 0 ] || fail "$overtaken events overtook an earlier event of their aggregate"

# Exactly once at the consumer, in order; a second pass over the same sink
# (a redelivery of everything) applies nothing.
(cd "$W/relay" && CONSUMER_NAME=e2e node consumer.js "$W/sink.jsonl") >"$W/consumer.log" 2>&1 || fail "consumer"
cat "$W/consumer.log"
(cd "$W/relay" && CONSUMER_NAME=e2e node consumer.js "$W/sink.jsonl") >"$W/consumer2.log" 2>&1 || fail "consumer again"
grep -q "^applied 0, duplicates $lines$" "$W/consumer2.log" || fail "second pass: $(cat "$W/consumer2.log")"
[ "$(q "SELECT count(*) FROM applied_events")" -eq "$EVENTS" ] || fail "applied count"
[ "$(q "SELECT count(DISTINCT event_id) FROM applied_events")" -eq "$EVENTS" ] || fail "applied twice"
[ "$(q "SELECT count(*) FROM (SELECT (payload->>'seq')::int AS seq,
          row_number() OVER (PARTITION BY aggregate_id ORDER BY n) AS rank FROM applied_events) x
        WHERE seq <> rank")" -eq 0 ] || fail "applied out of order"
[ "$(q "SELECT count(*) FROM idempotency.processed_events WHERE consumer = 'e2e'")" -eq "$EVENTS" ] ||
  fail "processed_events count"

psql -X -q -d postgres -c 'DROP DATABASE relay_e2e'
echo "ok: $EVENTS events, two relays, one killed mid-batch, each applied exactly once"
