#!/usr/bin/env bash
# test/pooler/sql_api.sh: the SQL API through PgBouncer in transaction
# mode, on the C edition and on the portable one (installed by a role that
# is no superuser), through a pool of 2 and a pool of 4 server connections.
#
# 1. Outcomes: test/pooler/api_keys.sql (claim, in_progress, mismatch,
#    complete, replay, both fails, checkpoint, release, a lease taken over,
#    gone, execute, a per-call lease and SET LOCAL, tokens, transitions,
#    process_once) and test/pooler/api_outbox.sql (enqueue_event(s),
#    claim_events, mark_published and mark_failed with lease tokens, a
#    takeover) run first on a direct connection, then through the pooler:
#    CLIENTS clients of api_keys.sql and the outbox's at once, each
#    statement a transaction of its own, so consecutive calls of one
#    client run on different server connections and each server
#    connection serves many clients.  Every client must print what the
#    direct connection printed (its own key prefix and the fences'
#    numbers aside), and the pool must have served them on at most its
#    size of server connections.
# 2. pgbench through the pooler (test/pooler/pgbench_claim.sql: claim a
#    random key, the holder inserts its business row and completes), with
#    -M simple and -M extended, and -M prepared where PgBouncer keeps
#    prepared statements across server connections (1.21 and later, with
#    max_prepared_statements = 100, as doc/poolers.md configures it); then
#    exactly once: one business row per key, every key completed.  On an
#    older PgBouncer -M prepared must fail as doc/poolers.md says
#    (prepared statements that one client made on a server connection
#    meet another's), and the test asserts that.
. "$(dirname "$0")/sql.bash"
sql_setup idem_pooler_api
CLIENTS=6
ini=()
pooler_supports_prepared && ini=("max_prepared_statements = 100")
idem_log "sql_api: PgBouncer $(pooler_version) ${ini[*]}"
cp "$here"/api_keys.sql "$here"/api_outbox.sql "$here"/pgbench_claim.sql "$SQL_TMP/"
chmod 644 "$SQL_TMP"/*.sql
for e in c p; do
  sql_direct "$e" >/dev/null <<'SQL'
CREATE TABLE api_business (k text NOT NULL, n int NOT NULL);
CREATE TABLE api_orders (id text PRIMARY KEY, state text NOT NULL);
SELECT idempotency.define_state_machine('api_order', '{"PENDING": ["PAID", "CANCELLED"], "PAID": ["SHIPPED"]}');
SELECT idempotency.enforce_state_machine('api_orders', 'state', 'api_order');
CREATE TABLE pgb_business (k text NOT NULL);
SQL
done

failed=0
check() {	# check WHAT CONDITION
  if eval "$2"; then echo "ok: $1 (at ${SECONDS}s)"; else echo "FAILED: $1 ($2, at ${SECONDS}s)"; failed=1; fi
}
# normalize PREFIX: a client's output without its key prefix and fences
normalize() { sed -e "s/$1/P/g" -e 's/Fence [0-9]*/Fence N/'; }

# pgbench_pooled ARGS: 8 clients of edition $e through the pooler of $dir,
# run $run.  One thread per client: with -M prepared pgbench prepares a
# client's statements with a call that blocks its thread, and a thread
# blocked waiting for a server connection would keep its other clients
# from finishing the transactions that hold them
pgbench_pooled() {
  PGHOST=127.0.0.1 PGPORT=$(sed -n 's/^listen_port = //p' "$dir/pgbouncer.ini") \
    timeout 100 pgbench -n -c 8 -j 8 -D run="$run" -U "$(sql_user "$e")" "$@" "$(sql_db "$e")"
}

for e in c p; do
  out=$SQL_TMP/$e
  mkdir -p "$out"
  # the direct connection's answers
  sql_direct "$e" -c 'DELETE FROM idempotency.outbox_events'
  sql_direct "$e" -v p="d$e" -f "$SQL_TMP/api_keys.sql" 2>&1 | normalize "d$e" >"$out/keys.expected"
  sql_direct "$e" -f "$SQL_TMP/api_outbox.sql" >"$out/outbox.expected" 2>&1
  for pool in 2 4; do
    dir=$SQL_TMP/$e-pool$pool
    sql_pooler "$dir" "$pool" ${ini[@]+"${ini[@]}"}
    sql_direct "$e" -c 'DELETE FROM idempotency.outbox_events'
    for i in $(seq "$CLIENTS"); do
      sql_pooled "$dir" "$e" -v p="p$pool-$i" -f "$SQL_TMP/api_keys.sql" >"$out/keys.$pool.$i" 2>&1 &
    done
    sql_pooled "$dir" "$e" -f "$SQL_TMP/api_outbox.sql" >"$out/outbox.$pool" 2>&1 &
    wait
    servers=$(psql -X -A -t -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$(sql_db "$e")' AND usename = '$(sql_user "$e")'")
    same=0
    for i in $(seq "$CLIENTS"); do
      if normalize "p$pool-$i" <"$out/keys.$pool.$i" | diff -u "$out/keys.expected" - >"$out/keys.$pool.$i.diff"; then
        same=$((same + 1))
      else
        head -40 "$out/keys.$pool.$i.diff"
      fi
    done
    diff -u "$out/outbox.expected" "$out/outbox.$pool" || same=-100
    check "$e-pool$pool: $CLIENTS clients of the keys and one of the outbox on $servers server connections answer as a direct connection" \
      "[ $same -eq $CLIENTS ] && [ $servers -ge 1 ] && [ $servers -le $pool ]"

    # pgbench: many clients claiming random keys, then exactly once
    m=0
    for mode in simple extended prepared; do
      # the run's keys are pgb-RUN-1 to pgb-RUN-100 (a number: see the script)
      m=$((m + 1)) run=$([ "$e" = c ] && echo 1 || echo 2)$pool$m
      log=$out/pgbench.$pool.$mode
      rc=0
      pgbench_pooled -M "$mode" -t 30 -f "$SQL_TMP/pgbench_claim.sql" >"$log" 2>&1 || rc=$?
      if [ $mode = prepared ] && [ ${#ini[@]} -eq 0 ]; then
        # PgBouncer before 1.21: what doc/poolers.md warns of, a client's
        # prepared statement meets another's on a server connection
        # ("P_0" already exists; or does not exist, on another)
        check "$e-pool$pool: pgbench -M prepared fails through PgBouncer $(pooler_version) (prepared statements)" \
          "grep -q 'prepared statement \"P_[0-9]*\"' '$log'"
        continue
      fi
      [ $rc -eq 0 ] || tail -20 "$log"
      read -r rows keys completed open < <(sql_direct "$e" -F ' ' -c "
        SELECT count(*), count(DISTINCT k),
               (SELECT count(*) FILTER (WHERE status = 'completed') FROM idempotency.idempotency_keys
                 WHERE idempotency_key LIKE 'pgb-$run-%'),
               (SELECT count(*) FILTER (WHERE status <> 'completed') FROM idempotency.idempotency_keys
                 WHERE idempotency_key LIKE 'pgb-$run-%')
          FROM pgb_business WHERE k LIKE 'pgb-$run-%'")
      echo "$e-pool$pool pgbench -M $mode: $(grep -E '^tps' "$log" | head -1); $rows business rows, $keys keys, $completed completed, $open open"
      check "$e-pool$pool: pgbench -M $mode runs every transaction, each key once" \
        "[ $rc -eq 0 ] && grep -q 'actually processed: 240/240' '$log' && [ $rows -gt 0 ] && [ $rows -eq $keys ] && [ $rows -eq $completed ] && [ $open -eq 0 ]"
    done
    pooler_stop "$dir"
  done
done
exit "$failed"
