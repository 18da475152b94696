# scripts/lib.sh: shared steps of `make run`, `make test` and `make bench`.
# Sourced, not run.  Everything here works as root on a fresh Debian 12 and
# runs PostgreSQL as the "postgres" OS user (initdb refuses root).
#
# PG_MAJOR (environment, default 15) picks the PostgreSQL major: 15 is
# Debian 12's own; 17 and 18 run in the chroots of scripts/chroot.sh, where
# they are the system's (see test/matrix.sh and doc/testing.md).

PG_MAJOR=${PG_MAJOR:-15}
export PG_MAJOR
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PGXS_DIR=/usr/lib/postgresql/$PG_MAJOR/lib/pgxs

# Debian packages that building, running and testing need.
IDEM_PACKAGES="build-essential postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR
  postgresql-$PG_MAJOR-cron postgresql-$PG_MAJOR-pgtap
  libtap-parser-sourcehandler-pgtap-perl libipc-run-perl libpq-dev"

idem_log() { printf '==> %s\n' "$*" >&2; }

# idem_free_port: a TCP port of 127.0.0.1 that nothing listens on now
idem_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# idem_commit: the checkout's commit, short, or ? outside a git checkout.
idem_commit() { git -C "$IDEM_TOP" rev-parse --short HEAD 2>/dev/null || echo '?'; }

# idem_server_version BIN: the version of BIN/postgres, e.g. 15.20.
idem_server_version() { "$1/postgres" --version | sed -n 's/^postgres (PostgreSQL) \([0-9.]*\).*/\1/p'; }

# idem_ensure_packages PKG...: apt-get install whatever is missing.  In a
# chroot of scripts/chroot.sh, the packages its suite does not have (listed
# in /etc/idempotency-chroot-missing when it was built) are skipped.
idem_ensure_packages() {
  local missing=() p
  for p in "$@"; do
    if [ -f /etc/idempotency-chroot-missing ] && grep -qx -- "$p" /etc/idempotency-chroot-missing; then
      idem_log "skipping $p: not in $(cat /etc/idempotency-chroot 2>/dev/null)"
      continue
    fi
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  idem_log "installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${missing[*]}; run as root or install them" >&2
    return 1
  fi
  # Debian's postgresql package would create and start a "main" cluster;
  # we only ever use throwaway clusters of our own.
  mkdir -p /etc/postgresql-common
  grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf ||
    echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# idem_vendor FILE: the path of FILE among the vendored sources that tests
# build offline (pg_tle, Citus), or nothing (status 1).  Looked for in
# $IDEM_VENDOR, beside the repository (../shared/vendor), in
# /build/shared/vendor (where test/matrix.sh copies them into a chroot) and
# in /work/shared/vendor (for tests that run from a copy of the tree, which
# is not beside it).
idem_vendor() {
  local d
  for d in "${IDEM_VENDOR:-/nonexistent}" "$IDEM_TOP/../shared/vendor" \
      /build/shared/vendor /work/shared/vendor; do
    [ -f "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

# idem_host_only WHAT: for a test that one CI run needs only once: inside a
# chroot of scripts/chroot.sh (another major's run) it prints the skip line
# ("the host's run (PostgreSQL 15) WHAT") and exits 0; on the host, nothing.
idem_host_only() {
  [ -f /etc/idempotency-chroot ] || return 0
  echo "skipped: inside the $(cat /etc/idempotency-chroot) chroot; the host's run (PostgreSQL 15) $*"
  exit 0
}

# idem_build: compile the extension against Debian's PostgreSQL $PG_MAJOR.
# -k: a failed build reports every file that does not compile, not the first.
idem_build() {
  make -k -s -C "$IDEM_TOP" PG_CONFIG=$PG_BIN/pg_config >/dev/null
}

# idem_private_install DIR: a relocated copy of the server with the
# extension installed into it, so that test runs never touch (or race on)
# the system installation.  Prints the copy's bin directory.
idem_private_install() {
  local dir=$1
  rm -rf "$dir/inst"
  mkdir -p "$dir/inst/usr/lib/postgresql" "$dir/inst/usr/share/postgresql"
  cp -a /usr/lib/postgresql/$PG_MAJOR "$dir/inst/usr/lib/postgresql/"
  cp -a /usr/share/postgresql/$PG_MAJOR "$dir/inst/usr/share/postgresql/"
  make -s -C "$IDEM_TOP" PG_CONFIG="$dir/inst$PG_BIN/pg_config" install >/dev/null
  echo "$dir/inst$PG_BIN"
}

# idem_start_cluster BINDIR DIR PORT [LISTEN [PRELOAD]]: initdb and start a
# cluster in DIR/data, owned by postgres, with its socket in DIR and the
# libraries PRELOAD (default pg_cron) in shared_preload_libraries; the
# lines of IDEM_CLUSTER_CONF (if set) are added to its configuration.
idem_start_cluster() {
  local bin=$1 dir=$2 port=$3 listen=${4:-} preload=${5:-pg_cron}
  mkdir -p "$dir"
  chown postgres: "$dir"
  runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres \
    --no-sync -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '$listen'
port = $port
unix_socket_directories = '$dir'
shared_preload_libraries = '$preload'
cron.database_name = 'postgres'
cron.host = '$dir'
max_connections = 100
wal_level = logical
max_replication_slots = 8
max_wal_senders = 8
max_prepared_transactions = 10
log_line_prefix = '%m [%p] %d '
${IDEM_CLUSTER_CONF:-}
CONF
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -s start
}

# idem_stop_cluster BINDIR DIR: stop the cluster of DIR (pg_ctl signals
# the postmaster whose PID is in DIR/data/postmaster.pid).
idem_stop_cluster() {
  local bin=$1 dir=$2
  [ -f "$dir/data/postmaster.pid" ] || return 0
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast -w -s stop || true
}
