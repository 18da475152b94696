#!/usr/bin/env bash
# test/memory.sh (make memory): backend memory across CALLS (default
# 1,000,000) calls of each hot function, in one backend, as statements of
# BATCH (10,000) calls each.  For each function it prints the backend's
# memory contexts (sum of pg_backend_memory_contexts.total_bytes) and its
# private resident memory (RssAnon of /proc/self/status) after the first
# tenth of the calls (a warm-up: caches fill and malloc's heap reaches its
# working size) and after the last.  The smallest palloc() chunk takes 16
# bytes with its header, so a leak of one chunk per call into long-lived
# memory grows by more than 14 MB over the last 900,000 calls; the run fails
# when any function grows by more than LIMIT_KB (default 1024) kB in either
# figure.  Runs as root.
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
CALLS=${CALLS:-1000000}
BATCH=${BATCH:-10000}
LIMIT_KB=${LIMIT_KB:-1024}
BATCHES=$((CALLS / BATCH))
WARMUP=$(((BATCHES + 9) / 10))

idem_ensure_packages $IDEM_PACKAGES || exit 1
idem_build || exit 1
WORK=$(mktemp -d /tmp/idempotency-memory.XXXXXX)
chmod 755 "$WORK"
BIN=$(idem_private_install "$WORK") || exit 1
chown -R postgres: "$WORK"
idem_start_cluster "$BIN" "$WORK/cluster" 5432 '' || exit 1
trap 'idem_stop_cluster "$BIN" "$WORK/cluster"; rm -rf "$WORK"' EXIT
psql_() { runuser -u postgres -- "$BIN/psql" -h "$WORK/cluster" -p 5432 -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_ -d postgres -c 'CREATE DATABASE memory'
psql_ -d memory -c 'CREATE EXTENSION idempotency'

# name#statement run per batch (:b is the batch number)#setup#function it
# needs (cases whose function the build lacks are skipped); ONLY="name ..."
# runs some cases.  claim_events+mark_published makes one call per batch.
cases=(
  "fingerprint#SELECT count(idempotency.fingerprint(jsonb_build_object('n', g, 'b', :b))) FROM generate_series(1, $BATCH) g#"
  "lock_key#SELECT count(idempotency.lock_key('k' || g)) FROM generate_series(1, $BATCH) g#"
  "try_lock#SELECT count(idempotency.try_lock('k' || g % 50)) FROM generate_series(1, $BATCH) g#"
  "claim+release#SELECT count(idempotency.release(k, (idempotency.claim(k)).fence)) FROM (SELECT 'r' || g AS k FROM generate_series(1, $BATCH) g) s#"
  "claim+complete#SELECT count(idempotency.complete(k, (idempotency.claim(k, '{\"a\": 1}')).fence, '{\"ok\": true}')) FROM (SELECT 'c' || :b || '-' || g AS k FROM generate_series(1, $BATCH) g) s#"
  "claim (replay)#SELECT count(idempotency.claim('c1-' || g, '{\"a\": 1}')) FROM generate_series(1, $BATCH) g#"
  "lookup#SELECT count(idempotency.lookup('c1-' || g)) FROM generate_series(1, $BATCH) g#"
  "checkpoint#SELECT count(idempotency.checkpoint(k, f, 'step' || :b, '1 hour')) FROM mem_fences#CREATE TABLE mem_fences AS SELECT 'p' || g AS k, (idempotency.claim('p' || g, NULL, '', '1 hour', '1 hour')).fence AS f FROM generate_series(1, $BATCH) g"
  "execute#SELECT count(idempotency.execute('e' || :b || '-' || g, NULL, 'SELECT \$1::int + 1', ARRAY[g::text])) FROM generate_series(1, $BATCH) g#"
  "issue+consume_token#SELECT count(idempotency.consume_token(idempotency.issue_token('s'), 's')) FROM generate_series(1, $BATCH) g#"
  "process_once#SELECT count(idempotency.process_once('m', 'e' || :b || '-' || g)) FROM generate_series(1, $BATCH) g##idempotency.process_once(text,text)"
  "enqueue_event#SELECT count(idempotency.enqueue_event('order', g::text, 'created', '{}')) FROM generate_series(1, $BATCH) g##idempotency.enqueue_event(text,text,text,jsonb,jsonb)"
  "claim_events+mark_published#SELECT idempotency.mark_published(array_agg(id)) FROM idempotency.claim_events($BATCH)##idempotency.claim_events(integer,interval)"
  "transition#SELECT count(idempotency.transition('mem_orders', 'id', g::text, 'state', CASE :b % 2 WHEN 1 THEN 'A' ELSE 'B' END, CASE :b % 2 WHEN 1 THEN 'B' ELSE 'A' END)) FROM generate_series(1, $BATCH) g#CREATE TABLE mem_orders AS SELECT g AS id, 'A' AS state FROM generate_series(1, $BATCH) g; ALTER TABLE mem_orders ADD PRIMARY KEY (id)#idempotency.transition(regclass,name,text,name,text,text,jsonb)"
)

measure="SELECT (SELECT sum(total_bytes) FROM pg_backend_memory_contexts) AS ctx,
  (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+)'))[1]::bigint AS rss"
printf '%-28s %14s %14s %12s %12s\n' function contexts_warm contexts_last rss_kb_warm rss_kb_last
status=0
for c in "${cases[@]}"; do
  IFS='#' read -r name stmt setup needs <<<"$c"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  if [ -n "$needs" ] && [ "$(psql_ -d memory -Atc "SELECT to_regprocedure('$needs') IS NULL")" = t ]; then
    printf '%-28s skipped: %s is not in this build\n' "$name" "$needs"
    continue
  fi
  [ -n "$setup" ] && psql_ -d memory -c "$setup"
  {
    for ((b = 1; b <= BATCHES; b++)); do
      echo "\\set b $b"
      echo "$stmt \\g /dev/null"
      [ $b -eq $WARMUP ] && echo "$measure \\gset first_"
    done
    echo "$measure \\gset last_"
    echo "\\echo :first_ctx :last_ctx :first_rss :last_rss"
  } >"$WORK/memory.sql"
  chown postgres: "$WORK/memory.sql"
  read -r c1 c2 r1 r2 < <(psql_ -d memory -f "$WORK/memory.sql" | tail -1)
  printf '%-28s %14s %14s %12s %12s\n' "$name" "$c1" "$c2" "$r1" "$r2"
  if [ $(((c2 - c1) / 1024)) -gt "$LIMIT_KB" ] || [ $((r2 - r1)) -gt "$LIMIT_KB" ]; then
    echo "  ^ grew by more than $LIMIT_KB kB after the warm-up"
    status=1
  fi
done
exit $status
