#!/usr/bin/env bash
# test/pooler/sql_settings.sh: the extension's settings behind PgBouncer in
# transaction mode, on both editions, through a pool of one server
# connection (so that the next client is served by the same one).  What
# doc/poolers.md says, as behaviour:
#
# - a session SET (idempotency.lease_timeout, idempotency.max_key_length)
#   by one client stays on the server connection and reaches the next
#   client of it, which never asked for it: a hazard of every transaction
#   pooler, not of the extension, asserted here so that the page stays
#   true;
# - SET LOCAL and the per-call arguments (claim's lease) end with their
#   transaction: the next client gets the defaults;
# - ALTER DATABASE / ALTER ROLE ... SET reach every client, from the server
#   connections opened after them (PgBouncer's RECONNECT, on its admin
#   console, renews those already open);
# - startup options (PGOPTIONS) with an idempotency setting: PgBouncer
#   refuses the connection (1.18: "unsupported startup parameter:
#   options"; 1.26: "unsupported startup parameter in options: ...").
. "$(dirname "$0")/sql.bash"
sql_setup idem_pooler_settings
idem_log "sql_settings: PgBouncer $(pooler_version)"
dir=$SQL_TMP/pool1
sql_pooler "$dir" 1

failed=0
check() {	# check WHAT ACTUAL EXPECTED
  if [ "$2" = "$3" ]; then echo "ok: $1: $2"; else echo "FAILED: $1: $2, not $3"; failed=1; fi
}
# lease: a new client claims a new key with no lease given and prints the
# lease it got, in seconds (the callers run it in a subshell, $(lease), so
# the keys are told apart by the clock)
lease() {
  sql_pooled "$dir" "$e" -v key="lease-$(date +%s%N)" "$@" <<'SQL'
SELECT outcome FROM idempotency.claim(:'key') \gset
SELECT round(extract(epoch FROM retry_after)) FROM idempotency.claim(:'key');
SQL
}
# long_key: a new client claims a new key of 28 characters (those of lease
# have 25); prints the
# outcome or the error's SQLSTATE
long_key() {
  sql_pooled "$dir" "$e" -v ON_ERROR_STOP=0 -v VERBOSITY=sqlstate \
    -c "SELECT outcome FROM idempotency.claim('long-key-$(date +%s%N)')" 2>&1 | sed 's/^.*ERROR: *//'
}
reconnect() {
  psql -X -q -h 127.0.0.1 -p "$(sed -n 's/^listen_port = //p' "$dir/pgbouncer.ini")" \
    -U postgres -d pgbouncer -c RECONNECT >/dev/null
}

for e in c p; do
  db=$(sql_db "$e") user=$(sql_user "$e")
  check "$e: a client's lease by default" "$(lease)" 30

  sql_pooled "$dir" "$e" -c "SET idempotency.lease_timeout = '2 seconds'"
  check "$e: after another client's session SET of lease_timeout, the next client's lease (leaked)" "$(lease)" 2
  sql_pooled "$dir" "$e" -c "SET idempotency.max_key_length = 26"
  check "$e: after another client's session SET of max_key_length, the next client's 28-character key (leaked)" "$(long_key)" 22023
  sql_pooled "$dir" "$e" -c 'RESET idempotency.lease_timeout' -c 'RESET idempotency.max_key_length'
  check "$e: after a RESET, the next client's lease" "$(lease)" 30
  check "$e: after a RESET, the next client's 28-character key" "$(long_key)" claimed

  check "$e: a lease SET LOCAL in a transaction" "$(sql_pooled "$dir" "$e" <<'SQL'
BEGIN;
SET LOCAL idempotency.lease_timeout = '2 seconds';
SELECT outcome FROM idempotency.claim('set-local') \gset
SELECT round(extract(epoch FROM retry_after)) FROM idempotency.claim('set-local');
COMMIT;
SQL
)" 2
  check "$e: after another client's SET LOCAL, the next client's lease" "$(lease)" 30
  check "$e: a lease given to claim" "$(sql_pooled "$dir" "$e" <<'SQL'
SELECT outcome FROM idempotency.claim('per-call', lease => '2 seconds') \gset
SELECT round(extract(epoch FROM retry_after)) FROM idempotency.claim('per-call');
SQL
)" 2
  check "$e: after another client's claim with a lease, the next client's lease" "$(lease)" 30

  psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "ALTER DATABASE $db SET idempotency.lease_timeout = '45 seconds'"
  check "$e: after ALTER DATABASE ... SET, a client on a server connection opened before" "$(lease)" 30
  reconnect
  check "$e: after ALTER DATABASE ... SET and RECONNECT, a client's lease" "$(lease)" 45
  check "$e: after ALTER DATABASE ... SET and RECONNECT, the next client's lease" "$(lease)" 45
  psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "ALTER ROLE $user IN DATABASE $db SET idempotency.lease_timeout = '50 seconds'" \
    -c "ALTER ROLE $user IN DATABASE $db SET idempotency.max_key_length = 26"
  reconnect
  check "$e: after ALTER ROLE ... IN DATABASE ... SET and RECONNECT, a client's lease" "$(lease)" 50
  check "$e: after ALTER ROLE ... IN DATABASE ... SET and RECONNECT, the next client's 28-character key" "$(long_key)" 22023
  psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "ALTER DATABASE $db RESET ALL" \
    -c "ALTER ROLE $user IN DATABASE $db RESET ALL"
  reconnect
  check "$e: after the RESETs and RECONNECT, a client's lease" "$(lease)" 30

  refused=$({ PGOPTIONS='-c idempotency.lease_timeout=2s' lease 2>&1 || true; } | sed -n 's/.*\(FATAL: *unsupported startup parameter[^:]*\).*/\1/p')
  # (an empty $refused is a connection PgBouncer let through: a failure)
  check "$e: a client with PGOPTIONS='-c idempotency.lease_timeout=2s' through PgBouncer $(pooler_version)" \
    "${refused:-accepted}" "${refused:-refused}"
done
exit "$failed"
