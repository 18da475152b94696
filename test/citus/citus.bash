# test/citus/citus.bash: Citus built offline from the vendored sources, and
# a coordinator with two workers on 127.0.0.1 for the tests of
# test/citus/*.sh (test/run.sh's group citus; doc/testing.md).  Sourced
# after scripts/lib.sh (test/run.sh) or test/integration/lib.bash (the
# tests), not run.
#
#   citus_version          the Citus that serves $PG_MAJOR (13.2.2 for 15
#                          to 17, 14.0.1 for 18)
#   citus_build            builds Citus from the vendored tarball (idem_vendor)
#                          against the system's headers, once: the files
#                          it installs are kept in $CITUS_CACHE (default
#                          /var/tmp/idempotency-citus) under the Citus
#                          version and the server's, so a second run only
#                          copies them.  Prints the directory they are in
#                          (a DESTDIR); on failure, the reason on stderr
#                          and status 1
#   citus_install BIN      copies them into the server copy of BIN (the
#                          test run's, as idem_private_install made it)
#   citus_start            (a test, after work_dir) the cluster: three
#                          throwaway clusters in $WORK on 127.0.0.1, ports
#                          CITUS_PORT (default IDEM_TEST_PORT + 1) to +2,
#                          run by postgres with shared_preload_libraries =
#                          $CITUS_PRELOAD ('citus, idempotency'); database
#                          $CITUS_DB (citus_regression) on each with the
#                          extensions $CITUS_EXTENSIONS (citus idempotency);
#                          the workers added to the coordinator.  Stopped
#                          at exit (at_exit).
#   cq NODE SQL            psql on NODE (coord, w1 or w2) in $CITUS_DB as
#                          postgres, unaligned, tuples only, stopping at the
#                          first error
#   cq_state NODE SQL      runs SQL on NODE and prints the SQLSTATE of its
#                          error, or "ok" (VERBOSITY verbose)
#   citus_assert_shells_empty
#                          fails the test when the relation of a Citus table
#                          of the extension holds a page on any node: its
#                          rows belong in shards, never in the shell
#
# Citus's build dependencies from apt are in test/run.sh's TEST_PACKAGES on
# the majors of CITUS_MAJORS.
CITUS_CACHE=${CITUS_CACHE:-/var/tmp/idempotency-citus}
CITUS_DB=${CITUS_DB:-citus_regression}
CITUS_PRELOAD=${CITUS_PRELOAD:-citus, idempotency}
CITUS_EXTENSIONS=${CITUS_EXTENSIONS:-citus idempotency}

citus_version() {
  case $PG_MAJOR in
  15 | 16 | 17) echo 13.2.2 ;;
  18) echo 14.0.1 ;;
  *) return 1 ;;
  esac
}

citus_build() {
  local version tarball key dir inc
  version=$(citus_version) || { echo "no vendored Citus serves PostgreSQL $PG_MAJOR" >&2; return 1; }
  tarball=$(idem_vendor "citus-$version.tar.gz") ||
    { echo "citus-$version.tar.gz not found among the vendored sources (../shared/vendor)" >&2; return 1; }
  key=citus-$version-pg$(idem_server_version "$PG_BIN")
  dir=$CITUS_CACHE/$key
  mkdir -p "$CITUS_CACHE"
  (
    # one build at a time; a second run waits for it, then finds it done
    flock 9
    [ -f "$dir/done" ] && exit 0
    rm -rf "$dir"
    mkdir -p "$dir"
    idem_log "building Citus $version for PostgreSQL $PG_MAJOR (once; kept in $dir)"
    tar -C "$dir" -xzf "$tarball" || exit 1
    # Citus 13.2.2 keeps a fallback of have_createdb_privilege() for
    # PostgreSQL 15, which 15.20's commands/dbcommands.h declares itself:
    # drop the fallback where the server's header has it
    inc=$("$PG_BIN/pg_config" --includedir-server)
    if grep -q 'have_createdb_privilege' "$inc/commands/dbcommands.h" 2>/dev/null; then
      perl -0pi -e 's/static inline bool\nhave_createdb_privilege\(void\)\n\{.*?\n\}\n//s' \
        "$dir/citus/src/include/pg_version_compat.h" || exit 1
    fi
    {
      cd "$dir/citus" &&
        ./configure PG_CONFIG="$PG_BIN/pg_config" &&
        nice -n 19 make -j2 &&
        make DESTDIR="$dir/dest" install
    } >"$dir/build.log" 2>&1 || { tail -30 "$dir/build.log" >&2; exit 1; }
    rm -rf "$dir/citus"
    touch "$dir/done"
  ) 9>"$CITUS_CACHE/$key.lock" || { echo "Citus $version did not build against PostgreSQL $PG_MAJOR (log: $dir/build.log)" >&2; return 1; }
  echo "$dir/dest"
}

citus_install() {
  local bin=$1 dest
  dest=$(citus_build) || return 1
  # the server copy's root: BIN is <root>/usr/lib/postgresql/N/bin
  cp -a "$dest/usr/." "${bin%/usr/lib/postgresql/*}/usr/"
}

CITUS_PORT=${CITUS_PORT:-$((${IDEM_TEST_PORT:-5432} + 1))}
declare -A CITUS_PORTS=([coord]=$CITUS_PORT [w1]=$((CITUS_PORT + 1)) [w2]=$((CITUS_PORT + 2)))

cq() {
  runuser -u postgres -- env PGOPTIONS='-c client_min_messages=warning' \
    "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${CITUS_PORTS[$1]}" \
    -U postgres -d "$CITUS_DB" -c "$2"
}

cq_state() {
  local out
  out=$(runuser -u postgres -- "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
    -h 127.0.0.1 -p "${CITUS_PORTS[$1]}" -U postgres -d "$CITUS_DB" -c "$2" 2>&1) &&
    { echo ok; return 0; }
  sed -n 's/^.*ERROR: *\([0-9A-Z]\{5\}\):.*$/\1/p' <<<"$out" | head -1
  grep -q 'FATAL' <<<"$out" && echo FATAL
  return 0
}

citus_assert_shells_empty() {
  local node sizes
  for node in coord w1 w2; do
    sizes=$(cq "$node" "SELECT string_agg(logicalrelid::text || '=' || pg_relation_size(logicalrelid), ' ')
                          FROM pg_dist_partition WHERE logicalrelid::text LIKE 'idempotency.%'
                          AND pg_relation_size(logicalrelid) > 0")
    [ -z "$sizes" ] || fail "shells with rows on $node: $sizes"
  done
}

citus_start() {
  local node
  : "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
  [ -f "$($BIN/pg_config --pkglibdir)/citus.so" ] || citus_install "$BIN" ||
    fail "Citus is not installed in $BIN"
  for node in coord w1 w2; do
    at_exit "idem_stop_cluster '$BIN' '$WORK/$node'"
    # Citus commits a change of its tables on every node with two-phase
    # commit, one prepared transaction per shard: four shards a table keep
    # the cluster small and quick
    IDEM_CLUSTER_CONF="max_prepared_transactions = 100
citus.shard_count = 4" \
      idem_start_cluster "$BIN" "$WORK/$node" "${CITUS_PORTS[$node]}" 127.0.0.1 "$CITUS_PRELOAD" ||
      { cat "$WORK/$node/server.log"; fail "$node did not start"; }
    runuser -u postgres -- "$BIN/psql" -X -q -h 127.0.0.1 -p "${CITUS_PORTS[$node]}" -U postgres \
      -d postgres -c "CREATE DATABASE $CITUS_DB" >/dev/null || fail "$node: CREATE DATABASE"
    for ext in $CITUS_EXTENSIONS; do
      cq "$node" "CREATE EXTENSION $ext" >/dev/null || fail "$node: CREATE EXTENSION $ext"
    done
  done
  cq coord "SELECT citus_set_coordinator_host('127.0.0.1', ${CITUS_PORTS[coord]});
    SELECT citus_add_node('127.0.0.1', ${CITUS_PORTS[w1]});
    SELECT citus_add_node('127.0.0.1', ${CITUS_PORTS[w2]})" >/dev/null ||
    fail "citus_add_node"
  [ "$(cq coord "SELECT count(*) FROM pg_dist_node WHERE isactive AND noderole = 'primary'")" = 3 ] ||
    fail "the coordinator does not list itself and two workers"
}
