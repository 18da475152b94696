#!/usr/bin/env bash
# test/portable/dump.sh MODE ROLE: pg_dump and pg_restore of a database
# that uses the portable edition (doc/managed-services.md, "Moving a
# database"), for the route MODE (plain or tle), installed by ROLE, a role
# that is no superuser.
#
# A source database gets work of every kind: a stored answer, a held key,
# a consumed token, a processed event, two pending outbox events, a state
# machine enforced on a table, and an application role granted with
# grant_usage().  It is dumped (pg_dump -Fc) at the default version, and,
# made at the first version the edition serves and updated, once more.
# Each dump is restored with pg_restore into a new database of the same
# server three ways (plain -d, --single-transaction, -j 2) and into a new
# server prepared as doc/managed-services.md says (pg_tle preloaded for
# the tle route, the roles created); pg_restore must exit 0, and the
# restored database keeps every promise: the answer replays, the held key
# stays held, a new fence is larger than any of the dump's, the token stays
# consumed, the event stays processed, the pending events are claimable,
# the machine refuses a forbidden move, and the application role may run
# exactly what it could run in the source.
#
# Run by test/portable/run.sh as the OS user of a superuser role (PGUSER),
# with the server's bin directory first in PATH, PGHOST/PGPORT set and
# PORTABLE_EDITION the built edition (test/portable/lib.sh).  Creates and
# drops the databases portable_dump_*, the role regress_portable_dump_app
# and a second cluster in a directory of its own (port PGPORT + 7), which
# it stops by pg_ctl.  Prints "ok: ..." lines and exits 0 when everything
# holds.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
mode=$1 role=$2
app=regress_portable_dump_app
default_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$TOP/idempotency.control")
first_version=$(sed -n "s/^PORTABLE_FIRST_VERSION = '\(.*\)'/\1/p" "$TOP/scripts/portable.py")
work=$(mktemp -d /tmp/portable-dump.XXXXXX)
other_port=$((PGPORT + 7))
other=$work/other

q() {	# q DB SQL...: psql as the superuser, on this server
  local db=$1
  shift
  psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" "$@"
}
fail() { echo "FAILED: $*"; exit 1; }
cleanup() {
  [ -f "$other/data/postmaster.pid" ] && pg_ctl -D "$other/data" -m fast -w -s stop || true
  for db in $(q postgres -c "SELECT datname FROM pg_database WHERE datname LIKE 'portable\_dump\_%'" 2>/dev/null); do
    q postgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
  done
  q postgres -c "DROP ROLE IF EXISTS $app" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
q postgres -c 'SET client_min_messages = warning' -c "DROP ROLE IF EXISTS $app" -c "CREATE ROLE $app"

# source DB VERSION [GRANT_AT]: the edition at VERSION (updated to the
# default one when older), with work of every kind; the application role
# is granted (grant_usage) after the update, or with GRANT_AT "before"
# right after the install, so that the update hands the grants on
source_db() {
  local db=$1 version=$2 grant_at=${3:-after} v f
  q postgres -c "CREATE DATABASE $db TEMPLATE template0" -c "GRANT CREATE ON DATABASE $db TO $role"
  q "$db" -c "GRANT CREATE ON SCHEMA public TO $role"
  case $mode in
  tle)
    q "$db" -c 'CREATE EXTENSION pg_tle'
    psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null
    q "$db" -c "SET ROLE $role" -c "CREATE EXTENSION idempotency VERSION '$version'" >/dev/null
    grant_before "$db" "$grant_at"
    q "$db" -c "SET ROLE $role" -c 'SET client_min_messages = warning' -c 'ALTER EXTENSION idempotency UPDATE'
    ;;
  plain)
    psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" -f "$PORTABLE_EDITION/idempotency--$version.sql" >/dev/null
    grant_before "$db" "$grant_at"
    v=$version
    while f=$(ls "$PORTABLE_EDITION"/idempotency--"$v"--*.sql 2>/dev/null | head -1) && [ -n "$f" ]; do
      psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" -f "$f" >/dev/null
      v=$(basename "$f" .sql)
      v=${v##*--}
    done
    ;;
  esac
  q "$db" -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET ROLE $role;
$([ "$grant_at" = before ] || echo "SELECT idempotency.grant_usage('$app');")
SELECT idempotency.define_state_machine('order', '{"PENDING": ["PAID"], "PAID": ["SHIPPED"]}');
CREATE TABLE public.orders (order_no text PRIMARY KEY, status text NOT NULL);
INSERT INTO public.orders VALUES ('O1', 'PENDING');
SELECT idempotency.enforce_state_machine('public.orders', 'status', 'order');
GRANT SELECT, UPDATE ON public.orders TO $app;
SET ROLE $app;
SELECT idempotency.complete('paid', fence, '{"id": 7, "amount": 100}', 201)
  FROM idempotency.claim('paid', '{"amount": 100}');
SELECT idempotency.claim('held', NULL, lease => '1 hour');
SELECT idempotency.consume_token(idempotency.issue_token());
SELECT idempotency.process_once('billing', 'evt-1');
SELECT idempotency.enqueue_event('order', 'O1', 'created', '{"n": 1}');
SELECT idempotency.enqueue_event('order', 'O1', 'paid', '{"n": 2}');
SQL
  [ "$(q "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")$(
        [ "$mode" = plain ] && q "$db" -c 'SELECT version FROM idempotency.plain_version')" = "$default_version" ] ||
    fail "$db is not at $default_version"
}

grant_before() {	# grant_before DB GRANT_AT: grant_usage now when GRANT_AT is "before"
  [ "$2" = before ] || return 0
  q "$1" -c "SET ROLE $role" -c "SELECT idempotency.grant_usage('$app')" >/dev/null
}

# what the application role may run and read in DB, one line per object
app_rights() {
  q "$1" -c "SELECT string_agg(o, ' ' ORDER BY o) FROM (
      SELECT p.oid::regprocedure::text AS o FROM pg_proc p
       WHERE p.pronamespace = 'idempotency'::regnamespace AND has_function_privilege('$app', p.oid, 'EXECUTE')
      UNION ALL
      SELECT c.relname || ':' || array_to_string(ARRAY(
               SELECT m FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) m
                WHERE has_table_privilege('$app', c.oid, m)), ',')
        FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'v', 'S')) s"
}

# check SRC DB: the restored DB keeps SRC's promises
check_restored() {
  local src=$1 db=$2 how=$3 max_fence token fence events err
  max_fence=$(q "$src" -c 'SELECT max(fence) FROM idempotency.idempotency_keys')
  token=$(q "$src" -c 'SELECT token FROM idempotency.tokens')
  [ "$(as_app "$db" -c "SELECT outcome || ' ' || response_code || ' ' || response_body
        FROM idempotency.claim('paid', '{\"amount\": 100}')")" = 'replay 201 {"id": 7, "amount": 100}' ] ||
    fail "$how: the stored answer does not replay"
  [ "$(as_app "$db" -c "SELECT outcome FROM idempotency.claim('held')")" = in_progress ] ||
    fail "$how: the held key is not held"
  fence=$(as_app "$db" -c "SELECT fence FROM idempotency.claim('new-after-restore')")
  [ -n "$fence" ] && [ "$fence" -gt "$max_fence" ] || fail "$how: new fence $fence not above the dump's $max_fence"
  as_app "$db" -c "SELECT idempotency.complete('new-after-restore', $fence, '{}', 200)" >/dev/null ||
    fail "$how: the application role cannot complete its key"
  [ "$(as_app "$db" -c "SELECT outcome FROM idempotency.execute('exec-after-restore', NULL, 'SELECT 1')")" = claimed ] ||
    fail "$how: the application role cannot execute"
  [ "$(as_app "$db" -c "SELECT idempotency.consume_token('$token')")" = f ] ||
    fail "$how: the consumed token was consumed again"
  [ "$(as_app "$db" -c "SELECT idempotency.process_once('billing', 'evt-1')")" = f ] ||
    fail "$how: the processed event was processed again"
  events=$(as_app "$db" -c "SELECT string_agg(event_type, ',' ORDER BY id) FROM idempotency.claim_events(10)")
  [ "$events" = created,paid ] || fail "$how: pending events claimed: '$events'"
  if err=$(as_app "$db" -v VERBOSITY=verbose -c "UPDATE public.orders SET status = 'SHIPPED' WHERE order_no = 'O1'" 2>&1); then
    fail "$how: the state machine let PENDING -> SHIPPED through"
  fi
  case $err in *"ERROR:  23514: "*) ;; *) fail "$how: a forbidden move: $err" ;; esac
  [ "$(app_rights "$db")" = "$(app_rights "$src")" ] || {
    diff <(app_rights "$src" | tr ' ' '\n') <(app_rights "$db" | tr ' ' '\n') | head -20
    fail "$how: the application role's rights differ from the source's (< source, > restored)"
  }
  echo "ok: $how"
}
as_app() {	# as_app DB ARGS...: psql as the application role
  local db=$1
  shift
  psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "SET ROLE $app" "$@"
}

# restore SRC DUMP [WAYS...]: into new databases of this server, three
# ways unless WAYS names them (pg_restore options before the database)
restore_here() {
  local src=$1 dump=$2 how dst n=0
  shift 2
  [ $# -gt 0 ] || set -- "-d" "--single-transaction -d" "-j 2 -d"
  for how in "$@"; do
    n=$((n + 1))
    dst=portable_dump_dst$n
    q postgres -c 'SET client_min_messages = warning' -c "DROP DATABASE IF EXISTS $dst" \
      -c "CREATE DATABASE $dst TEMPLATE template0"
    # shellcheck disable=SC2086
    pg_restore $how "$dst" "$dump" 2>"$work/restore.err" || {
      cat "$work/restore.err"
      fail "$mode: pg_restore $how of $src exited $?"
    }
    [ -s "$work/restore.err" ] && { cat "$work/restore.err"; fail "$mode: pg_restore $how of $src wrote errors"; }
    check_restored "$src" "$dst" "$mode: $src restored with pg_restore $how on the same server"
    q postgres -c "DROP DATABASE $dst"
  done
}

# the other server, prepared as doc/managed-services.md says: the
# libraries preloaded, the roles created
start_other() {
  mkdir -p "$other"
  initdb -D "$other/data" -A trust -U postgres --no-sync -E UTF8 --locale=C.UTF-8 >"$work/initdb.log"
  cat >>"$other/data/postgresql.conf" <<CONF
listen_addresses = ''
port = $other_port
unix_socket_directories = '$other'
shared_preload_libraries = '$( [ "$mode" = tle ] && echo pg_tle )'
CONF
  pg_ctl -D "$other/data" -l "$work/other.log" -w -s start
  PGHOST=$other PGPORT=$other_port psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "CREATE ROLE $role LOGIN" -c "CREATE ROLE $app" -c "CREATE DATABASE app"
}
restore_other() {
  local src=$1 dump=$2
  PGHOST=$other PGPORT=$other_port pg_restore -d app "$dump" 2>"$work/restore.err" || {
    cat "$work/restore.err"; fail "$mode: pg_restore of $src on another server exited $?"
  }
  [ -s "$work/restore.err" ] && { cat "$work/restore.err"; fail "$mode: pg_restore of $src on another server wrote errors"; }
  # the checks need the source, which is on this server: compare through files
  PGHOST=$other PGPORT=$other_port check_restored_remote "$src"
}
check_restored_remote() {
  local src=$1
  local srcrights
  srcrights=$(PGHOST=$SRC_HOST PGPORT=$SRC_PORT app_rights "$src")
  [ "$(as_app app -c "SELECT outcome || ' ' || response_body FROM idempotency.claim('paid', '{\"amount\": 100}')")" = \
    'replay {"id": 7, "amount": 100}' ] || fail "$mode: another server: the stored answer does not replay"
  [ "$(as_app app -c "SELECT outcome FROM idempotency.claim('held')")" = in_progress ] ||
    fail "$mode: another server: the held key is not held"
  [ "$(as_app app -c "SELECT fence FROM idempotency.claim('new-after-restore')")" -gt "$SRC_MAX_FENCE" ] ||
    fail "$mode: another server: a new fence is not above the dump's"
  [ "$(as_app app -c "SELECT idempotency.process_once('billing', 'evt-1')")" = f ] ||
    fail "$mode: another server: the processed event was processed again"
  [ "$(as_app app -c "SELECT count(*) FROM idempotency.claim_events(10)")" = 2 ] ||
    fail "$mode: another server: the pending events are not claimable"
  [ "$(app_rights app)" = "$srcrights" ] || fail "$mode: another server: the application role's rights differ"
  echo "ok: $mode: $src restored with pg_restore -d on another server"
}

SRC_HOST=$PGHOST SRC_PORT=$PGPORT
for src in portable_dump_default portable_dump_first; do
  case $src in
  portable_dump_default) source_db "$src" "$default_version" ;;
  portable_dump_first) source_db "$src" "$first_version" ;;
  esac
  pg_dump -Fc -d "$src" -f "$work/$src.dump"
  restore_here "$src" "$work/$src.dump"
done
# Granted before the update, from every version the route serves: the
# grants an update hands on (to new signatures, 1.5 to 1.6) are ordinary
# grants after it, not initial privileges, so that the dump keeps them
# (doc/portable.md, "Edition differences").
served=$(ls "$PORTABLE_EDITION" | sed -n 's/^idempotency--\([0-9.]*\)\.sql$/\1/p' | sort -V | tr '\n' ' ')
for v in $served; do
  src=portable_dump_granted_${v//./_}
  source_db "$src" "$v" before
  pg_dump -Fc -d "$src" -f "$work/$src.dump"
  restore_here "$src" "$work/$src.dump" "-d"
  q postgres -c "DROP DATABASE $src"
done

SRC_MAX_FENCE=$(q portable_dump_default -c 'SELECT max(fence) FROM idempotency.idempotency_keys')
start_other
restore_other portable_dump_default "$work/portable_dump_default.dump"

if [ "$mode" = tle ]; then
  # the installer registers only the versions the edition serves
  q postgres -c "CREATE DATABASE portable_dump_old TEMPLATE template0" \
    -c "GRANT CREATE ON DATABASE portable_dump_old TO $role"
  q portable_dump_old -c 'CREATE EXTENSION pg_tle'
  psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d portable_dump_old -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null
  for v in 1.0 1.1 1.2; do
    if err=$(q portable_dump_old -c "SET ROLE $role" -c "CREATE EXTENSION idempotency VERSION '$v'" 2>&1); then
      fail "tle: CREATE EXTENSION idempotency VERSION '$v' worked, a version the edition does not serve"
    fi
    case $err in *"no installation script nor update path for version \"$v\""*) ;;
    *) fail "tle: VERSION '$v': $err" ;; esac
  done
  [ "$(q portable_dump_old -c "SELECT string_agg(version, ' ' ORDER BY string_to_array(version, '.')::int[])
        FROM pgtle.available_extension_versions() WHERE name = 'idempotency'") " = "$served" ] ||
    fail "tle: the installer registered other versions than those served: $served"
  echo "ok: tle: the installer registers $first_version to $default_version only"
fi
echo "ok: the $mode route's dumps restore"
