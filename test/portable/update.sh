#!/usr/bin/env bash
# test/portable/update.sh MODE ROLE: the update path of the portable
# edition, in place of test/sql/upgrade.sql and
# test/sql/state_machine_update.sql where they cannot run
# (doc/portable.md, "Edition differences"; test/portable/run.sh skips them).
#
# Both start at the first version the edition serves (1.3, scripts/portable.py
# PORTABLE_FIRST_VERSION), for which the edition has scripts.
#
#   plain  ROLE installs the plain 1.3 script, grants an application role
#          (grant_usage), runs every update script to the default version;
#          the catalog (functions, relations, columns, constraints, indexes,
#          types, views, grants: the summary of test/sql/upgrade.sql) then
#          equals that of a fresh install granted alike, pg_init_privs has
#          nothing of it, plain_version says the version, and an update
#          script run on another version is refused (55000) and changes
#          nothing.
#   tle    ROLE (pgtle_admin) runs CREATE EXTENSION idempotency VERSION
#          '1.3' and ALTER EXTENSION UPDATE; granted after the update, the
#          catalog equals that of a fresh CREATE EXTENSION granted alike.
#          Then from 1.5 with the application role granted first: the 1.6
#          update hands its grants on to the new signatures of complete,
#          fail and execute, and the 1.8 update makes them ordinary grants
#          again, not initial privileges, which pg_dump would leave out
#          (ROLE is no superuser; doc/portable.md, "Edition differences").
#   both   from 1.5, a role granted EXECUTE on complete with the grant
#          option, which granted it on: the 1.6 update keeps the grant
#          option and the other role's EXECUTE.
#
# Run by test/portable/run.sh as the OS user of a superuser role (PGUSER),
# with psql in PATH, PGHOST/PGPORT set and PORTABLE_EDITION the built
# edition (test/portable/lib.sh).  Creates and drops the databases
# portable_update_* and the roles regress_portable_update_*; prints
# "ok: ..." and exits 0 when everything holds.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
mode=$1 role=$2
app=regress_portable_update_app
mon=regress_portable_update_mon
relay=regress_portable_update_relay
default_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$TOP/idempotency.control")
# the first version the edition serves, and so has scripts for
first=$(sed -n "s/^PORTABLE_FIRST_VERSION = '\(.*\)'/\1/p" "$TOP/scripts/portable.py")
# the catalog summary of test/sql/upgrade.sql, taken from there
summary_fn=$(sed -n '/^CREATE FUNCTION regress_catalog_summary/,/^\$\$;/p' "$TOP/test/sql/upgrade.sql")
[ -n "$summary_fn" ] || { echo "no regress_catalog_summary in test/sql/upgrade.sql"; exit 1; }

q() {	# q DB ARGS...: psql as the superuser
  local db=$1
  shift
  psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" "$@"
}
as_role() {	# as_role DB ARGS...: psql as ROLE
  local db=$1
  shift
  psql -X -q -At -v ON_ERROR_STOP=1 -U "$role" -d "$db" "$@"
}
fail() { echo "FAILED: $*"; exit 1; }
newdb() {
  q postgres -c 'SET client_min_messages = warning' -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1 TEMPLATE template0"
  q "$1" -c "GRANT CREATE ON DATABASE $1 TO $role" \
    -c 'SET check_function_bodies = off' -c "$summary_fn"
  if [ "$mode" = tle ]; then
    q "$1" -c 'CREATE EXTENSION pg_tle'
    as_role "$1" -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null
  fi
}
dbs="portable_update_old portable_update_new portable_update_grants"
cleanup() {
  for db in $dbs; do q postgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true; done
  for r in $app $mon $relay; do q postgres -c "DROP ROLE IF EXISTS $r" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
q postgres -c "CREATE ROLE $app" -c "CREATE ROLE $mon" -c "CREATE ROLE $relay"

plain_updates() {	# plain_updates DB FROM: every update script from FROM on
  local db=$1 v=$2 f
  while f=$(ls "$PORTABLE_EDITION"/idempotency--"$v"--*.sql 2>/dev/null | head -1) && [ -n "$f" ]; do
    as_role "$db" -f "$f" >/dev/null
    v=$(basename "$f" .sql)
    v=${v##*--}
  done
  [ "$v" = "$default_version" ] || fail "the updates from $2 end at $v, not $default_version"
}

newdb portable_update_old
newdb portable_update_new
case $mode in
plain)
  as_role portable_update_old -f "$PORTABLE_EDITION/idempotency--$first.sql" >/dev/null
  as_role portable_update_old -c "SELECT idempotency.grant_usage('$app')" >/dev/null
  plain_updates portable_update_old "$first"
  as_role portable_update_new -f "$PORTABLE_EDITION/idempotency--$default_version.sql" >/dev/null
  as_role portable_update_new -c "SELECT idempotency.grant_usage('$app')" >/dev/null
  ;;
tle)
  as_role portable_update_old -c "CREATE EXTENSION idempotency VERSION '$first'" \
    -c 'ALTER EXTENSION idempotency UPDATE' -c "SELECT idempotency.grant_usage('$app')" >/dev/null
  [ "$(q portable_update_old -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" = \
    "$default_version" ] || fail "ALTER EXTENSION UPDATE did not reach $default_version"
  as_role portable_update_new -c 'CREATE EXTENSION idempotency' \
    -c "SELECT idempotency.grant_usage('$app')" >/dev/null
  ;;
*) fail "unknown mode $mode" ;;
esac

old=$(q portable_update_old -c 'SELECT regress_catalog_summary()')
new=$(q portable_update_new -c 'SELECT regress_catalog_summary()')
case $old in *"routine idempotency.claim("*) ;; *) fail "the catalog summary has no claim()" ;; esac
case $old in *"relation idempotency_keys "*) ;; *) fail "the catalog summary has no idempotency_keys" ;; esac
[ "$old" = "$new" ] || {
  diff <(echo "$new") <(echo "$old") | head -40
  fail "$mode: the updated catalog differs from a fresh $default_version (< fresh, > updated)"
}
# the application role may call what grant_usage granted, on the updated one
[ "$(q portable_update_old -c "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'idempotency'::regnamespace
       AND p.proname IN ('claim', 'complete', 'execute', 'try_lock', 'lock_key')
       AND NOT has_function_privilege('$app', p.oid, 'EXECUTE')")" = 0 ] ||
  fail "$mode: the application role lost a grant in the updates"

if [ "$mode" = plain ]; then
  [ "$(q portable_update_old -c 'SELECT version FROM idempotency.plain_version')" = "$default_version" ] ||
    fail "plain_version is not $default_version after the updates"
  [ "$(q portable_update_old -c "SELECT count(*) FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid
       WHERE i.classoid = 'pg_proc'::regclass AND p.pronamespace = 'idempotency'::regnamespace")" = 0 ] ||
    fail "the plain script left rows in pg_init_privs"
  # an update script on another version: 55000, nothing changed
  script=$(ls "$PORTABLE_EDITION"/idempotency--"$first"--*.sql | head -1)
  if err=$(as_role portable_update_new -v VERBOSITY=verbose -f "$script" 2>&1); then
    fail "$(basename "$script") ran on $default_version"
  fi
  case $err in *"ERROR:  55000: "*) ;; *) fail "$(basename "$script") on $default_version: $err" ;; esac
  [ "$(q portable_update_new -c 'SELECT regress_catalog_summary()')" = "$new" ] &&
  [ "$(q portable_update_new -c 'SELECT version FROM idempotency.plain_version')" = "$default_version" ] ||
    fail "the refused update script changed the installation"

fi
if [ "$mode" = tle ]; then
  newdb portable_update_grants
  as_role portable_update_grants -c "CREATE EXTENSION idempotency VERSION '1.5'" \
    -c "SELECT idempotency.grant_usage('$app')" -c 'ALTER EXTENSION idempotency UPDATE' >/dev/null
  [ "$(q portable_update_grants -c "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'idempotency'::regnamespace
         AND p.proname IN ('complete', 'fail', 'execute')
         AND has_function_privilege('$app', p.oid, 'EXECUTE')")" = 3 ] ||
    fail "tle: the 1.5 to 1.6 update did not hand the grants on to complete, fail and execute"
  [ "$(q portable_update_grants -c "SELECT count(*) FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid
         WHERE i.classoid = 'pg_proc'::regclass AND p.pronamespace = 'idempotency'::regnamespace
         AND p.proname IN ('complete', 'fail', 'execute')
         AND EXISTS (SELECT FROM aclexplode(i.initprivs) a WHERE a.grantee = '$app'::regrole)")" = 0 ] ||
    fail "tle: the grants the 1.6 update handed on are still initial privileges after the update to $default_version"
fi

# Both routes, from 1.5: a role granted EXECUTE on complete with the grant
# option, which granted it on.  The 1.6 update keeps the grant option;
# ROLE is no member of that role, so it may not grant as it: the role's
# grant is made by the owner (doc/portable.md), and the grantee keeps
# EXECUTE.  (The C edition keeps the grantor too: test/sql/upgrade.sql.)
newdb portable_update_grants
if [ "$mode" = tle ]; then
  as_role portable_update_grants -c "CREATE EXTENSION idempotency VERSION '1.5'" >/dev/null
else
  as_role portable_update_grants -f "$PORTABLE_EDITION/idempotency--$first.sql" >/dev/null
  v=$first
  while [ "$v" != 1.5 ]; do
    f=$(ls "$PORTABLE_EDITION"/idempotency--"$v"--*.sql | head -1)
    as_role portable_update_grants -f "$f" >/dev/null
    v=$(basename "$f" .sql)
    v=${v##*--}
  done
fi
old_complete='idempotency.complete(text, bigint, jsonb, integer, text, interval)'
q portable_update_grants -c "GRANT USAGE ON SCHEMA idempotency TO $mon, $relay" \
  -c "GRANT EXECUTE ON FUNCTION $old_complete TO $mon WITH GRANT OPTION" \
  -c "SET ROLE $mon" -c "GRANT EXECUTE ON FUNCTION $old_complete TO $relay"
if [ "$mode" = tle ]; then
  as_role portable_update_grants -c 'ALTER EXTENSION idempotency UPDATE' >/dev/null
else
  plain_updates portable_update_grants 1.5
fi
new_complete="'idempotency.complete(text,bigint,jsonb,integer,text,interval,interval)'::regprocedure"
[ "$(q portable_update_grants -c "SELECT string_agg(a.grantee::regrole || ' ' || a.is_grantable, ',' ORDER BY a.grantee::regrole::text)
       FROM pg_proc p, aclexplode(p.proacl) a
      WHERE p.oid = $new_complete AND a.grantee IN ('$mon'::regrole, '$relay'::regrole)")" = \
  "$mon true,$relay false" ] ||
  fail "$mode: the 1.6 update did not hand on complete's grant option and the grant made with it"
q portable_update_grants -c "SET ROLE $mon" \
  -c "GRANT EXECUTE ON FUNCTION $(q portable_update_grants -c "SELECT $new_complete") TO $app" ||
  fail "$mode: the role lost its grant option on complete in the 1.6 update"
echo "ok: the $mode update from $first to $default_version equals a fresh install"
