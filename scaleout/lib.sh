# scaleout/lib.sh: shared steps of start.sh, stop.sh, rebalance.sh and
# bench.sh.  Sourced, not run; needs root (clusters run as postgres).
#
# Layout of $SCALEOUT_DIR (default /tmp/idempotency-scaleout):
#   bin          the bin directory of the server used
#   partitions   the number of partitions the proxy routes to
#   proxy/, p0/, p1/, ...   one cluster each: data/, server.log, port
# Every cluster listens on 127.0.0.1 (a free port from $SCALEOUT_PORT on)
# and on a unix socket in its own directory; each has a database
# "idempotency".
SCALEOUT_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IDEM_TOP=${IDEM_TOP:-$(dirname "$SCALEOUT_HOME")}
. "$IDEM_TOP/scripts/lib.sh"
SCALEOUT_DIR=${SCALEOUT_DIR:-/tmp/idempotency-scaleout}
SCALEOUT_PORT=${SCALEOUT_PORT:-6400}
SCALEOUT_DB=idempotency

so_die() { echo "scaleout: $*" >&2; exit 1; }

# so_bin: the bin directory recorded by start.sh.
so_bin() { cat "$SCALEOUT_DIR/bin"; }

# so_port NODE: the TCP port of a node (proxy, p0, p1, ...).
so_port() { cat "$SCALEOUT_DIR/$1/port"; }

# so_connstr NODE: libpq connection string of a node's database.
so_connstr() { echo "host=127.0.0.1 port=$(so_port "$1") dbname=$SCALEOUT_DB"; }

# so_psql NODE [DB] psql-args...: psql as postgres on a node.
so_psql() {
  local node=$1
  shift
  runuser -u postgres -- "$(so_bin)/psql" -X -q -v ON_ERROR_STOP=1 \
    -h 127.0.0.1 -p "$(so_port "$node")" -U postgres -d "$SCALEOUT_DB" "$@"
}

# so_free_port: the first port from SCALEOUT_PORT on that nobody listens on.
so_free_port() {
  local p=$SCALEOUT_PORT
  while ss -Htan "( sport = :$p )" | grep -q .; do p=$((p + 1)); done
  SCALEOUT_PORT=$((p + 1))
  echo "$p"
}

# so_install DIR: install what is missing, build, and put the extension
# into a private copy of the server in DIR; prints its bin directory.
so_install() {
  idem_ensure_packages $IDEM_PACKAGES "postgresql-$PG_MAJOR-plproxy" >&2
  idem_build
  idem_log "installing the extension into a private server copy in $1"
  mkdir -p "$1"
  chmod 755 "$1"
  idem_private_install "$1"
}

# so_new_node NODE: initdb and start a cluster in $SCALEOUT_DIR/NODE on a
# free port (trying the next one if another process takes it first) and
# create its database.
so_new_node() {
  local node=$1 dir=$SCALEOUT_DIR/$1 port try
  for try in 1 2 3 4 5; do
    port=$(so_free_port)
    rm -rf "$dir"
    if idem_start_cluster "$(so_bin)" "$dir" "$port" 127.0.0.1; then
      echo "$port" >"$dir/port"
      runuser -u postgres -- "$(so_bin)/createdb" -h 127.0.0.1 -p "$port" -U postgres "$SCALEOUT_DB"
      return
    fi
    idem_stop_cluster "$(so_bin)" "$dir"
  done
  so_die "could not start $node; see $dir/server.log"
}

# so_stop_node NODE: fast shutdown of a node's postmaster, by the PID in
# its postmaster.pid, waiting until it is gone.
so_stop_node() {
  local pidfile=$SCALEOUT_DIR/$1/data/postmaster.pid pid i
  [ -f "$pidfile" ] || return 0
  pid=$(head -1 "$pidfile")
  kill -INT "$pid" 2>/dev/null || return 0
  for i in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  so_die "postmaster $pid of $1 did not stop"
}

# so_partition_sql: the SQL that prepares a partition database.
so_partition_sql() {
  echo 'CREATE EXTENSION idempotency;'
  cat "$SCALEOUT_HOME/route.sql" "$SCALEOUT_HOME/partition.sql"
}

# so_server_options N: the OPTIONS list of foreign server "idempotency"
# for partitions p0 .. pN-1.
so_server_options() {
  local i opts=""
  for ((i = 0; i < $1; i++)); do
    opts+="${opts:+, }p$i '$(so_connstr "p$i")'"
  done
  echo "$opts"
}
