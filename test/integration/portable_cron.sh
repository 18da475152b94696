#!/usr/bin/env bash
# test/integration/portable_cron.sh: doc/managed-services.md on the portable
# edition, as a managed service has it: pg_cron preloaded with
# cron.database_name = 'postgres', the edition installed in database "app"
# by app_owner, a role that is no superuser, on each route (plain script,
# and pg_tle preloaded), and cleanup scheduled from "postgres" with
# cron.schedule_in_database.
#
# The page's sql blocks (```sql norun for test/integration/docs.sh, which
# runs on the C edition) run here, in order, each in the database and as the
# role that its first line names ("-- in database D, as R"; "the service's
# admin role" is the superuser postgres): those under "Route 1" on the pg_tle
# route only, those under "Route 2" on the plain route only, the others on
# both.  Its ```sh install commands are run as written, from a directory
# whose build/portable is the edition built here.  One change: the job's
# schedule '*/5 * * * *' becomes the shortest that this pg_cron takes
# ('1 seconds' from pg_cron 1.5, else '* * * * *'), so that a run comes
# within a minute.  Then it shows that
#   a) the job, run by pg_cron in "app" as app_owner, purged the expired
#      keys and kept the others (cron.job_run_details: succeeded);
#   b) idempotency.schedule_cleanup() in "app", called by app_owner (who
#      may not read cron.database_name) raises 0A000 with the hint that names the
#      cron.schedule_in_database statement (which is then run in
#      "postgres"), also with dblink installed (used for superusers only).
# Both routes run at once, each on its own cluster (unix sockets only,
# ports PORTABLE_CRON_PORT and the next, default 5493 and 5494).
#
# As root; on the PostgreSQL of $PG_MAJOR (default 15).  Run by make test
# in the integration group, or alone: bash test/integration/portable_cron.sh
. "$(dirname "$0")/lib.bash"
# each route's steps check their own outcomes and say what failed
set +e
. "$IDEM_TOP/test/portable/lib.sh"
unset PGHOST PGPORT PGUSER PGDATABASE PGOPTIONS
DOC=$IDEM_TOP/doc/managed-services.md
PORT=${PORTABLE_CRON_PORT:-5493}
WAIT=${PORTABLE_CRON_WAIT:-90}

idem_ensure_packages $IDEM_PACKAGES $PORTABLE_PACKAGES || exit 1
work_dir portable_cron
BIN=
at_exit 'for m in plain tle; do [ -n "$BIN" ] && idem_stop_cluster "$BIN" "$WORK/cluster-$m"; done'

BIN=$(portable_server_copy "$WORK") || fail "server copy"
portable_build_tle "$WORK" || fail "pg_tle build"
portable_build_edition "$WORK" || fail "portable.py build"
mkdir -p "$WORK/cwd/build" && ln -s "$PORTABLE_EDITION" "$WORK/cwd/build/portable"

# the shortest schedule that this pg_cron takes
cron_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$WORK/inst/usr/share/postgresql/$PG_MAJOR/extension/pg_cron.control")
case $cron_version in
1.[0-4]|1.[0-4][-.]*) SCHEDULE='* * * * *' ;;
*) SCHEDULE='1 seconds' ;;
esac

# The page's blocks, one file each in $WORK/blocks: NNN.sql (sql, with
# first line "-- in database D, as R", route in NNN.meta as "ROUTE DB ROLE")
# and NNN.sh (the psql lines of a sh block, with its route).
mkdir -p "$WORK/blocks"
python3 - "$DOC" "$WORK/blocks" "$SCHEDULE" <<'PY' || { echo "FAIL: cannot read $DOC"; exit 1; }
import re, sys
doc, out, schedule = sys.argv[1:]
route, n, block, info = "both", 0, None, None
for line in open(doc, encoding="utf-8").read().split("\n"):
    s = line.strip()
    if block is None:
        if line.startswith("## "):
            route = "tle" if "Route 1" in line else "plain" if "Route 2" in line else "both"
        elif s.startswith("```") and s[3:].split()[:1] in (["sql"], ["sh"]):
            block, info = [], s[3:].split()
        continue
    if s.startswith("```"):
        n += 1
        if info[0] == "sql":
            m = re.match(r"-- in database (\S+), as (.+)$", block[0].strip() if block else "")
            if not m:
                sys.exit(f"{doc}: sql block {n} does not say where it runs")
            role = "postgres" if m.group(2) == "the service's admin role" else m.group(2)
            text = "\n".join(block).replace("'*/5 * * * *'", "'%s'" % schedule)
            open(f"{out}/{n:03d}.sql", "w").write(text + "\n")
            open(f"{out}/{n:03d}.meta", "w").write(f"{route} {m.group(1)} {role}\n")
        else:
            cmds = [l.strip() for l in block if l.strip().startswith("psql ") and " -f " in l]
            if cmds:
                open(f"{out}/{n:03d}.sh", "w").write("\n".join(cmds) + "\n")
                open(f"{out}/{n:03d}.meta", "w").write(f"{route} - -\n")
        block = None
    else:
        block.append(line)
PY
# the install commands of the page, the update after the install included:
# the installer run again registers nothing new, and the update is a no-op
chown -R postgres: "$WORK"

# run_route MODE PORT: a cluster, the page's blocks, the checks; prints
# "MODE: ok" as its last line when all passed
run_route() {
  local mode=$1 port=$2 cluster=$WORK/cluster-$1 f meta route db role out
  local host=$cluster
  as_pg() { runuser -u postgres -- env PATH="$BIN:$PATH" PGHOST="$host" PGPORT="$port" "$@"; }
  q() { as_pg psql -X -q -At -v ON_ERROR_STOP=1 -U "$1" -d "$2" -c "$3"; }
  fail() { echo "$mode: FAIL: $*"; return 1; }

  idem_start_cluster "$BIN" "$cluster" "$port" '' || { cat "$cluster/server.log"; fail "cluster"; return 1; }
  if [ "$mode" = tle ]; then
    sed -i "s/^shared_preload_libraries = .*/shared_preload_libraries = 'pg_tle, pg_cron'/" "$cluster/data/postgresql.conf"
    runuser -u postgres -- "$BIN/pg_ctl" -D "$cluster/data" -l "$cluster/server.log" -w -s restart ||
      { fail "restart with pg_tle"; return 1; }
  fi

  for meta in "$WORK/blocks/"*.meta; do
    f=${meta%.meta}
    read -r route db role <"$meta"
    [ "$route" = both ] || [ "$route" = "$mode" ] || continue
    if [ -f "$f.sh" ]; then
      (cd "$WORK/cwd" && as_pg bash -e "$f.sh") >"$f.$mode.out" 2>&1 ||
        { cat "$f.$mode.out"; fail "doc block $(basename "$f") ($(cat "$f.sh"))"; return 1; }
    else
      as_pg psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" -f "$f.sql" >"$f.$mode.out" 2>&1 ||
        { cat "$f.$mode.out"; fail "doc block $(basename "$f") in $db as $role: $(sed -n 2p "$f.sql")"; return 1; }
    fi
  done

  # what the page promised
  [ "$(q app_owner postgres "SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'")" = f ] || { fail "app_owner is a superuser"; return 1; }
  case $mode in
  tle) out=$(q app_owner app "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") ;;
  plain) out=$(q app_owner app "SELECT version FROM idempotency.plain_version")
    [ -z "$(q app_owner app "SELECT 1 FROM pg_extension WHERE extname = 'idempotency'")" ] || { fail "plain: an extension"; return 1; } ;;
  esac
  [ "$out" = "$PORTABLE_VERSION" ] || { fail "installed version '$out', not $PORTABLE_VERSION"; return 1; }
  [ "$(q app_owner postgres "SELECT count(*) FROM cron.job WHERE jobname = 'idempotency-cleanup'")" = 0 ] ||
    { fail "the page's last block left the job"; return 1; }

  # a) the job, as the page schedules it, purges the expired keys in "app"
  q app_user app "
    SELECT idempotency.complete(key, (idempotency.claim(key, ttl => '1 second', lease => '1 second')).fence, '{}', 200)
      FROM (SELECT 'old-' || g AS key FROM generate_series(1, 20) g) k;
    SELECT idempotency.complete(key, (idempotency.claim(key)).fence, '{}', 200)
      FROM (SELECT 'live-' || g AS key FROM generate_series(1, 5) g) k;" >/dev/null ||
    { fail "app_user could not claim"; return 1; }
  sleep 1.1
  [ "$(q app_owner app "SELECT count(*) FROM idempotency.idempotency_keys WHERE expires_at < now()")" = 20 ] ||
    { fail "20 keys should have expired"; return 1; }
  local schedule_block jobid
  schedule_block=$(grep -l "cron.schedule_in_database('idempotency-cleanup'" "$WORK/blocks/"*.sql | head -1)
  # first with another schedule; called again, the page says, it changes
  # the job: the same job id, the page's schedule
  local other
  other=$(cat "$schedule_block")
  other=${other//"'$SCHEDULE'"/"'0 0 1 1 *'"}
  [ "$other" != "$(cat "$schedule_block")" ] || { fail "no schedule in $schedule_block"; return 1; }
  jobid=$(as_pg psql -X -q -At -v ON_ERROR_STOP=1 -U app_owner -d postgres -c "$other") ||
    { fail "scheduling"; return 1; }
  [ "$(as_pg psql -X -q -At -v ON_ERROR_STOP=1 -U app_owner -d postgres -f "$schedule_block")" = "$jobid" ] ||
    { fail "scheduling again made another job"; return 1; }
  [ "$(q app_owner postgres "SELECT count(*) || ' ' || min(schedule) FROM cron.job WHERE jobname = 'idempotency-cleanup'")" = "1 $SCHEDULE" ] ||
    { fail "scheduling again did not change the job's schedule"; return 1; }
  local waited=0 status=
  while [ $waited -lt "$WAIT" ]; do
    status=$(q app_owner postgres "SELECT string_agg(status, ',') FROM cron.job_run_details d JOIN cron.job j USING (jobid)
                                    WHERE j.jobname = 'idempotency-cleanup' AND d.status IN ('succeeded', 'failed')")
    [ -n "$status" ] && break
    sleep 2
    waited=$((waited + 2))
  done
  [ -n "$status" ] || { fail "no run of the job within ${WAIT}s"; return 1; }
  case $status in *failed*)
    q postgres postgres "SELECT return_message FROM cron.job_run_details"
    fail "the job failed"; return 1 ;;
  esac
  q app_owner postgres "SELECT username || ' ' || database FROM cron.job WHERE jobname = 'idempotency-cleanup'" |
    grep -qx 'app_owner app' || { fail "the job is not app_owner's in app"; return 1; }
  out=$(q app_owner app "SELECT count(*) FILTER (WHERE idempotency_key LIKE 'old-%') || ' ' ||
                                count(*) FILTER (WHERE idempotency_key LIKE 'live-%') FROM idempotency.idempotency_keys")
  [ "$out" = "0 5" ] || { fail "after the job: old and live keys '$out', not '0 5'"; return 1; }
  echo "$mode: pg_cron ran CALL idempotency.purge_expired() in app as app_owner after ${waited}s: 20 expired keys purged, 5 live kept"
  as_pg psql -X -q -At -U app_owner -d postgres -c "SELECT cron.unschedule('idempotency-cleanup')" >/dev/null

  # b) schedule_cleanup() in "app": the statement to run in "postgres"
  out=$(as_pg psql -X -q -At -U app_owner -d app -v VERBOSITY=verbose -c "SELECT idempotency.schedule_cleanup()" 2>&1)
  echo "$out" | grep -q '^ERROR:  0A000: ' || { echo "$out"; fail "schedule_cleanup: not 0A000"; return 1; }
  local stmt
  stmt=$(echo "$out" | sed -n 's/^HINT: .* run in database "postgres": \(SELECT cron.schedule_in_database(.*)\);$/\1/p')
  [ "$stmt" = "SELECT cron.schedule_in_database('idempotency-cleanup', '*/5 * * * *', 'CALL idempotency.purge_expired()', 'app')" ] ||
    { echo "$out"; fail "schedule_cleanup: the hint does not name the statement"; return 1; }
  out=$(q app_owner postgres "$stmt; SELECT schedule || ' ' || command || ' ' || database FROM cron.job WHERE jobname = 'idempotency-cleanup'" | tail -1)
  [ "$out" = "*/5 * * * * CALL idempotency.purge_expired() app" ] || { fail "the hint's statement: '$out'"; return 1; }
  q app_owner postgres "SELECT cron.unschedule('idempotency-cleanup')" >/dev/null
  echo "$mode: schedule_cleanup() in app: 0A000, the hint's statement scheduled the job from postgres"

  # ... and with dblink installed in "app": refused to a non-superuser
  q postgres app "CREATE EXTENSION dblink"
  out=$(as_pg psql -X -q -At -U app_owner -d app -v VERBOSITY=verbose -c "SELECT idempotency.schedule_cleanup()" 2>&1)
  echo "$out" | grep -q '^ERROR:  0A000: ' && echo "$out" | grep -q "^HINT: .* run in database \"postgres\": SELECT cron.schedule_in_database(" ||
    { echo "$out"; fail "schedule_cleanup with dblink, not a superuser: not 0A000 with the hint"; return 1; }
  echo "$mode: schedule_cleanup() with dblink installed, not a superuser: 0A000 with the same hint"

  echo "$mode: ok"
}

rc=0
run_route plain "$PORT" >"$WORK/plain.log" 2>&1 &
p1=$!
run_route tle "$((PORT + 1))" >"$WORK/tle.log" 2>&1 &
p2=$!
wait $p1; wait $p2
for m in plain tle; do
  cat "$WORK/$m.log"
  [ "$(tail -1 "$WORK/$m.log")" = "$m: ok" ] || rc=1
done
[ $rc -eq 0 ] && echo "portable cron: the page's examples and cleanup on pg_cron passed on both routes"
exit $rc
