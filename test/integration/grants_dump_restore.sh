#!/usr/bin/env bash
# An application role keeps every right through an update and a pg_dump /
# pg_restore, whatever version the database started at.  For each version
# available (the default one installed fresh, every older one installed and
# then updated): grant_usage() is given before the update, the database is
# dumped (-Fc) and restored into a new one, and there the role has exactly
# the rights that grant_usage() gives on a fresh install, calls every kind
# of function it was given (complete and fail included, of a key held
# across the dump), and PUBLIC has nothing.  The initial privileges
# (pg_init_privs) of an updated database equal a fresh install's, since
# pg_dump leaves out what they record (sql/idempotency--1.2--1.3.sql,
# reset_init_privs).  Once more from the version before the default one,
# with the role's grants made initial privileges first, as an older update
# that granted in its course left them through pg_tle: the update to 1.8
# moves them out (queue_pending_grants, sql/idempotency--1.7--1.8.sql).
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
work_dir grants_dump_restore
# qs DB [psql options]: a script on stdin (with \gset and variables)
qs() { local db=$1; shift; psql_pg -d "$db" "$@"; }
APP=regress_grants_app

# What the role may do, by effective right, on every routine, table, view,
# sequence and the schema of the extension; :'r' is the role (or public).
RIGHTS="SELECT coalesce(string_agg(x, E'\n' ORDER BY x COLLATE \"C\"), '') FROM (
  SELECT format('routine %s', p.oid::regprocedure) AS x
    FROM pg_proc p
   WHERE p.pronamespace = 'idempotency'::regnamespace
     AND has_function_privilege(:'r', p.oid, 'EXECUTE')
  UNION ALL
  SELECT format('relation %s %s', c.relname, v.priv)
    FROM pg_class c, unnest('{SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER}'::text[]) v(priv)
   WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
     AND has_table_privilege(:'r', c.oid, v.priv)
  UNION ALL
  SELECT format('sequence %s %s', c.relname, v.priv)
    FROM pg_class c, unnest('{USAGE,SELECT,UPDATE}'::text[]) v(priv)
   WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'S'
     AND has_sequence_privilege(:'r', c.oid, v.priv)
  UNION ALL
  SELECT format('schema %s', v.priv)
    FROM unnest('{USAGE,CREATE}'::text[]) v(priv)
   WHERE has_schema_privilege(:'r', 'idempotency', v.priv)) s"
# The ACL items of the extension's objects (types included) and schema
# for roles other than the owner, PUBLIC among them.
ACLS="SELECT coalesce(string_agg(x, E'\n' ORDER BY x COLLATE \"C\"), '') FROM (
  SELECT format('%s %s %s%s', o.obj,
                CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
                a.privilege_type, CASE WHEN a.is_grantable THEN ' grantable' ELSE '' END) AS x
    FROM (SELECT format('routine %s', p.oid::regprocedure) AS obj,
                 coalesce(p.proacl, acldefault('f', p.proowner)) AS acl, p.proowner AS owner
            FROM pg_proc p WHERE p.pronamespace = 'idempotency'::regnamespace
          UNION ALL
          SELECT format('relation %s', c.relname),
                 coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::\"char\", c.relowner)),
                 c.relowner
            FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind <> 'i'
          UNION ALL
          SELECT format('type %s', t.typname), coalesce(t.typacl, acldefault('T', t.typowner)), t.typowner
            FROM pg_type t WHERE t.typnamespace = 'idempotency'::regnamespace
          UNION ALL
          SELECT 'schema', coalesce(n.nspacl, acldefault('n', n.nspowner)), n.nspowner
            FROM pg_namespace n WHERE n.nspname = 'idempotency') o,
         aclexplode(o.acl) a
   WHERE a.grantee <> o.owner) s"
# The initial privileges of the extension's objects (pg_dump dumps the
# difference from them), by object rather than by OID.
INIT="SELECT coalesce(string_agg(x, E'\n' ORDER BY x COLLATE \"C\"), '') FROM (
  SELECT format('%s %s', pg_describe_object(classoid, objoid, objsubid), initprivs) AS x
    FROM pg_init_privs WHERE privtype = 'e') s"
rights() { qs "$1" -v r="$2" <<<"$RIGHTS"; }

dbs=()
at_exit 'for db in "${dbs[@]}"; do q postgres "DROP DATABASE IF EXISTS $db"; done
  q postgres "DROP ROLE IF EXISTS $APP"'
q postgres "DROP ROLE IF EXISTS $APP"
q postgres "CREATE ROLE $APP"

# the reference: a fresh install of the default version, and grant_usage
ref=regress_grants_ref
dbs+=("$ref")
q postgres "DROP DATABASE IF EXISTS $ref"
q postgres "CREATE DATABASE $ref"
q "$ref" "CREATE EXTENSION idempotency; SELECT idempotency.grant_usage('$APP')" >/dev/null
default=$(q "$ref" "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")
ref_rights=$(rights "$ref" "$APP")
ref_acls=$(q "$ref" "$ACLS")
ref_init=$(q "$ref" "$INIT")
# the reference is what doc/reference.md, "Privileges", lists: every
# routine of those names, both views, the schema, and nothing else
expected=$(q "$ref" "SELECT string_agg(x, E'\n' ORDER BY x COLLATE \"C\") FROM (
  SELECT format('routine %s', p.oid::regprocedure) AS x FROM pg_proc p
   WHERE p.pronamespace = 'idempotency'::regnamespace
     AND p.proname IN ('fingerprint', 'claim', 'complete', 'fail', 'checkpoint', 'release',
                       'lookup', 'execute', 'issue_token', 'consume_token', 'transition',
                       'enqueue_event', 'enqueue_events', 'claim_events', 'mark_published',
                       'mark_failed', 'outbox_quiet_commits', 'emit_event', 'process_once',
                       'lock_key', 'try_lock')
  UNION ALL SELECT 'relation stalled_keys SELECT'
  UNION ALL SELECT 'relation stats SELECT'
  UNION ALL SELECT 'schema USAGE') s")
[ "$ref_rights" = "$expected" ] ||
  fail "grant_usage on a fresh $default: $(diff <(echo "$expected") <(echo "$ref_rights") || true)"
[ -z "$(rights "$ref" public)" ] || fail "PUBLIC has rights on a fresh install: $(rights "$ref" public)"
echo "$ref_rights" | grep -qF 'routine idempotency.process_once(text,text[])' || fail "reference lacks process_once(text,text[])"

# same LABEL EXPECTED ACTUAL: fail with a diff unless equal
same() { [ "$2" = "$3" ] || fail "$1: $(diff <(echo "$2") <(echo "$3") || true)"; }

versions=$(q "$ref" "SELECT string_agg(version, ' ' ORDER BY string_to_array(version, '.')::int[])
  FROM pg_available_extension_versions WHERE name = 'idempotency'")
# from_version VERSION TAG [initial]: install VERSION, grant_usage, update,
# dump and restore, and check both databases.  With "initial", the
# role's grants are made initial privileges before the update, as any
# GRANT within an update script made them (the 1.5 to 1.6 update's
# through pg_tle, whose updating role could not set them back, before
# 1.8): the update to 1.8 must move them out of pg_init_privs.
from_version() {
  local v=$1 tag=$2 initial=${3:-}
  local held out expected_out src=regress_grants_src_$tag dst=regress_grants_dst_$tag
  dbs+=("$src" "$dst")
  q postgres "DROP DATABASE IF EXISTS $src"
  q postgres "DROP DATABASE IF EXISTS $dst"
  q postgres "CREATE DATABASE $src"
  q "$src" "CREATE EXTENSION idempotency VERSION '$v'; SELECT idempotency.grant_usage('$APP')" >/dev/null
  if [ -n "$initial" ]; then
    q "$src" "UPDATE pg_init_privs i SET initprivs = o.acl
                FROM (SELECT 'pg_proc'::regclass AS classoid, p.oid, p.proacl AS acl FROM pg_proc p
                       WHERE p.pronamespace = 'idempotency'::regnamespace
                      UNION ALL
                      SELECT 'pg_class'::regclass, c.oid, c.relacl FROM pg_class c
                       WHERE c.relnamespace = 'idempotency'::regnamespace
                      UNION ALL
                      SELECT 'pg_namespace'::regclass, n.oid, n.nspacl FROM pg_namespace n
                       WHERE n.nspname = 'idempotency') o
               WHERE (i.classoid, i.objoid, i.objsubid) = (o.classoid, o.oid, 0)
                 AND o.acl::text LIKE '%$APP=%'"
    [ "$(q "$src" "SELECT count(*) FROM pg_init_privs WHERE initprivs::text LIKE '%$APP=%'")" -gt 2 ] ||
      fail "$v: the role's grants were not made initial privileges"
  fi
  if [ "$v" != "$default" ]; then
    as_pg "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$src" -c "SET client_min_messages = warning" \
      -c "ALTER EXTENSION idempotency UPDATE" >/dev/null
  fi
  [ "$(q "$src" "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" = "$default" ] ||
    fail "$v: not at $default after the update"
  # the update kept every right, and its initial privileges are a fresh install's
  same "$v: the role's rights after the update" "$ref_rights" "$(rights "$src" "$APP")"
  same "$v: ACLs after the update" "$ref_acls" "$(q "$src" "$ACLS")"
  same "$v: pg_init_privs after the update" "$ref_init" "$(q "$src" "$INIT")"
  # PostgreSQL 17 and later: no role is left depending on initial privileges
  [ "$(q "$src" "SELECT count(*) FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = current_database() AND s.deptype = 'i'
          AND s.refobjid = '$APP'::regrole")" = 0 ] || fail "$v: $APP named in pg_shdepend as initial privileges"

  # a key held across the dump
  held=$(q "$src" "SET ROLE $APP; SELECT fence FROM idempotency.claim('held', '{\"n\": 1}', lease => '1 hour')")
  as_pg "$BIN/pg_dump" -Fc -d "$src" -f "$WORK/$src.dump"
  q postgres "CREATE DATABASE $dst"
  as_pg "$BIN/pg_restore" --exit-on-error -d "$dst" "$WORK/$src.dump"

  same "$v: the role's rights after the restore" "$ref_rights" "$(rights "$dst" "$APP")"
  same "$v: ACLs after the restore (PUBLIC's included)" "$ref_acls" "$(q "$dst" "$ACLS")"
  same "$v: pg_init_privs after the restore" "$ref_init" "$(q "$dst" "$INIT")"
  [ -z "$(rights "$dst" public)" ] || fail "$v: PUBLIC has rights after the restore: $(rights "$dst" public)"

  # the role at work in the restored database: every kind of function
  q "$dst" "CREATE TABLE public.grants_orders (id text PRIMARY KEY, state text);
            INSERT INTO public.grants_orders VALUES ('o1', 'new');
            GRANT SELECT, UPDATE ON public.grants_orders TO $APP"
  out=$(qs "$dst" -v held="$held" <<SQL
SET ROLE $APP;
SELECT idempotency.complete('held', :held, '{"ok": 1}', 201);
SELECT outcome || ' ' || response_code FROM idempotency.claim('held', '{"n": 1}');
SELECT fence AS f FROM idempotency.claim('to-fail') \gset
SELECT idempotency.fail('to-fail', :f, '{"declined": true}', 402, retryable => false);
SELECT outcome || ' ' || response_code FROM idempotency.claim('to-fail');
SELECT fence AS f FROM idempotency.claim('to-release') \gset
SELECT idempotency.checkpoint('to-release', :f, 'charged');
SELECT idempotency.release('to-release', :f);
SELECT (idempotency.lookup('held')).status, idempotency.fingerprint('{}') IS NOT NULL;
SELECT outcome FROM idempotency.execute('exec', NULL, 'SELECT 1');
SELECT idempotency.consume_token(idempotency.issue_token());
SELECT idempotency.lock_key('k') IS NOT NULL, idempotency.try_lock('k');
SELECT outcome FROM idempotency.transition('public.grants_orders', 'id', 'o1', 'state', 'new', 'paid');
SELECT idempotency.enqueue_event('order', 'o1', 'paid', '{}') IS NOT NULL;
SELECT count(*) FROM idempotency.enqueue_events(ARRAY['order', 'order'], ARRAY['o2', 'o3'],
                                                ARRAY['paid', 'paid'], ARRAY['{}', '{}']::jsonb[]);
SELECT idempotency.emit_event('order', 'o1', 'paid', '{}') IS NOT NULL;
SELECT min(id) AS first, max(id) AS last, max(lease_token) AS token FROM idempotency.claim_events(10) \gset
SELECT idempotency.mark_published(ARRAY[:first]::bigint[], :token),
       idempotency.mark_failed(ARRAY[:last]::bigint[], 'broker down', :token);
SELECT idempotency.process_once('c', 'e1');
SELECT string_agg(e, ',') FROM idempotency.process_once('c', ARRAY['e1', 'e2']) e;
SELECT count(*) > 0 FROM idempotency.stats;
SELECT count(*) FROM idempotency.stalled_keys;
SQL
)
  expected_out=$(cat <<'OUT'
replay 201
replay 402
completed|t
claimed
t
t|t
applied
t
2
t
1|1
t
e2
t
0
OUT
)
  same "$v: the role at work after the restore" "$expected_out" "$(echo "$out" | grep -v '^$')"
  echo "from $v${initial:+ with the grants initial privileges}: rights kept through the update and dump/restore"
}

for v in $versions; do
  from_version "$v" "${v//./_}"
done
# a database an older update left with the role's grants initial: the
# version before the default one
previous=$(echo "$versions" | tr ' ' '\n' | tail -2 | head -1)
from_version "$previous" "${previous//./_}_initial" initial

echo "grants survived update and dump/restore from every version ($versions)"
