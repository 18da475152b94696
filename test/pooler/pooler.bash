# test/pooler/pooler.bash: sourced by the pooler group's tests.  Starts and
# stops Debian's PgBouncer in transaction mode, as doc/poolers.md configures
# it, in front of the test cluster (PGHOST, a unix socket, and PGPORT).
#
# pooler_start DIR PORT POOL_SIZE [INI_LINE...]: PgBouncer as the postgres
#   user on 127.0.0.1:PORT (and a unix socket in DIR), pool_mode =
#   transaction, default_pool_size = POOL_SIZE; every role of the cluster
#   logs in without a password (auth_type = trust, names looked up with
#   auth_query as postgres), since the cluster trusts its socket.  Each
#   INI_LINE is added to the [pgbouncer] section (for example
#   "max_prepared_statements = 100" where PgBouncer is 1.21 or later).
# pooler_stop DIR: stops the PgBouncer of DIR by the PID in its pidfile.
# pooler_version: PgBouncer's version, e.g. 1.18.0.
# pooler_supports_prepared: true where PgBouncer keeps protocol-level
#   prepared statements across server connections (1.21 and later).
# pooler_url DIR DB [USER]: a libpq URL to the pooler of DIR (TCP).

pooler_bin() { command -v pgbouncer || echo /usr/sbin/pgbouncer; }

pooler_version() { "$(pooler_bin)" --version | sed -n '1s/^PgBouncer \([0-9.]*\).*/\1/p'; }

pooler_supports_prepared() {
  local v
  v=$(pooler_version)
  [ "$(printf '%s\n1.21.0\n' "$v" | sort -V | head -1)" = 1.21.0 ]
}

pooler_start() {
  local dir=$1 port=$2 pool=$3 line
  shift 3
  mkdir -p "$dir"
  chown postgres: "$dir"
  echo '"postgres" ""' >"$dir/userlist.txt"
  {
    cat <<INI
[databases]
* = host=$PGHOST port=$PGPORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $dir
pool_mode = transaction
default_pool_size = $pool
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 1000
auth_type = trust
auth_file = $dir/userlist.txt
auth_user = postgres
admin_users = postgres
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    for line in "$@"; do echo "$line"; done
  } >"$dir/pgbouncer.ini"
  chown postgres: "$dir"/*
  runuser -u postgres -- "$(pooler_bin)" -d -q "$dir/pgbouncer.ini" || {
    cat "$dir/pgbouncer.log" >&2
    return 1
  }
  for _ in $(seq 100); do
    psql -X -q -h 127.0.0.1 -p "$port" -d postgres -Atc 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "pooler_start: PgBouncer on 127.0.0.1:$port does not answer" >&2
  cat "$dir/pgbouncer.log" >&2
  return 1
}

pooler_stop() {
  local dir=$1 pid
  [ -f "$dir/pgbouncer.pid" ] || return 0
  pid=$(cat "$dir/pgbouncer.pid")
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

pooler_url() { echo "postgresql://${3:-postgres}@127.0.0.1:$(sed -n 's/^listen_port = //p' "$1/pgbouncer.ini")/$2"; }
