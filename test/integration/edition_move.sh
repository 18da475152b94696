#!/usr/bin/env bash
# Moving a database between the C edition and the portable edition
# (doc/operations.md, "Moving between the C and the portable edition")
# keeps every promise.  The C side is the cluster of test/run.sh
# (IDEM_TEST_BIN, PGHOST, PGPORT); the portable side a cluster of its own,
# started here in a copy of the server without the C edition's files and
# with pg_tle preloaded (test/portable/lib.sh), on a unix socket only.
#
# Each move starts from a source populated with keys in every state
# (completed, failed with and without retry, in progress with a recovery
# point, taken over with a fence above 1, one whose lease runs out after
# the move), tokens (consumed and not), outbox events (published, claimed
# under a lease token, pending), inbox rows, a state machine enforced on
# an application table, and an application role given grant_usage() and
# one grant more.  Moves: plain -> C, tle -> C, C -> plain, C -> tle by
# pg_dump -Fc and pg_restore -L (scripts/edition_list.sh), and in place
# (scripts/edition_move.sql) plain -> C and C -> plain on the C cluster,
# plain -> tle and tle -> plain on the pg_tle one, and tle -> C and back
# on the pg_tle one through the plain edition (the C edition's files
# installed in between, and removed again).  After each: the rows are
# the source's, row for row (md5 of the ordered rows of each table), and
# so are the sequences; completed keys replay, failed ones replay their
# error; a take-over gets a fence above every fence of the source and the
# old holder's fence is refused with 55000; a token is consumed once;
# leased events are marked with their token, new events and leases number
# on; the inbox remembers; the state machine still refuses; the role's
# rights are those of a fresh install of the target edition plus its grant,
# and PUBLIC has none.  A view of the application on the old edition stops
# an in-place move (2BP01) and leaves the database as it was.
. "$(dirname "$0")/lib.bash"
. "$IDEM_TOP/test/portable/lib.sh"
CBIN=${IDEM_TEST_BIN:?}
CHOST=${PGHOST:?} CPORT=${PGPORT:?}
work_dir edition_move
PPORT=${EDITION_MOVE_PORT:-5613}
OWNER=regress_move_owner APP=regress_move_app
export PGOPTIONS='-c client_min_messages=warning'
started=$(date +%s)

# sidepsql SIDE ROLE DB ARGS...: psql on the C (c) or portable (p) cluster
sidepsql() {
  local side=$1 role=$2 db=$3
  shift 3
  if [ "$side" = c ]; then
    "$CBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CHOST" -p "$CPORT" -U "$role" -d "$db" "$@"
  else
    "$PBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK/portable" -p "$PPORT" -U "$role" -d "$db" "$@"
  fi
}
side_of() { case $1 in c) echo c ;; *) echo p ;; esac; }

PBIN=
c_dbs=()
at_exit 'for db in "${c_dbs[@]}"; do sidepsql c postgres postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"; done
  sidepsql c postgres postgres -c "DROP ROLE IF EXISTS $APP" -c "DROP ROLE IF EXISTS $OWNER"
  [ -n "$PBIN" ] && idem_stop_cluster "$PBIN" "$WORK/portable"'

PBIN=$(portable_server_copy "$WORK")
portable_build_tle "$WORK"
portable_build_edition "$WORK"
chown -R postgres: "$WORK"
idem_start_cluster "$PBIN" "$WORK/portable" "$PPORT" ''
echo "shared_preload_libraries = 'pg_tle, pg_cron'" >>"$WORK/portable/data/postgresql.conf"
runuser -u postgres -- "$PBIN/pg_ctl" -D "$WORK/portable/data" -l "$WORK/portable/server.log" -w -s restart
for s in c p; do
  sidepsql "$s" postgres postgres -c "DROP ROLE IF EXISTS $APP" -c "DROP ROLE IF EXISTS $OWNER" \
    -c "CREATE ROLE $OWNER LOGIN" -c "CREATE ROLE $APP LOGIN"
done
# pgtle_admin exists once pg_tle is created somewhere
sidepsql p postgres postgres -c 'CREATE EXTENSION pg_tle' -c "GRANT pgtle_admin TO $OWNER"

# emptydb SIDE DB: a new database there, owned by $OWNER
emptydb() {
  [ "$1" = c ] && c_dbs+=("$2")
  sidepsql "$1" postgres postgres -c "DROP DATABASE IF EXISTS $2" -c "CREATE DATABASE $2 OWNER $OWNER"
}
# install EDITION SIDE DB: the edition, C by the superuser, the portable
# edition by $OWNER (no superuser)
install() {
  local ed=$1 s=$2 db=$3
  case $ed in
  c) sidepsql "$s" postgres "$db" -c 'CREATE EXTENSION idempotency' ;;
  plain) install_plain "$s" "$db" ;;
  tle)
    sidepsql p postgres "$db" -c 'CREATE EXTENSION pg_tle'
    sidepsql p "$OWNER" "$db" -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null
    sidepsql p "$OWNER" "$db" -c 'CREATE EXTENSION idempotency'
    ;;
  esac
}
# newdb EDITION DB: a database with the edition, on its usual side
newdb() { emptydb "$(side_of "$1")" "$2" && install "$1" "$(side_of "$1")" "$2"; }
install_plain() { sidepsql "$1" "$OWNER" "$2" -f "$PORTABLE_EDITION/idempotency--$PORTABLE_VERSION.sql" >/dev/null; }
owner_of() { [ "$1" = c ] && echo postgres || echo "$OWNER"; }

# populate SIDE OWNER DB: the source's rows, grants and state machine
populate() {
  local s=$1 owner=$2 db=$3
  sidepsql "$s" "$owner" "$db" >/dev/null <<SQL
CREATE TABLE public.orders (id text PRIMARY KEY, state text NOT NULL);
INSERT INTO public.orders VALUES ('o1', 'new'), ('o2', 'paid');
SELECT idempotency.define_state_machine('order', '{"new": ["paid"], "paid": ["shipped"]}');
SELECT idempotency.enforce_state_machine('public.orders', 'state', 'order');
GRANT SELECT, UPDATE ON public.orders TO $APP;
SELECT idempotency.grant_usage('$APP');
GRANT SELECT ON idempotency.outbox_events TO $APP;
SQL
  sidepsql "$s" "$APP" "$db" >/dev/null <<'SQL'
SELECT idempotency.complete('paid', fence, '{"id": 7}', 201) FROM idempotency.claim('paid', '{"amount": 100}');
SELECT idempotency.complete('paid', fence, '{"id": 8}', scope => 'shop')
  FROM idempotency.claim('paid', '{"amount": 5}', scope => 'shop');
SELECT idempotency.fail('declined', fence, '{"declined": true}', 402, retryable => false)
  FROM idempotency.claim('declined');
SELECT idempotency.fail('retry', fence, '{"timeout": true}', 503) FROM idempotency.claim('retry');
SELECT idempotency.checkpoint('charging', fence, 'charged', lease => '1 hour')
  FROM idempotency.claim('charging', '{"amount": 3}');
SELECT idempotency.claim('held', lease => '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT idempotency.checkpoint('held', fence, 'step-2', lease => '1 hour') FROM idempotency.claim('held');
SELECT idempotency.checkpoint('expiring', fence, 'step-1', lease => '1 second') FROM idempotency.claim('expiring');
SELECT idempotency.consume_token(idempotency.issue_token());
SELECT idempotency.issue_token(ttl => '1 hour');
SELECT idempotency.enqueue_event('order', 'o1', 'paid', '{"n": 1}');
SELECT idempotency.mark_published(array_agg(id), max(lease_token)) FROM idempotency.claim_events(1);
SELECT idempotency.enqueue_event('order', 'o2', 'paid', '{"n": 2}', '{"h": 1}');
SELECT count(*) FROM idempotency.claim_events(1, '1 hour');
SELECT idempotency.enqueue_event('order', 'o3', 'paid', '{"n": 3}');
SELECT idempotency.process_once('billing', 'e1');
SELECT idempotency.process_once('billing', ARRAY['e2', 'e3']);
SELECT outcome FROM idempotency.transition('public.orders', 'id', 'o1', 'state', 'new', 'paid');
SQL
  # tokens with known values, one consumed
  sidepsql "$s" "$owner" "$db" -c "INSERT INTO idempotency.tokens (token, scope, expires_at, consumed_at)
    VALUES ('00000000-0000-4000-8000-000000000002', 'shop', now() + interval '1 day', NULL),
           ('00000000-0000-4000-8000-000000000003', '', now() + interval '1 day', now())"
}

# snapshot SIDE DB: md5 of the ordered rows of each table, and the sequences
snapshot() {
  sidepsql "$1" postgres "$2" <<'SQL'
SELECT t, md5(coalesce(string_agg(r, E'\n' ORDER BY r COLLATE "C"), '')), count(r)
  FROM (SELECT 'keys' AS t, x::text AS r FROM idempotency.idempotency_keys x
        UNION ALL SELECT 'tokens', x::text FROM idempotency.tokens x
        UNION ALL SELECT 'outbox', x::text FROM idempotency.outbox_events x
        UNION ALL SELECT 'inbox', x::text FROM idempotency.processed_events x
        UNION ALL SELECT 'machines', x::text FROM idempotency.state_machines x
        UNION ALL SELECT 'orders', x::text FROM public.orders x) s
 GROUP BY t ORDER BY t;
SELECT 'fence_seq', last_value, is_called FROM idempotency.fence_seq;
SELECT 'outbox_events_id_seq', last_value, is_called FROM idempotency.outbox_events_id_seq;
SELECT 'outbox_lease_seq', last_value, is_called FROM idempotency.outbox_lease_seq;
SQL
}

# rights SIDE DB ROLE: what ROLE may do on the extension's objects
rights() {
  sidepsql "$1" postgres "$2" -v r="$3" <<'SQL'
SELECT x FROM (SELECT kind || ' ' || obj || ' ' || priv AS x FROM (
  SELECT 'routine' AS kind, p.oid::regprocedure::text AS obj, 'EXECUTE' AS priv
    FROM pg_proc p
   WHERE p.pronamespace = 'idempotency'::regnamespace AND has_function_privilege(:'r', p.oid, 'EXECUTE')
  UNION ALL
  SELECT 'relation', c.relname, v.priv
    FROM pg_class c
   CROSS JOIN unnest('{SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER,USAGE}'::text[]) v(priv)
   WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'v', 'S')
     AND CASE WHEN c.relkind = 'S'
              THEN v.priv IN ('SELECT', 'UPDATE', 'USAGE') AND has_sequence_privilege(:'r', c.oid, v.priv)
              ELSE v.priv <> 'USAGE' AND has_table_privilege(:'r', c.oid, v.priv) END
  UNION ALL
  SELECT 'schema', 'idempotency', v.priv FROM unnest('{USAGE,CREATE}'::text[]) v(priv)
   WHERE has_schema_privilege(:'r', 'idempotency', v.priv)) s) s
 ORDER BY x COLLATE "C";
SQL
}

# the reference rights: a fresh install of each edition, grant_usage and the grant
declare -A REF
for ed in c plain tle; do
  newdb "$ed" regress_move_ref
  sidepsql "$(side_of "$ed")" "$(owner_of "$ed")" regress_move_ref >/dev/null \
    -c "SELECT idempotency.grant_usage('$APP')" -c "GRANT SELECT ON idempotency.outbox_events TO $APP"
  REF[$ed]=$(rights "$(side_of "$ed")" regress_move_ref "$APP")
  [ -n "${REF[$ed]}" ] || fail "$ed: no reference rights"
  [ -z "$(rights "$(side_of "$ed")" regress_move_ref public)" ] || fail "$ed: PUBLIC has rights on a fresh install"
done

same() { [ "$2" = "$3" ] || fail "$1: $(diff <(echo "$2") <(echo "$3") || true)"; }

# check LABEL EDITION SIDE DB BEFORE FENCE MAXFENCE: the target after a move
check() {
  local label=$1 ed=$2 s=$3 db=$4 before=$5 fence=$6 maxfence=$7 out
  same "$label: rows and sequences" "$before" "$(snapshot "$s" "$db")"
  same "$label: the role's rights" "${REF[$ed]}" "$(rights "$s" "$db" "$APP")"
  [ -z "$(rights "$s" "$db" public)" ] || fail "$label: PUBLIC has rights: $(rights "$s" "$db" public)"
  # the lease of 'expiring' runs out
  sidepsql "$s" postgres "$db" -c "SELECT pg_sleep(greatest(0, extract(epoch FROM locked_until - clock_timestamp())) + 0.05)
    FROM idempotency.idempotency_keys WHERE idempotency_key = 'expiring'" >/dev/null
  out=$(sidepsql "$s" "$APP" "$db" -v old="$fence" -v max="$maxfence" 2>&1 <<'SQL'
\set VERBOSITY sqlstate
SELECT outcome, response_code, response_body FROM idempotency.claim('paid', '{"amount": 100}');
SELECT outcome, response_code, response_body FROM idempotency.claim('paid', '{"amount": 5}', scope => 'shop');
SELECT outcome FROM idempotency.claim('paid', '{"amount": 6}', scope => 'shop');
SELECT outcome, response_code FROM idempotency.claim('declined');
SELECT outcome, recovery_point FROM idempotency.claim('charging', '{"amount": 3}');
SELECT outcome, recovery_point, fence > :max FROM idempotency.claim('expiring', lease => '1 hour');
\set ON_ERROR_STOP 0
SELECT idempotency.complete('expiring', :old, '{"late": true}');
\set ON_ERROR_STOP 1
SELECT outcome, status, recovery_point, attempts FROM idempotency.claim('retry');
SELECT fence > :max FROM idempotency.claim('new');
SELECT idempotency.consume_token('00000000-0000-4000-8000-000000000002', 'shop'),
       idempotency.consume_token('00000000-0000-4000-8000-000000000002', 'shop'),
       idempotency.consume_token('00000000-0000-4000-8000-000000000003'),
       idempotency.consume_token('00000000-0000-4000-8000-000000000001');
SELECT idempotency.mark_published(ARRAY[2]::bigint[], 2);
SELECT id, lease_token > 2 FROM idempotency.claim_events(10);
SELECT idempotency.enqueue_event('order', 'o4', 'paid', '{}') > 3;
SELECT idempotency.process_once('billing', 'e1'), idempotency.process_once('billing', 'e4');
\set ON_ERROR_STOP 0
UPDATE public.orders SET state = 'new' WHERE id = 'o2';
\set ON_ERROR_STOP 1
SELECT outcome FROM idempotency.transition('public.orders', 'id', 'o2', 'state', 'paid', 'shipped');
SQL
) || fail "$label: the application's calls: $out"
  same "$label: the application after the move" "$(cat <<'OUT'
replay|201|{"id": 7}
replay|200|{"id": 8}
mismatch
replay|402
in_progress|charged
resumed|step-1|t
ERROR:  55000
resumed|processing|started|2
t
t|f|f|f
1
3|t
t
f|t
ERROR:  23514
applied
OUT
)" "$(echo "$out" | grep -v '^DETAIL\|^HINT\|^CONTEXT' | sed 's/^psql:<stdin>:[0-9]*: //')"
  echo "$label: rows, sequences, grants, fences, replays, tokens, outbox, inbox, state machine kept"
}

# fences SIDE DB: the fence of the holder of 'expiring', the largest fence
fences() {
  sidepsql "$1" postgres "$2" -c "SELECT (SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = 'expiring'),
                                          (SELECT max(fence) FROM idempotency.idempotency_keys)" | tr '|' ' '
}

# by dump and restore: FROM TO
by_dump() {
  local from=$1 to=$2 fs ts src dst before fence max restorer
  fs=$(side_of "$from") ts=$(side_of "$to")
  src=regress_move_src_$from dst=regress_move_dst_$to
  newdb "$from" "$src"
  populate "$fs" "$(owner_of "$from")" "$src"
  before=$(snapshot "$fs" "$src")
  read -r fence max < <(fences "$fs" "$src")
  if [ "$fs" = c ]; then
    "$CBIN/pg_dump" -Fc -h "$CHOST" -p "$CPORT" -U postgres -d "$src" -f "$WORK/$src.dump"
  else
    "$PBIN/pg_dump" -Fc -h "$WORK/portable" -p "$PPORT" -U postgres -d "$src" -f "$WORK/$src.dump"
  fi
  "$CBIN/pg_restore" -l "$WORK/$src.dump" | sh "$IDEM_TOP/scripts/edition_list.sh" >"$WORK/$src.list"
  newdb "$to" "$dst"
  restorer=$(owner_of "$to")
  if [ "$ts" = c ]; then
    "$CBIN/pg_restore" --exit-on-error --no-owner -h "$CHOST" -p "$CPORT" -U "$restorer" -d "$dst" \
      -L "$WORK/$src.list" "$WORK/$src.dump"
  else
    "$PBIN/pg_restore" --exit-on-error --no-owner -h "$WORK/portable" -p "$PPORT" -U "$restorer" -d "$dst" \
      -L "$WORK/$src.list" "$WORK/$src.dump"
  fi
  check "$from -> $to by pg_dump/pg_restore" "$to" "$ts" "$dst" "$before" "$fence" "$max"
}

# in place: FROM TO on the side where both can be installed
in_place() {
  local from=$1 to=$2 s db before fence max owner out obj create drop
  s=$(side_of "$from")
  [ "$from" = plain ] && s=$(side_of "$to")
  db=regress_move_inplace_${from}_$to
  emptydb "$s" "$db"
  install "$from" "$s" "$db"
  owner=$OWNER
  [ "$from" = c ] && owner=postgres
  populate "$s" "$owner" "$db"
  before=$(snapshot "$s" "$db")
  read -r fence max < <(fences "$s" "$db")
  if [ "$from-$to" = plain-c ]; then
    # a view of the application on the old edition, or a table of its own
    # in the old schema, stops the move, and the move's transaction leaves
    # everything as it was
    for obj in view table; do
      case $obj in
      view) create='CREATE VIEW public.key_counts AS SELECT * FROM idempotency.stats'
            drop='DROP VIEW public.key_counts' ;;
      table) create='CREATE TABLE idempotency.app_notes (note text)'
             drop='DROP TABLE idempotency.app_notes' ;;
      esac
      sidepsql c "$OWNER" "$db" -c "$create"
      out=$(sidepsql c postgres "$db" -1 -v VERBOSITY=sqlstate -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
        -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/scripts/edition_move.sql" 2>&1) &&
        fail "plain -> c in place: moved despite a $obj"
      [[ $out == *"ERROR:  2BP01"* ]] || fail "plain -> c in place: a $obj not refused with 2BP01: $out"
      same "plain -> c in place: refused, nothing changed" "$before" "$(snapshot c "$db")"
      [ "$(sidepsql c postgres "$db" -c "SELECT count(*) FROM pg_extension WHERE extname = 'idempotency'")" = 0 ] ||
        fail "plain -> c in place: the refused move left the extension"
      sidepsql c "$OWNER" "$db" -c "$drop"
    done
  fi
  case $to in
  plain)
    sidepsql "$s" "$owner" "$db" -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
      -f "$PORTABLE_EDITION/idempotency--$PORTABLE_VERSION.sql" -f "$IDEM_TOP/scripts/edition_move.sql" >/dev/null
    ;;
  tle)
    sidepsql p postgres "$db" -c 'CREATE EXTENSION pg_tle'
    sidepsql p "$OWNER" "$db" -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null
    sidepsql p "$OWNER" "$db" -1 -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
      -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/scripts/edition_move.sql" >/dev/null
    ;;
  c)
    sidepsql c postgres "$db" -1 -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
      -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/scripts/edition_move.sql" >/dev/null
    ;;
  esac
  [ -z "$(sidepsql "$s" postgres "$db" -c "SELECT nspname FROM pg_namespace WHERE nspname = 'idempotency_moving'")" ] ||
    fail "$from -> $to in place: the old edition is still there"
  check "$from -> $to in place" "$to" "$s" "$db" "$before" "$fence" "$max"
}

# tle <-> C on one server: pg_tle refuses to register a name the server
# has a control file for, and one database has one extension of a name, so
# the move goes through the plain edition: tle -> plain in place, the TLE
# unregistered, the C edition's files installed, plain -> C in place; and
# back: C -> plain, the files removed, the TLE registered, plain -> tle.
on_one_server() {
  local db=regress_move_chain before fence max
  newdb tle "$db"
  populate p "$OWNER" "$db"
  before=$(snapshot p "$db")
  read -r fence max < <(fences p "$db")
  sidepsql p "$OWNER" "$db" -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
    -f "$PORTABLE_EDITION/idempotency--$PORTABLE_VERSION.sql" -f "$IDEM_TOP/scripts/edition_move.sql" \
    -c "SELECT pgtle.uninstall_extension('idempotency')" >/dev/null
  make -s -C "$IDEM_TOP" PG_CONFIG="$PBIN/pg_config" install >/dev/null
  sidepsql p postgres "$db" -1 -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
    -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/scripts/edition_move.sql" >/dev/null
  [ "$(sidepsql p postgres "$db" -c "SELECT l.lanname FROM pg_proc p
        JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = 'idempotency.claim'::regproc")" = c ] ||
    fail "tle -> C on one server: not the C edition"
  check "tle -> plain -> c in place, one server" c p "$db" "$before" "$fence" "$max"

  db=regress_move_chain_back
  emptydb p "$db"
  install c p "$db"
  populate p postgres "$db"
  before=$(snapshot p "$db")
  read -r fence max < <(fences p "$db")
  sidepsql p postgres "$db" -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
    -f "$PORTABLE_EDITION/idempotency--$PORTABLE_VERSION.sql" -f "$IDEM_TOP/scripts/edition_move.sql" >/dev/null
  find "$WORK/inst" \( -name 'idempotency.so' -o -name 'idempotency.control' -o -name 'idempotency--*.sql' \) -delete
  sidepsql p postgres "$db" -c 'CREATE EXTENSION pg_tle' -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null
  sidepsql p postgres "$db" -1 -c 'ALTER SCHEMA idempotency RENAME TO idempotency_moving' \
    -c 'CREATE EXTENSION idempotency' -f "$IDEM_TOP/scripts/edition_move.sql" >/dev/null
  check "c -> plain -> tle in place, one server" tle p "$db" "$before" "$fence" "$max"
}

by_dump plain c
by_dump tle c
by_dump c plain
by_dump c tle
in_place plain c
in_place c plain
in_place plain tle
in_place tle plain
on_one_server
echo "edition moves kept every promise ($(($(date +%s) - started)) s)"
