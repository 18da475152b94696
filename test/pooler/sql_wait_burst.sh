#!/usr/bin/env bash
# test/pooler/sql_wait_burst.sh: duplicates that wait, through PgBouncer in
# transaction mode, at the SQL level.  50 concurrent duplicates of one slow
# key, each its own client (a psql per duplicate), as the HTTP middlewares
# make them: claim(..., lease => 4 s, wait => 5 s) in a transaction of its
# own; the one that holds the key works 2 s off the connection (a sleep in
# the shell), then writes its business row and completes, each in a
# transaction of its own.  Through a pool of 4 and a pool of 2 server
# connections, on the C edition and on the portable one (installed by a
# role that is no superuser): exactly one execution (one holder, one
# business row), every other answer replay or in_progress, no lease lost,
# no client cut off by PgBouncer.
#
# It is idempotency.max_waiters_per_key (default 1) that makes this hold:
# with it raised to 256 for the database (ALTER DATABASE ... SET, which the
# portable edition reads too) the same burst through a pool of 2 fails as
# a team behind a pooler would see it without the bound: the sleeping
# duplicates take both server connections, the holder's next statement
# queues in PgBouncer until its lease has run out, a duplicate takes the
# key over and runs the request again, and the holder's complete gets
# "lease lost" or the client is cut off (query_wait_timeout).  The test
# asserts that failure too.  PgBouncer's query_wait_timeout is 6 s here
# (120 s by default) so that a starved client shows within the test's
# time; nobody waits that long in a run that passes.
. "$(dirname "$0")/sql.bash"
sql_setup idem_pooler_burst
idem_log "sql_wait_burst: PgBouncer $(pooler_version)"
DUPLICATES=50
for e in c p; do
  sql_direct "$e" -c 'CREATE TABLE burst_payments (key text NOT NULL, paid_at timestamptz NOT NULL DEFAULT clock_timestamp())'
done

# one duplicate: each statement in a transaction of its own (autocommit);
# the holder's work runs in the shell, off the connection.  Each client
# connects, says so (a file in $BURST/ready) and waits for the file
# $BURST/go, so that the duplicates claim together, not as fast as the
# machine starts psql.
cat >"$SQL_TMP/duplicate.sql" <<'SQL'
\set ON_ERROR_STOP 0
\set holder false
\! touch "$BURST/ready/$BURST_CLIENT"; while [ ! -e "$BURST/go" ]; do sleep 0.01; done
SELECT outcome, coalesce(fence, 0) AS fence, outcome IN ('claimed', 'resumed') AS holder
  FROM idempotency.claim(:'key', '{"amount": 5}', lease => '4 seconds', wait => '5 seconds') \gset
\echo outcome :outcome
\if :holder
\! sleep 2
INSERT INTO burst_payments (key) VALUES (:'key');
SELECT 'completed' FROM idempotency.complete(:'key', :fence, '{"paid": 5}', 201);
\endif
SQL
chmod 644 "$SQL_TMP/duplicate.sql"

# burst E POOL LABEL: the burst on edition E through a new PgBouncer of
# POOL server connections; counts the answers into the globals below and
# prints them
burst() {
  local e=$1 pool=$2 label=$3 dir=$SQL_TMP/$3 key=burst-$3 i start
  sql_pooler "$dir" "$pool" "query_wait_timeout = 6"
  mkdir -p "$dir/out" "$dir/end" "$dir/ready"
  for i in $(seq "$DUPLICATES"); do
    { BURST=$dir BURST_CLIENT=$i sql_pooled "$dir" "$e" -v key="$key" \
        -f "$SQL_TMP/duplicate.sql" >"$dir/out/$i" 2>&1
      date +%s.%N >"$dir/end/$i"; } &
  done
  for _ in $(seq 600); do
    [ "$(ls "$dir/ready" | wc -l)" -ge "$DUPLICATES" ] && break
    sleep 0.05
  done
  start=$(date +%s.%N)
  touch "$dir/go"
  wait
  # the seconds from the start to the median client's answer, and to the last
  secs=$(cat "$dir"/end/* | sort -n | awk -v s="$start" '{ t[NR] = $1 - s }
    END { printf "%.1fs (median client), %.1fs (last)", t[int((NR + 1) / 2)], t[NR] }')
  pooler_stop "$dir"
  holders=$(cat "$dir"/out/* | grep -cE '^outcome (claimed|resumed)$' || true)
  others=$(cat "$dir"/out/* | grep -cE '^outcome (replay|in_progress)$' || true)
  completed=$(cat "$dir"/out/* | grep -cx completed || true)
  lease_lost=$(cat "$dir"/out/* | grep -c 'lease lost' || true)
  cut_off=$(cat "$dir"/out/* | grep -c 'query_wait_timeout' || true)
  errors=$(cat "$dir"/out/* | grep -cE 'ERROR|FATAL|error:' || true)
  rows=$(sql_direct "$e" -c "SELECT count(*) FROM burst_payments WHERE key = '$key'")
  echo "$label: $holders executions, $rows business rows, $others replay or in_progress," \
    "$completed completed, $lease_lost lease lost, $cut_off cut off (query_wait_timeout)," \
    "$errors errors; done in $secs"
}

failed=0
check() {	# check WHAT CONDITION
  if eval "$2"; then echo "ok: $1 (at ${SECONDS}s)"; else echo "FAILED: $1 ($2, at ${SECONDS}s)"; failed=1; fi
}

for e in c p; do
  for pool in 4 2; do
    burst "$e" "$pool" "$e-pool$pool"
    check "$e-pool$pool: exactly one execution, every other answer replay or in_progress, nothing lost" \
      "[ $holders -eq 1 ] && [ $rows -eq 1 ] && [ $completed -eq 1 ] && [ $others -eq $((DUPLICATES - 1)) ] && [ $errors -eq 0 ]"
  done
  # the bound lifted: the failure the bound prevents
  psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "ALTER DATABASE $(sql_db "$e") SET idempotency.max_waiters_per_key = 256"
  burst "$e" 2 "$e-unbounded"
  check "$e-unbounded: with max_waiters_per_key 256 a pool of 2 runs the request again and starves its holder" \
    "[ $holders -ge 2 ] && [ $((lease_lost + cut_off)) -ge 1 ]"
  psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "ALTER DATABASE $(sql_db "$e") RESET idempotency.max_waiters_per_key"
done
if [ "$failed" -ne 0 ]; then
  for f in "$SQL_TMP"/*/pgbouncer.log; do echo "---- $f"; tail -20 "$f"; done
fi
exit "$failed"
