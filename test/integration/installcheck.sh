#!/usr/bin/env bash
# test/integration/installcheck.sh: make installcheck, the command every
# PGXS extension answers (doc/testing.md), the way someone who is not root
# runs it: as the postgres OS user, with the test run's server copy's
# pg_config first on PATH and nothing else given, make install into that
# copy, then make installcheck against a server started from it with no
# library preloaded and default settings.  The tests that need more
# (CONFIG_REGRESS and CONFIG_ISOLATION in the Makefile) start their own
# temporary server with test/installcheck.conf; the rest use the running
# one.  Passes when make installcheck does.
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
work_dir installcheck
CLUSTER=$WORK/cluster

# the tree as a user has it, with the build test/run.sh made (the same
# major), so that make install has nothing to compile
mkdir "$WORK/src"
tar -C "$IDEM_TOP" --exclude=.git --exclude=node_modules --exclude=results --exclude=output_iso \
  --exclude=output_config --exclude=tmp_check --exclude='regression.*' --exclude=./test/expected \
  -cf - . | tar -C "$WORK/src" -xf -
chown -R postgres: "$WORK"

# a server of the defaults: no shared_preload_libraries, wal_level replica,
# no prepared transactions; its socket in $CLUSTER, so the port may be the
# test cluster's
runuser -u postgres -- "$BIN/initdb" -D "$CLUSTER/data" -A trust -U postgres --no-sync \
  -E UTF8 --locale=C.UTF-8 >"$WORK/initdb.log"
at_exit 'idem_stop_cluster "$BIN" "$CLUSTER"'
runuser -u postgres -- "$BIN/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w -s \
  -o "-c listen_addresses='' -c unix_socket_directories='$CLUSTER' -p $PGPORT" start ||
  fail "the server did not start: $(tail -5 "$CLUSTER/server.log")"

as_user() {
  runuser -u postgres -- env -u PG_MAJOR -u PG_CONFIG -u PGOPTIONS -u PGDATABASE \
    PATH="$BIN:$PATH" PGHOST="$CLUSTER" PGPORT="$PGPORT" PGUSER=postgres "$@"
}
[ "$(as_user pg_config --bindir)" = "$BIN" ] || fail "pg_config on PATH is not the server copy's"
as_user make -s -C "$WORK/src" install >"$WORK/install.log" 2>&1 ||
  { tail -20 "$WORK/install.log"; fail "make install"; }
if ! as_user make -C "$WORK/src" installcheck >"$WORK/installcheck.log" 2>&1; then
  cat "$WORK/installcheck.log"
  for d in "$WORK/src" "$WORK/src/output_config" "$WORK/src/output_config/isolation"; do
    [ -s "$d/regression.diffs" ] && head -200 "$d/regression.diffs"
  done
  fail "make installcheck"
fi
grep -E '^(# )?(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests)|tests passed' "$WORK/installcheck.log" || true
echo "ok: make installcheck as postgres, pg_config on PATH: $(grep -cE '\.\.\. ok|^ok +[0-9]+ ' "$WORK/installcheck.log") tests passed"
