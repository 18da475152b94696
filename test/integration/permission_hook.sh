#!/usr/bin/env bash
# test/integration/permission_hook.sh: the rows the extension writes without
# a statement (doc/reference.md, "Writes") are checked as the statements
# are: ExecutorCheckPerms_hook (sepgsql, pgaudit's object audit) is called
# once per claim, completion, mark and event, with the privileges and the
# columns of the statement it stands for.
#
# Builds test/modules/hook_counter (PGXS) into the private install of
# test/run.sh ($IDEM_TEST_BIN), LOADs it in a session of the test cluster
# and runs the same calls twice: on the direct path, then on the statement
# path (a no-op statement-level trigger on each table, which makes every
# call run its INSERT or UPDATE through SPI).  Each step reports the
# checks made per relation since the step before (calls, and the last
# check's privileges and columns) and how many statements the triggers
# saw; both paths must report the same, but for a batch of marks, which
# the direct path checks once (as the one INSERT it stands for) and the
# statement path once per new mark.
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
work_dir permission_hook
DB=regress_permission_hook
at_exit 'q postgres "DROP DATABASE IF EXISTS $DB"'

install_test_module hook_counter

q postgres "DROP DATABASE IF EXISTS $DB"
q postgres "CREATE DATABASE $DB"
q "$DB" "CREATE EXTENSION idempotency;
  CREATE FUNCTION hook_counter_calls(OUT rel regclass, OUT calls bigint, OUT last text)
    RETURNS SETOF record AS 'hook_counter' LANGUAGE C;
  CREATE FUNCTION hook_counter_reset() RETURNS void AS 'hook_counter' LANGUAGE C;
  CREATE TABLE payments (id serial PRIMARY KEY, note text);
  -- the statements that the statement-level triggers saw (not transactional:
  -- a statement rolled back by an error counts too)
  CREATE SEQUENCE statements;
  CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql
    AS \$\$BEGIN PERFORM nextval('statements'); RETURN NULL; END\$\$;"

# The steps, in one session that LOADed the module; :'path' names the keys.
# report(STEP) prints 'STEP|relation|checks|last check' per relation
# checked since the last report, then 'STEP|statements|N'.
cat >"$WORK/steps.sql" <<'SQL'
\set ON_ERROR_STOP 1
\pset tuples_only on
\pset format unaligned
LOAD 'hook_counter';
CREATE FUNCTION pg_temp.report(step text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
  n bigint := coalesce(pg_sequence_last_value('statements'), 0);
BEGIN
  RETURN QUERY SELECT format('%s|%s|%s|%s', step, rel, calls, last)
    FROM hook_counter_calls()
   WHERE rel::text LIKE 'idempotency.%' OR rel::text = 'payments'
   ORDER BY rel::text COLLATE "C";
  RETURN NEXT format('%s|statements|%s', step,
                     n - coalesce(nullif(current_setting('test.seen', true), ''), '0')::bigint);
  PERFORM set_config('test.seen', n::text, false);
  PERFORM hook_counter_reset();
END $$;
CREATE FUNCTION pg_temp.complete_lost(k text, f bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM idempotency.complete(k, f, '{}');
  RETURN 'completed';
EXCEPTION WHEN object_not_in_prerequisite_state THEN
  RETURN 'lease lost';
END $$;
SELECT pg_temp.report('start') \g /dev/null

SELECT fence AS f FROM idempotency.claim(:'path' || '-1', '{"n": 1}') \gset
SELECT pg_temp.report('claim');
SELECT idempotency.complete(:'path' || '-1', :f, '{"ok": true}') \g /dev/null
SELECT pg_temp.report('complete');
-- a completion whose lease is lost is checked before it looks for the row
SELECT fence AS f FROM idempotency.claim(:'path' || '-2', '{"n": 2}') \gset
SELECT pg_temp.report('claim-2') \g /dev/null
SELECT pg_temp.complete_lost(:'path' || '-2', :f + 1000000) \g /dev/null
SELECT pg_temp.report('lost');
SELECT idempotency.process_once('consumer', :'path' || '-e1') \g /dev/null
SELECT pg_temp.report('mark');
-- a duplicate writes no row, and runs no statement
SELECT idempotency.process_once('consumer', :'path' || '-e1') \g /dev/null
SELECT pg_temp.report('duplicate');
SELECT idempotency.enqueue_event('order', :'path', 'Paid', '{}') \g /dev/null
SELECT pg_temp.report('event');
SELECT outcome FROM idempotency.execute(:'path' || '-3', '{"n": 3}',
  'INSERT INTO payments (note) VALUES ($1) RETURNING to_jsonb(payments.*)', ARRAY['x']) \g /dev/null
SELECT pg_temp.report('execute');
SELECT count(*) FROM idempotency.process_once('consumer',
  ARRAY[:'path' || '-e2', :'path' || '-e3', :'path' || '-e1']) \g /dev/null
SELECT pg_temp.report('marks');
SELECT count(*) FROM idempotency.enqueue_events(ARRAY['order', 'order'],
  ARRAY[:'path', :'path'], ARRAY['A', 'B'], ARRAY['{}', '{}']::jsonb[]) \g /dev/null
SELECT pg_temp.report('events');
SQL
steps() { as_pg "$BIN/psql" -X -q -d "$DB" -v path="$1" -f "$WORK/steps.sql"; }

direct=$(steps direct) || fail "the steps on the direct path: $direct"
q "$DB" "CREATE TRIGGER force_statement AFTER INSERT OR UPDATE ON idempotency.idempotency_keys
    FOR EACH STATEMENT EXECUTE FUNCTION count_statement();
  CREATE TRIGGER force_statement AFTER INSERT ON idempotency.processed_events
    FOR EACH STATEMENT EXECUTE FUNCTION count_statement();
  CREATE TRIGGER force_statement AFTER INSERT ON idempotency.outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION count_statement();"
statement=$(steps statement) || fail "the steps on the statement path: $statement"
echo "---- direct path"
echo "$direct"
echo "---- statement path"
echo "$statement"

# STEP|RELATION -> checks, on each path
calls() { echo "$1" | awk -F'|' -v k="$2|$3" '$1 "|" $2 == k { print $3; found = 1 } END { if (!found) print 0 }'; }
expect() {	# expect STEP RELATION DIRECT STATEMENT: the checks on each path
  local d s
  d=$(calls "$direct" "$1" "$2")
  s=$(calls "$statement" "$1" "$2")
  [ "$d" = "$3" ] || fail "$1, $2: $d checks on the direct path, expected $3"
  [ "$s" = "$4" ] || fail "$1, $2: $s checks on the statement path, expected $4"
}
K=idempotency.idempotency_keys M=idempotency.processed_events E=idempotency.outbox_events
expect claim $K 1 1
expect claim statements 0 1
expect complete $K 1 1
expect complete statements 0 1
expect lost $K 1 1
expect lost statements 0 1
expect mark $M 1 1
expect mark statements 0 1
expect duplicate $M 0 0
expect duplicate statements 0 0
expect event $E 1 1
expect event statements 0 1
expect execute $K 1 1
expect execute payments 1 1
expect execute statements 0 1
expect marks $M 1 2
# the statement path runs one INSERT per new mark, but queues their AFTER
# triggers to the end of the batch, where a statement trigger fires once,
# as for the one INSERT the batch stands for (doc/reference.md, "Writes")
expect marks statements 0 1
expect events $E 1 1
expect events statements 0 1
# the same relations, privileges and columns on both paths
strip() { echo "$1" | grep -v '|statements|' | awk -F'|' 'BEGIN { OFS = "|" } { $3 = ""; print }'; }
[ "$(strip "$direct")" = "$(strip "$statement")" ] ||
  fail "the checks differ: $(diff <(strip "$direct") <(strip "$statement") || true)"
# what the statements need: INSERT on the columns listed, SELECT on what
# RETURNING gives; UPDATE on the columns set, SELECT on what WHERE and SET read
# (the claim writes holder_role and, since 1.8, holder_role_name; the
# completion reads them)
grep -qx 'claim|idempotency.idempotency_keys|1|INSERT selected() inserted(scope,idempotency_key,request_hash,status,fence,attempts,recovery_point,locked_until,created_at,updated_at,expires_at,key_hash,holder_role,holder_role_name) updated()' <<<"$direct" ||
  fail "claim: not the INSERT's privileges and columns"
grep -qx 'complete|idempotency.idempotency_keys|1|UPDATE,SELECT selected(status,fence,expires_at,key_hash,holder_role,holder_role_name) inserted() updated(status,response_code,response_body,retryable,locked_until,updated_at,expires_at)' <<<"$direct" ||
  fail "complete: not the UPDATE's privileges and columns"
grep -qx 'event|idempotency.outbox_events|1|INSERT,SELECT selected(id) inserted(aggregate_type,aggregate_id,event_type,payload,headers) updated()' <<<"$direct" ||
  fail "enqueue_event: not the INSERT ... RETURNING id's privileges and columns"
echo "permission checks: the same on the direct and the statement path"
