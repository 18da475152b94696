#!/usr/bin/env bash
# scaleout/rebalance.sh: split the N partitions that start.sh started into
# 2N, online, without losing a live key.  Run as root.
#
# A key on partition i = route & (N-1) moves to i + N or stays, since
# route & (2N-1) is one of the two.  So partition i + N starts as an exact
# copy of partition i:
#   1. p(i+N) is made a streaming standby of p(i) (pg_basebackup -R) and
#      catches up while traffic goes on.
#   2. Freeze: every old partition turns read-only
#      (default_transaction_read_only, reload, then its sessions are
#      terminated and waited for); writes fail with 25006 and clients
#      retry, reads go on.  Nothing can commit on p(i) any more.
#   3. Each standby replays up to its primary's last WAL position and is
#      promoted: p(i+N) now holds every row of p(i), its fence sequence
#      included (sequences are WAL-logged ahead, so fences only grow).
#   4. The proxy's foreign server gets p(N)..p(2N-1); proxy transactions
#      that began under the old map are waited for (and ended after
#      SCALEOUT_GRACE seconds), so no call routed by the old map is left.
#   5. Thaw the old partitions; then each partition deletes the rows that
#      now belong to its twin (idempotency_shard.drop_moved_rows).
# Writes are refused only between 2 and 5, a few seconds on one machine.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || so_die "run as root (the clusters run as the postgres OS user)"
[ -f "$SCALEOUT_DIR/partitions" ] || so_die "no cluster in $SCALEOUT_DIR; scaleout/start.sh first"
n=$(cat "$SCALEOUT_DIR/partitions")
grace=${SCALEOUT_GRACE:-5}
bin=$(so_bin)

# poll NODE SQL: wait (up to 60 s) until SQL returns t on NODE.
poll() {
  local i
  for i in $(seq 600); do
    [ "$(so_psql "$1" -Atc "$2")" = t ] && return 0
    sleep 0.1
  done
  so_die "$1: timed out waiting for: $2"
}

idem_log "1. standbys p$n..p$((2 * n - 1)) of p0..p$((n - 1))"
for ((i = 0; i < n; i++)); do
  new=p$((i + n)) dir=$SCALEOUT_DIR/p$((i + n))
  port=$(so_free_port)
  rm -rf "$dir"
  mkdir -p "$dir"
  chown postgres: "$dir"
  runuser -u postgres -- "$bin/pg_basebackup" -h 127.0.0.1 -p "$(so_port "p$i")" -U postgres \
    -D "$dir/data" -R -X stream -c fast --no-sync
  cat >>"$dir/data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$dir'
CONF
  echo "$port" >"$dir/port"
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -s start
  poll "p$i" "SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming'"
done

idem_log "2. freezing p0..p$((n - 1))"
frozen=$(date +%s%N)
for ((i = 0; i < n; i++)); do
  so_psql "p$i" -c 'ALTER SYSTEM SET default_transaction_read_only = on' -c 'SELECT pg_reload_conf()' >/dev/null
  poll "p$i" "SELECT current_setting('default_transaction_read_only') = 'on'"
  # sessions that began before the reload may still write: end them, and
  # wait until they are gone (one that ends by itself meanwhile is fine)
  before_reload="backend_type = 'client backend' AND pid <> pg_backend_pid()
      AND backend_start < pg_conf_load_time()"
  so_psql "p$i" -Atc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE $before_reload" \
    >/dev/null 2>&1
  poll "p$i" "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE $before_reload)"
done

idem_log "3. catching up and promoting p$n..p$((2 * n - 1))"
for ((i = 0; i < n; i++)); do
  lsn=$(so_psql "p$i" -Atc 'SELECT pg_current_wal_lsn()')
  poll "p$((i + n))" "SELECT pg_last_wal_replay_lsn() >= '$lsn'"
  so_psql "p$((i + n))" -Atc 'SELECT pg_promote()' | grep -qx t || so_die "p$((i + n)) was not promoted"
  so_psql "p$((i + n))" -c 'ALTER SYSTEM RESET primary_conninfo' -c 'SELECT pg_reload_conf()' >/dev/null
done

idem_log "4. routing to $((2 * n)) partitions"
add=""
for ((i = n; i < 2 * n; i++)); do
  add+="${add:+, }ADD p$i '$(so_connstr "p$i")'"
done
so_psql proxy -c "ALTER SERVER idempotency OPTIONS ($add)"
echo $((2 * n)) >"$SCALEOUT_DIR/partitions"
so_psql proxy -Atc "
  DO \$\$
  DECLARE switched timestamptz := pg_catalog.now();
  BEGIN
    FOR i IN 1 .. $grace * 10 LOOP
      PERFORM pg_stat_clear_snapshot();
      EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_activity
                             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
                               AND xact_start < switched);
      PERFORM pg_sleep(0.1);
    END LOOP;
    PERFORM pg_terminate_backend(s.pid, 10000)
       FROM (SELECT pid FROM pg_stat_activity
              WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
                AND xact_start < switched OFFSET 0) s;
  END
  \$\$"

idem_log "5. thawing p0..p$((n - 1)) and dropping moved rows"
for ((i = 0; i < n; i++)); do
  so_psql "p$i" -c 'SET default_transaction_read_only = off' \
    -c 'ALTER SYSTEM RESET default_transaction_read_only' -c 'SELECT pg_reload_conf()' >/dev/null
done
idem_log "writes were refused for $((($(date +%s%N) - frozen) / 1000000)) ms"
for ((i = 0; i < 2 * n; i++)); do
  so_psql "p$i" -Atc "SELECT 'p$i: ' || string_agg(relation || ' ' || deleted, ', ')
                        FROM idempotency_shard.drop_moved_rows($i, $((2 * n)))"
done
idem_log "$((2 * n)) partitions"
