#!/usr/bin/env bash
# scripts/deb.sh [MAJOR] (make deb, make deb PG=17): the Debian binary
# package postgresql-MAJOR-idempotency, built from debian/ with
# dpkg-buildpackage -us -uc -b and pg_buildext, into build/deb/ (DEB_OUT
# moves it).  MAJOR (default 15) must be in debian/pgversions.
#
# The work tree (without .git and build products) is copied to
# build/deb/pgMAJOR/idempotency-VERSION and built there, so the tree itself
# is never written to.  debian/control is regenerated in the copy for MAJOR
# alone (PG_SUPPORTED_VERSIONS, which pg_buildext honours).  Missing build
# dependencies are installed with apt-get build-dep.
#
# 15 builds on the host (Debian 12); 17 and 18 build in the Debian chroots of
# scripts/chroot.sh (trixie, sid), under their lock, which get the build
# dependencies installed the first time; the .deb is copied out.  The last
# line printed is the path of the .deb.
set -euo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
. "$IDEM_TOP/scripts/chroot.sh"

m=${1:-${PG:-15}}
OUT=${DEB_OUT:-$IDEM_TOP/build/deb}
die() { echo "make deb: $*" >&2; exit 1; }

grep -qx -- "$m" "$IDEM_TOP/debian/pgversions" ||
  die "PostgreSQL '$m' is not in debian/pgversions ($(grep -v '^#' "$IDEM_TOP/debian/pgversions" | tr '\n' ' '))"
idem_suite_of "$m" >/dev/null || die "no Debian suite known for PostgreSQL $m"
[ "$(id -u)" -eq 0 ] || die "run as root (build dependencies are installed with apt, chroots need root)"
# Version of debian/changelog, without dpkg-dev (the first line's "(...)").
version=$(sed -n '1s/.*(\(.*\)).*/\1/p' "$IDEM_TOP/debian/changelog")
upstream=${version%-*}
pkg=postgresql-$m-idempotency

# copy_tree DEST: the work tree as a source package would have it.
copy_tree() {
  mkdir -p "$1"
  tar -C "$IDEM_TOP" --exclude=.git --exclude=./build --exclude=node_modules --exclude='*.o' \
    --exclude='*.so' --exclude='*.bc' --exclude=results --exclude=output_iso --exclude=tmp_check \
    --exclude='regression.*' --exclude=./test/expected --exclude="./sql/idempotency--1.0.sql" \
    --exclude='idempotency-*.zip' -cf - . | tar -C "$1" -xf -
}

# The build itself, as a script that runs on the host or in a chroot:
# build DIR MAJOR, where DIR holds the source copy idempotency-UPSTREAM.
build_script='
set -eu
dir=$1 m=$2 src=$3
cd "$dir/$src"
export DEBIAN_FRONTEND=noninteractive
# another run of apt (a parallel make test) is waited for, not failed on
apt_opts="-q -y -o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false -o DPkg::Lock::Timeout=600"
# apt-get, its output in DIR/apt.log (shown when it fails)
quiet_apt() { apt-get "$@" >>"$dir/apt.log" 2>&1 || { tail -20 "$dir/apt.log" >&2; exit 1; }; }
if ! command -v dpkg-checkbuilddeps >/dev/null; then
  quiet_apt -q -o Acquire::Check-Valid-Until=false update
  quiet_apt $apt_opts install dpkg-dev
fi
if ! dpkg-checkbuilddeps >/dev/null 2>&1; then
  echo "==> installing the build dependencies: $(dpkg-checkbuilddeps 2>&1 | sed "s/.*dependencies: //")" >&2
  # Debian'"'"'s postgresql packages would create and start a "main" cluster
  mkdir -p /etc/postgresql-common
  grep -qs "^create_main_cluster" /etc/postgresql-common/createcluster.conf ||
    echo "create_main_cluster = false" >>/etc/postgresql-common/createcluster.conf
  quiet_apt -q -o Acquire::Check-Valid-Until=false update
  quiet_apt $apt_opts build-dep .
  # the server of the major built for (substvars read its jit Provides)
  dpkg-query -W -f="\${Status}" postgresql-$m 2>/dev/null | grep -q "install ok installed" ||
    quiet_apt $apt_opts install postgresql-$m postgresql-server-dev-$m
fi
[ -x /usr/lib/postgresql/$m/bin/pg_config ] || quiet_apt $apt_opts install postgresql-$m postgresql-server-dev-$m
export PG_SUPPORTED_VERSIONS=$m
pg_buildext updatecontrol
grep -q "^Package: postgresql-$m-idempotency\$" debian/control
echo "==> dpkg-buildpackage -us -uc -b for PostgreSQL $m" >&2
dpkg-buildpackage -us -uc -b >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log" >&2; exit 1; }
rm -rf "$dir/$src"
'

mkdir -p "$OUT"
rm -f "$OUT/${pkg}_"*.deb "$OUT/${pkg}-dbgsym_"*
t0=$SECONDS
if idem_runs_natively "$m"; then
  stage=$OUT/pg$m
  rm -rf "$stage"
  copy_tree "$stage/idempotency-$upstream"
  bash -c "$build_script" deb "$stage" "$m" "idempotency-$upstream" ||
    die "build failed; log in $stage/build.log"
else
  ch=$(idem_chroot_dir "$m")
  stage=$OUT/pg$m
  rm -rf "$stage"
  mkdir -p "$stage"
  idem_chroot_lock "$m"
  idem_chroot_ensure "$m" || die "chroot for PostgreSQL $m could not be built"
  trap 'idem_chroot_release "$ch"' EXIT
  trap 'exit 130' INT TERM HUP
  idem_chroot_mount "$ch" || die "could not mount proc and /dev in $ch"
  idem_chroot_sync_host "$ch"
  rm -rf "$ch/build/deb"
  copy_tree "$ch/build/deb/idempotency-$upstream"
  rc=0
  idem_chroot_exec "$ch" bash -c "$build_script" deb /build/deb "$m" "idempotency-$upstream" || rc=$?
  cp "$ch/build/deb/build.log" "$ch/build/deb/apt.log" "$stage/" 2>/dev/null || true
  cp "$ch"/build/deb/*.deb "$ch"/build/deb/*.buildinfo "$ch"/build/deb/*.changes "$stage/" 2>/dev/null || true
  rm -rf "$ch/build/deb"
  [ "$rc" -eq 0 ] || die "build in $(idem_suite_of "$m") failed; log in $stage/build.log"
fi
deb=$(ls "$stage/${pkg}_${version}_"*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || die "dpkg-buildpackage made no ${pkg}_${version}_*.deb; log in $stage/build.log"
# to build/deb/, with the debug symbols package if debhelper made one;
# build/deb/pgN/ keeps them too, beside the .changes and .buildinfo
cp "$stage/${pkg}"*_"${version}"_*.deb "$OUT/"
idem_log "built $(basename "$deb") in $((SECONDS - t0))s ($(idem_suite_of "$m"))"
echo "$OUT/$(basename "$deb")"
