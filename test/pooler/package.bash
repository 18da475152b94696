# test/pooler/package.bash: sourced by test/pooler/go.sh and java.sh (not
# run), after their package's set-up (test/integration/go_package.bash,
# java_package.bash) and pooler.bash.
#
# package_poolers NAME: $tmp (a directory, mode 755), a fresh database
#   NAME of the C edition ($db; fresh_db), the cluster's own address
#   ($direct_host, $direct_port) and PgBouncer in transaction mode in front
#   of it with pools of 4 and 2 ($port4, $port2); at exit the app of
#   $server (a process or a process group) and the poolers are stopped and
#   $tmp removed.

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

package_poolers() {
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$tmp"
  trap package_cleanup EXIT
  fresh_db "$1"
  db=$PGDATABASE direct_host=$PGHOST direct_port=$PGPORT
  port4=$(free_port)
  pooler_start "$tmp/pool4" "$port4" 4
  port2=$(free_port)
  pooler_start "$tmp/pool2" "$port2" 2
}

package_cleanup() {
  [ -z "$server" ] || kill -- -"$server" 2>/dev/null || kill "$server" 2>/dev/null || true
  pooler_stop "$tmp/pool4"
  pooler_stop "$tmp/pool2"
  rm -rf "$tmp"
}
