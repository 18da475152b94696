#!/usr/bin/env bash
# test/integration/package.sh: the Debian package, as a user gets it.
#
# Builds postgresql-15-idempotency with `make deb` (scripts/deb.sh), then, in
# a Debian 12 chroot that has no source tree (only the .deb and the
# regression tests are copied in), installs it with apt, checks that
# dpkg -L lists the module, the control file, every SQL script and the
# manual, creates a fresh cluster as postgres (pg_cron and the library
# preloaded, wal_level = logical, as test/run.sh's clusters have), runs CREATE
# EXTENSION and the regression and isolation tests (test/sql, test/specs,
# expected/) against the installed files, stops the cluster, purges the
# package and checks that its files are gone.
#
# The chroot (debootstrap --variant=minbase bookworm plus postgresql-15 and
# postgresql-15-cron) is built once, about 1-2 minutes, and cached in
# /var/tmp/idempotency-chroots/deb-bookworm while its stamp matches the
# recipe below; a lock file keeps two runs from sharing it at once.
# Skipped (exit 0, with a message) only where a chroot cannot be made at
# all: not root, or no debootstrap to be had.  Inside the PostgreSQL 17/18
# chroots of test/matrix.sh it is skipped too: the host's pass runs it.
set -euo pipefail
TOP=${IDEM_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$TOP/scripts/lib.sh"
. "$TOP/scripts/chroot.sh"
M=15
SUITE=bookworm
PKG=postgresql-$M-idempotency
CH=$IDEM_CHROOTS/deb-$SUITE
# Bump when the recipe changes: a chroot with another stamp is rebuilt.
RECIPE=1
CH_PACKAGES="postgresql-$M postgresql-$M-cron"
STAMP="recipe=$RECIPE suite=$SUITE mirror=$IDEM_MIRROR packages=$CH_PACKAGES"
t_start=$SECONDS
skip() { echo "SKIP package test: $*"; exit 0; }
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "==> package: $* ($((SECONDS - t_start))s)"; }

[ -f /etc/idempotency-chroot ] && skip "inside the $(cat /etc/idempotency-chroot) chroot; the host's run (PostgreSQL 15) builds and tests the package"
[ "$(id -u)" -eq 0 ] || skip "needs root for debootstrap, chroot and apt"
command -v dpkg >/dev/null && command -v apt-get >/dev/null || skip "not a Debian system (no dpkg/apt-get)"
command -v debootstrap >/dev/null || idem_ensure_packages debootstrap || true
command -v debootstrap >/dev/null || skip "debootstrap is not installed and could not be installed"

WORK=$(mktemp -d "${IDEM_TEST_WORK:-/tmp}/package.XXXXXX")

# 1. the package, from the tree (into WORK, not the tree's build/deb)
step "make deb"
DEB_OUT=$WORK/deb make -s -C "$TOP" deb PG=$M >"$WORK/make-deb.log" 2>&1 ||
  { tail -40 "$WORK/make-deb.log"; fail "make deb failed (log $WORK/make-deb.log)"; }
deb=$(tail -1 "$WORK/make-deb.log")
[ -f "$deb" ] || { tail -20 "$WORK/make-deb.log"; fail "make deb printed no .deb path"; }
version=$(dpkg-deb -f "$deb" Version)
echo "built $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"

# 2. the chroot, under its lock
mkdir -p "$IDEM_CHROOTS"
exec {lock_fd}>"$CH.lock"
if ! flock -n "$lock_fd"; then
  step "waiting for another run to release $CH"
  flock "$lock_fd"
fi

cleanup() {
  local rc=$?
  # the cluster first (pg_ctl signals the postmaster of postmaster.pid),
  # then whatever else still runs in the chroot (by PID), then the mounts
  if [ -f "$CH/pkgtest/cluster/data/postmaster.pid" ] && mountpoint -q "$CH/proc"; then
    chroot "$CH" runuser -u postgres -- /usr/lib/postgresql/$M/bin/pg_ctl \
      -D /pkgtest/cluster/data -m immediate -w -s stop >/dev/null 2>&1 || true
  fi
  idem_chroot_release "$CH"
  if [ "$rc" -eq 0 ]; then
    rm -rf "$WORK"
  else
    cp -r "$CH/pkgtest/out" "$WORK/" 2>/dev/null || true
    echo "package test files kept in $WORK" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

build_chroot() {
  local new=$CH.new
  idem_chroot_release "$new"
  rm -rf "$new"
  step "debootstrap --variant=minbase $SUITE into $new"
  debootstrap --variant=minbase "$SUITE" "$new" "$IDEM_MIRROR" >"$CH.debootstrap.log" 2>&1 || {
    tail -20 "$CH.debootstrap.log"
    idem_chroot_release "$new"
    fail "debootstrap failed (log $CH.debootstrap.log)"
  }
  # the suite with its updates and security fixes, as the host has them: the
  # package depends on the host's postgresql-15 minor release or later
  cat >"$new/etc/apt/sources.list" <<EOF
deb $IDEM_MIRROR $SUITE main
deb $IDEM_MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
  idem_chroot_configure "$new"
  idem_chroot_mount "$new" || { idem_chroot_release "$new"; fail "could not mount proc and /dev in $new"; }
  step "installing $CH_PACKAGES in the chroot"
  if ! { idem_chroot_exec "$new" apt-get -q update &&
         idem_chroot_exec "$new" apt-get -q install -y $CH_PACKAGES; } >"$CH.apt.log" 2>&1; then
    tail -20 "$CH.apt.log"
    idem_chroot_release "$new"
    fail "apt-get in the chroot failed (log $CH.apt.log)"
  fi
  idem_chroot_exec "$new" apt-get clean >/dev/null 2>&1
  idem_chroot_release "$new"
  echo "$STAMP" >"$new/.idempotency-stamp"
  idem_chroot_release "$CH"
  rm -rf "$CH"
  mv "$new" "$CH"
}

if [ "$(cat "$CH/.idempotency-stamp" 2>/dev/null)" != "$STAMP" ]; then
  [ -e "$CH" ] && step "$CH is incomplete or outdated, rebuilding"
  build_chroot
fi
idem_chroot_mount "$CH" || fail "could not mount proc and /dev in $CH"
idem_chroot_sync_host "$CH"
in_ch() { idem_chroot_exec "$CH" "$@"; }

# leftovers of an interrupted run
# pkg_state: dpkg's status of the package in the chroot, "" when unknown
pkg_state() { in_ch dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null || true; }
case $(pkg_state) in ''|*not-installed) ;; *)
  step "purging $PKG left installed by an earlier run"
  in_ch apt-get -q remove --purge -y "$PKG" >/dev/null ;;
esac
rm -rf "$CH/pkgtest"
[ -e "$CH/usr/share/postgresql/$M/extension/idempotency.control" ] && fail "the chroot has idempotency files without the package"

# 3. only the .deb and the tests go in: no Makefile, no sources
mkdir -p "$CH/pkgtest/test" "$CH/pkgtest/out"
cp "$deb" "$CH/pkgtest/"
cp -r "$TOP/test/sql" "$TOP/test/specs" "$CH/pkgtest/test/"
cp -r "$TOP/expected" "$CH/pkgtest/test/expected"
# the chroot's postgres user, whose uid need not be the host's
in_ch chown -R postgres: /pkgtest
find "$CH/pkgtest" -name '*.c' -o -name Makefile -o -name '*.control' | grep -q . && fail "source files in the chroot"

step "apt-get install ./$(basename "$deb")"
if ! in_ch apt-get -q install -y "/pkgtest/$(basename "$deb")" >"$WORK/install.log" 2>&1; then
  # built against a newer minor release than the cached chroot has
  step "refreshing the chroot's package lists and retrying"
  in_ch apt-get -q update >>"$WORK/install.log" 2>&1
  in_ch apt-get -q install -y "/pkgtest/$(basename "$deb")" >>"$WORK/install.log" 2>&1 ||
    { tail -20 "$WORK/install.log"; fail "apt-get install of the package failed"; }
fi
[ "$(pkg_state) $(in_ch dpkg-query -W -f='${Version}' "$PKG")" = "install ok installed $version" ] ||
  fail "$PKG $version is not installed"

# 4. what the package holds
in_ch dpkg -L "$PKG" >"$WORK/files"
want=(
  "/usr/lib/postgresql/$M/lib/idempotency.so"
  "/usr/share/postgresql/$M/extension/idempotency.control"
  "/usr/share/doc/$PKG/copyright"
)
for f in "$TOP"/sql/idempotency--*.sql; do
  want+=("/usr/share/postgresql/$M/extension/$(basename "$f")")
done
# the install script of the first version is assembled at build time
want+=("/usr/share/postgresql/$M/extension/idempotency--1.0.sql")
for f in "$TOP"/doc/*.md; do
  want+=("/usr/share/doc/postgresql-doc-$M/extension/idempotency/$(basename "$f")")
done
want+=("/usr/share/doc/$PKG/README.md")
missing=0
for f in "${want[@]}"; do
  # dh_compress gzips the larger documents
  if grep -qxF "$f" "$WORK/files" && [ -f "$CH$f" ]; then :
  elif grep -qxF "$f.gz" "$WORK/files" && [ -f "$CH$f.gz" ]; then :
  else
    echo "not in dpkg -L $PKG (or not on disk): $f"
    missing=1
  fi
done
[ "$missing" -eq 0 ] || { cat "$WORK/files"; fail "the package lacks files"; }
echo "dpkg -L $PKG: $(grep -c . "$WORK/files") paths, all ${#want[@]} expected ones present"
default_version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$CH/usr/share/postgresql/$M/extension/idempotency.control")

# 5. a fresh cluster and the tests, inside the chroot as postgres
{
  declare -f idem_start_cluster idem_stop_cluster
  cat <<EOF
set -u
BIN=/usr/lib/postgresql/$M/bin
PGXS=/usr/lib/postgresql/$M/lib/pgxs
export PGHOST=/pkgtest/cluster PGPORT=5432 PGUSER=postgres
idem_start_cluster "\$BIN" /pkgtest/cluster 5432 '' 'pg_cron, idempotency' || { cat /pkgtest/cluster/server.log; exit 1; }
as_pg() { runuser -u postgres -- env PGHOST=\$PGHOST PGPORT=\$PGPORT PGUSER=postgres "\$@"; }
rc=0
as_pg "\$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c 'CREATE DATABASE pkgtest' || rc=1
as_pg "\$BIN/psql" -X -v ON_ERROR_STOP=1 -d pkgtest -c 'CREATE EXTENSION idempotency' || rc=1
got=\$(as_pg "\$BIN/psql" -X -At -v ON_ERROR_STOP=1 -d pkgtest \
  -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") || rc=1
echo "installed version: \$got"
[ "\$got" = "$default_version" ] || { echo "CREATE EXTENSION did not give version $default_version"; rc=1; }
cd /pkgtest
tests=\$(ls test/sql/*.sql | xargs -n1 basename | sed 's/\.sql\$//')
specs=\$(ls test/specs/*.spec | xargs -n1 basename | sed 's/\.spec\$//')
# each runner's output in out/NAME.log; its failures and summary shown
run_group() {	# run_group NAME RUNNER DB TESTS...
  local name=\$1 runner=\$2 db=\$3 grc=0
  shift 3
  as_pg "\$PGXS/src/test/\$runner" --bindir="\$BIN" --inputdir=test --outputdir=out/\$name \
    --dbname=\$db --load-extension=idempotency "\$@" >out/\$name.log 2>&1 || grc=1
  grep -iE 'failed|passed' out/\$name.log | sed "s/^/\$name: /"
  echo "\$name: \$(grep -cE '\\.\\.\\. +ok|^ok +[0-9]' out/\$name.log) of \$# tests ok"
  [ -s out/\$name/regression.diffs ] && { echo "---- out/\$name/regression.diffs"; head -200 out/\$name/regression.diffs; }
  [ \$grc -eq 0 ] || rc=1
}
run_group regress regress/pg_regress contrib_regression \$tests
run_group isolation isolation/pg_isolation_regress isolation_regression \$specs
idem_stop_cluster "\$BIN" /pkgtest/cluster
exit \$rc
EOF
} >"$CH/pkgtest/run.sh"
mkdir -p "$CH/pkgtest/out/regress" "$CH/pkgtest/out/isolation"
in_ch chown -R postgres: /pkgtest/out
step "cluster, CREATE EXTENSION, regression and isolation tests against the installed package"
in_ch bash /pkgtest/run.sh || fail "tests against the installed package failed"

# 6. remove it; nothing of it stays
step "apt-get remove --purge $PKG"
in_ch apt-get -q remove --purge -y "$PKG" >"$WORK/remove.log" 2>&1 ||
  { tail -20 "$WORK/remove.log"; fail "apt-get remove --purge failed"; }
case $(pkg_state) in ''|*not-installed) ;; *) fail "$PKG still known to dpkg after the purge: $(pkg_state)" ;; esac
left=0
while read -r f; do
  [ -d "$CH$f" ] && continue	# shared directories stay
  if [ -e "$CH$f" ]; then echo "left behind: $f"; left=1; fi
done <"$WORK/files"
[ "$left" -eq 0 ] || fail "files of $PKG stayed after the purge"
for d in "/usr/lib/postgresql/$M/lib/bitcode/idempotency" "/usr/share/doc/postgresql-doc-$M/extension/idempotency" "/usr/share/doc/$PKG"; do
  [ -e "$CH$d" ] && fail "left behind: $d"
done
rm -rf "$CH/pkgtest"
echo "package test passed in $((SECONDS - t_start))s: $(basename "$deb") built, installed, tested, purged"
