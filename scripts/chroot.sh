# scripts/chroot.sh: a Debian chroot per PostgreSQL major, for the majors
# that the host's Debian release does not ship (test/matrix.sh, make test).
# Sourced, not run; needs root.
#
#   major  Debian release  where it runs
#   15     12 bookworm     the host itself
#   17     13 trixie       /var/tmp/idempotency-chroots/pg17
#   18     unstable (sid)  /var/tmp/idempotency-chroots/pg18
#
# A chroot is built once (debootstrap --variant=minbase, then every package
# of scripts/lib.sh and test/run.sh for that major) and reused while its
# stamp file matches the recipe below; anything else is thrown away and
# rebuilt.  IDEM_CHROOTS moves the cache (default /var/tmp/idempotency-chroots).
# While a chroot is in use, proc, /dev (a private bind) and a tmpfs /dev/shm
# are mounted in it; idem_chroot_release stops whatever still runs inside
# (by PID) and unmounts them.  A lock file per chroot keeps two runs (two
# worktrees, say) from sharing one at the same time.

IDEM_CHROOTS=${IDEM_CHROOTS:-/var/tmp/idempotency-chroots}
IDEM_MIRROR=${IDEM_MIRROR:-http://deb.debian.org/debian}
# Bump when the recipe changes: chroots with another stamp are rebuilt.
IDEM_CHROOT_RECIPE=1

# idem_chroot_configure DIR: apt in a new chroot takes the archive as the
# snapshot it is (old Valid-Until) and installs no recommends; no service
# starts on install (policy-rc.d), no "main" cluster is created; the host's
# resolver and certificates are copied in.
idem_chroot_configure() {
  local dir=$1
  cat >"$dir/etc/apt/apt.conf.d/99idempotency" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
  printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
  chmod 755 "$dir/usr/sbin/policy-rc.d"
  mkdir -p "$dir/etc/postgresql-common"
  echo 'create_main_cluster = false' >"$dir/etc/postgresql-common/createcluster.conf"
  idem_chroot_sync_host "$dir"
}

# idem_suite_of MAJOR: the Debian suite that ships postgresql-MAJOR.
idem_suite_of() {
  case $1 in
  15) echo bookworm ;;
  17) echo trixie ;;
  18) echo sid ;;
  *) return 1 ;;
  esac
}

# idem_host_suite: the suite of the running system (bookworm, trixie, sid).
idem_host_suite() {
  local codename
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  # sid's os-release says trixie/forky with "n/a" or no version; the
  # chroots built here carry a marker instead
  if [ -f /etc/idempotency-chroot ]; then
    cat /etc/idempotency-chroot
  else
    echo "$codename"
  fi
}

# idem_runs_natively MAJOR: true when MAJOR belongs on this system (the host
# for 15, or inside the chroot built for MAJOR).
idem_runs_natively() {
  [ "$(idem_suite_of "$1")" = "$(idem_host_suite)" ]
}

# idem_chroot_packages MAJOR: what a chroot for MAJOR gets installed, the
# packages of scripts/lib.sh (IDEM_PACKAGES) and test/run.sh (TEST_PACKAGES)
# plus the tools the scripts use that minbase lacks.
idem_chroot_packages() {
  local m=$1
  echo "build-essential postgresql-$m postgresql-server-dev-$m
    postgresql-$m-cron postgresql-$m-pgtap postgresql-$m-plproxy postgresql-$m-pgaudit
    libtap-parser-sourcehandler-pgtap-perl libipc-run-perl libpq-dev
    redis-server libhiredis-dev python3-psycopg2 python3-flask nodejs npm
    iproute2 procps ca-certificates flex bison libkrb5-dev pgbouncer
    liblz4-dev libzstd-dev libcurl4-gnutls-dev autoconf"
}

idem_chroot_dir() { echo "$IDEM_CHROOTS/pg$1"; }

# idem_chroot_stamp MAJOR: the stamp a complete chroot for MAJOR carries.
idem_chroot_stamp() {
  echo "recipe=$IDEM_CHROOT_RECIPE suite=$(idem_suite_of "$1") mirror=$IDEM_MIRROR"
  echo "packages=$(idem_chroot_packages "$1" | tr -s ' \n' ' ')"
}

# idem_chroot_mount DIR: proc, /dev (bound privately: nothing mounted under
# it reaches the host's /dev) and a fresh tmpfs /dev/shm.
idem_chroot_mount() {
  local ch=$1
  mountpoint -q "$ch/proc" || mount -t proc proc "$ch/proc" || return 1
  if ! mountpoint -q "$ch/dev"; then
    mount --bind /dev "$ch/dev" && mount --make-private "$ch/dev" || return 1
  fi
  mountpoint -q "$ch/dev/shm" || mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ch/dev/shm"
}

# idem_chroot_procs DIR: PIDs of the processes whose root is DIR.
idem_chroot_procs() {
  local ch p root
  ch=$(readlink -f "$1")
  for p in /proc/[0-9]*; do
    root=$(readlink "$p/root" 2>/dev/null) || continue
    [ "$root" = "$ch" ] && echo "${p#/proc/}"
  done
  return 0
}

# idem_chroot_release DIR: stop what still runs inside DIR (TERM, then
# KILL, each by PID), then unmount everything mounted below DIR, deepest
# first.  Says so on stderr when it had to stop anything.
idem_chroot_release() {
  local ch pids i m
  ch=$(readlink -f "$1")
  [ -d "$ch" ] || return 0
  pids=$(idem_chroot_procs "$ch")
  if [ -n "$pids" ]; then
    idem_log "still running in $ch, stopping: $(echo $pids)"
    ps -o pid,args -p "$(echo $pids | tr ' ' ,)" >&2 || true
    kill -TERM $pids 2>/dev/null
    for i in $(seq 50); do
      pids=$(idem_chroot_procs "$ch")
      [ -z "$pids" ] && break
      sleep 0.2
    done
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    sleep 0.5
  fi
  # mount points below DIR, deepest first (mountinfo field 5)
  for m in $(awk -v ch="$ch" '$5 == ch || index($5, ch "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" || idem_log "could not unmount $m"
  done
}

# idem_chroot_exec DIR CMD...: run CMD in DIR with a clean environment plus
# the variables named in IDEM_CHROOT_ENV and the proxy variables (those
# that are set).
idem_chroot_exec() {
  local ch=$1 v envs=()
  shift
  for v in ${IDEM_CHROOT_ENV:-} http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -n "${!v+x}" ] && envs+=("$v=${!v}")
  done
  # node trusts the bundle of idem_chroot_sync_host too, not only its own
  chroot "$ch" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    "${envs[@]}" "$@"
}

# idem_chroot_sync_host DIR: what reaching the package registries takes,
# as the host has it: name resolution, the host's CA bundle (where the
# network passes through an inspecting proxy, its CA is in there) and npm's
# configuration.  Done at every use, since the host's may change.
idem_chroot_sync_host() {
  local ch=$1 f
  cp -L /etc/resolv.conf "$ch/etc/resolv.conf" 2>/dev/null
  for f in /etc/ssl/certs/ca-certificates.crt /etc/npmrc /root/.npmrc; do
    if [ -f "$f" ]; then
      mkdir -p "$ch$(dirname "$f")"
      cp -L "$f" "$ch$f"
    fi
  done
  return 0
}

# idem_chroot_build MAJOR: debootstrap and provision the chroot for MAJOR
# into DIR.new, then move it to DIR with its stamp (only a finished chroot
# ever has one).  Packages that the suite does not have (checked with
# apt-cache) are left out and listed in /etc/idempotency-chroot-missing.
idem_chroot_build() {
  local m=$1 suite dir new p want=() missing=() apt_opts
  suite=$(idem_suite_of "$m") || { echo "no Debian suite known for PostgreSQL $m" >&2; return 1; }
  dir=$(idem_chroot_dir "$m")
  new=$dir.new
  idem_chroot_release "$new"
  rm -rf "$new"
  mkdir -p "$IDEM_CHROOTS"
  command -v debootstrap >/dev/null || idem_ensure_packages debootstrap || return 1
  idem_log "pg$m: debootstrap $suite into $new"
  debootstrap --variant=minbase "$suite" "$new" "$IDEM_MIRROR" >"$IDEM_CHROOTS/pg$m.debootstrap.log" 2>&1 || {
    tail -20 "$IDEM_CHROOTS/pg$m.debootstrap.log" >&2
    idem_chroot_release "$new"
    return 1
  }
  idem_chroot_configure "$new"
  echo "$suite" >"$new/etc/idempotency-chroot"

  idem_chroot_mount "$new" || { idem_chroot_release "$new"; return 1; }
  apt_opts="-q -o Acquire::Check-Valid-Until=false"
  if ! idem_chroot_exec "$new" apt-get $apt_opts update >"$IDEM_CHROOTS/pg$m.apt.log" 2>&1; then
    tail -20 "$IDEM_CHROOTS/pg$m.apt.log" >&2
    idem_chroot_release "$new"
    return 1
  fi
  for p in $(idem_chroot_packages "$m"); do
    if idem_chroot_exec "$new" apt-cache show "$p" >/dev/null 2>&1; then
      want+=("$p")
    else
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -gt 0 ] && idem_log "pg$m: $suite has no ${missing[*]}"
  printf '%s\n' "${missing[@]}" >"$new/etc/idempotency-chroot-missing"
  idem_log "pg$m: installing ${#want[@]} packages"
  if ! idem_chroot_exec "$new" apt-get $apt_opts install -y --no-install-recommends "${want[@]}" \
      >>"$IDEM_CHROOTS/pg$m.apt.log" 2>&1; then
    tail -30 "$IDEM_CHROOTS/pg$m.apt.log" >&2
    idem_chroot_release "$new"
    return 1
  fi
  idem_chroot_exec "$new" apt-get clean >/dev/null 2>&1
  idem_chroot_release "$new"
  idem_chroot_stamp "$m" >"$new/.idempotency-stamp"
  idem_chroot_release "$dir"
  rm -rf "$dir"
  mv "$new" "$dir"
}

# idem_chroot_lock MAJOR: hold an exclusive lock on the chroot of MAJOR
# until the calling shell exits (waits for another run to finish with it).
idem_chroot_lock() {
  mkdir -p "$IDEM_CHROOTS"
  exec {IDEM_CHROOT_LOCK_FD}>"$IDEM_CHROOTS/pg$1.lock"
  if ! flock -n "$IDEM_CHROOT_LOCK_FD"; then
    idem_log "pg$1: waiting for another run to release $(idem_chroot_dir "$1")"
    flock "$IDEM_CHROOT_LOCK_FD"
  fi
}

# idem_chroot_ensure MAJOR: the chroot for MAJOR exists and is complete
# (its stamp matches), building it if not.  Call with the lock held.
idem_chroot_ensure() {
  local m=$1 dir
  dir=$(idem_chroot_dir "$m")
  if [ -f "$dir/.idempotency-stamp" ] && [ "$(cat "$dir/.idempotency-stamp")" = "$(idem_chroot_stamp "$m")" ]; then
    return 0
  fi
  [ -e "$dir" ] && idem_log "pg$m: $dir is incomplete or outdated, rebuilding"
  idem_chroot_build "$m"
}

# Run, not sourced: bash scripts/chroot.sh build|rebuild|shell MAJOR [CMD...]
#   build    make sure the chroot of MAJOR is there and complete
#   rebuild  build it anew
#   shell    run CMD (default: bash) inside it, mounted for the time
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
  . "$IDEM_TOP/scripts/lib.sh"
  cmd=${1:-} m=${2:-}
  idem_suite_of "$m" >/dev/null 2>&1 && ! idem_runs_natively "$m" || {
    echo "usage: $0 build|rebuild|shell MAJOR [CMD...]  (MAJOR: 17 or 18)" >&2
    exit 2
  }
  shift 2
  ch=$(idem_chroot_dir "$m")
  idem_chroot_lock "$m"
  case $cmd in
  build) idem_chroot_ensure "$m" ;;
  rebuild) rm -f "$ch/.idempotency-stamp"; idem_chroot_ensure "$m" ;;
  shell)
    idem_chroot_ensure "$m" || exit 1
    trap 'idem_chroot_release "$ch"' EXIT
    trap 'exit 130' INT TERM HUP
    idem_chroot_mount "$ch" || exit 1
    idem_chroot_sync_host "$ch"
    IDEM_CHROOT_ENV="PG_MAJOR" PG_MAJOR=$m idem_chroot_exec "$ch" "${@:-bash}"
    ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
  esac
fi
