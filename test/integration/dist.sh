#!/usr/bin/env bash
# test/integration/dist.sh: the PGXN release zip (make dist) installs as a
# PGXN user installs it: unpacked anywhere, `make` and `make install`.
#
# Checks that the zip holds one top directory idempotency-<DISTVERSION>
# with META.json, the control file, the Makefile, the sources, the SQL
# scripts and the documentation, and nothing of git or of a build; then
# builds it against the host's PostgreSQL 15 and installs it into a
# staging directory (DESTDIR), where the library, the control file, every
# SQL script and the docs must land.  Needs the repository's git history
# (make dist is git archive), so it runs on the host, not in the 17/18
# chroots, whose tree copy has none.
. "$(dirname "$0")/lib.bash"
git -C "$TOP" rev-parse HEAD >/dev/null 2>&1 ||
  skip "$TOP is not a git work tree (make dist needs git archive)"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
[ -x "$PG_CONFIG" ] || skip "no PostgreSQL 15 server headers on this system"
command -v unzip >/dev/null || { apt-get install -y -q unzip >/dev/null 2>&1 || true; }
command -v unzip >/dev/null || fail "unzip is missing"

work_dir dist

version=$(sed -n 's/^DISTVERSION = //p' "$TOP/Makefile")
extversion=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$TOP/idempotency.control")
# git archive packs HEAD: a clone of the committed tree
git clone -q "$TOP" "$WORK/src"
make -s -C "$WORK/src" dist >/dev/null
zip=$WORK/src/idempotency-$version.zip
[ -f "$zip" ] || fail "make dist did not write idempotency-$version.zip"

unzip -q "$zip" -d "$WORK/unpacked"
[ "$(ls "$WORK/unpacked")" = "idempotency-$version" ] || fail "the zip's top directory is not idempotency-$version"
dir=$WORK/unpacked/idempotency-$version
for f in META.json idempotency.control Makefile README.md LICENSE CHANGELOG.md \
         src/idempotency.h sql/1.0 doc/reference.md; do
  [ -e "$dir/$f" ] || fail "the zip lacks $f"
done
[ -z "$(find "$dir" -name .git -o -name '*.o' -o -name '*.so' | head -1)" ] ||
  fail "the zip holds git metadata or build output"
echo "ok: idempotency-$version.zip has META.json, the sources and the docs"

make -s -C "$dir" PG_CONFIG="$PG_CONFIG" >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; fail "make failed"; }
make -s -C "$dir" PG_CONFIG="$PG_CONFIG" install DESTDIR="$WORK/stage" >"$WORK/install.log" 2>&1 ||
  { tail -20 "$WORK/install.log"; fail "make install failed"; }
pkglib=$WORK/stage$("$PG_CONFIG" --pkglibdir)
share=$WORK/stage$("$PG_CONFIG" --sharedir)
[ -f "$pkglib/idempotency.so" ] || fail "idempotency.so was not installed"
[ -f "$share/extension/idempotency.control" ] || fail "the control file was not installed"
# the install script of 1.0 and every update script, up to the default
for s in idempotency--1.0.sql $(cd "$TOP/sql" && ls idempotency--*--*.sql); do
  [ -f "$share/extension/$s" ] || fail "$s was not installed"
done
ls "$share/extension/" | grep -q -- "--$extversion\.sql$" || fail "no update script reaches $extversion"
[ -f "$share/doc/extension/idempotency/reference.md" ] || [ -n "$(find "$WORK/stage" -name reference.md | head -1)" ] ||
  fail "the documentation was not installed"
echo "ok: built from the zip and installed: the library, the control file, the SQL scripts up to $extversion and the docs"
