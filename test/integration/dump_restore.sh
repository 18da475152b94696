#!/usr/bin/env bash
# pg_dump / pg_restore keep the extension's rows: keys (with their stored
# answers and fences), tokens, the fence sequence and the scope grants
# (1.7), so that a restored database replays what it replayed before,
# hands out larger fences and keeps its roles to their scopes.
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
work_dir dump_restore

q postgres 'DROP DATABASE IF EXISTS regress_dump_src' >/dev/null
q postgres 'DROP DATABASE IF EXISTS regress_dump_dst' >/dev/null
q postgres 'DROP ROLE IF EXISTS regress_dump_scoped' >/dev/null
q postgres 'CREATE ROLE regress_dump_scoped'
q postgres 'CREATE DATABASE regress_dump_src'
q regress_dump_src "CREATE EXTENSION idempotency"
q regress_dump_src "SELECT idempotency.grant_usage('regress_dump_scoped');
SELECT idempotency.grant_scopes('regress_dump_scoped', ARRAY['shop', 'tenant-*']);" >/dev/null
q regress_dump_src "
SELECT idempotency.claim('paid', '{\"amount\":100}');
SELECT idempotency.complete('paid', (idempotency.lookup('paid')).fence, '{\"id\":7}', 201);
SELECT idempotency.claim('working', scope => 'shop');
SELECT idempotency.issue_token();" >/dev/null
token=$(q regress_dump_src "SELECT token FROM idempotency.tokens")
rows="SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s', scope, idempotency_key, status, fence,
        response_code, response_body, encode(request_hash, 'hex')), ';' ORDER BY scope, idempotency_key)
      FROM idempotency.idempotency_keys"
before=$(q regress_dump_src "$rows")
max_fence=$(q regress_dump_src "SELECT max(fence) FROM idempotency.idempotency_keys")

as_pg "$BIN/pg_dump" -Fc -d regress_dump_src -f "$WORK/src.dump"
q postgres 'CREATE DATABASE regress_dump_dst'
as_pg "$BIN/pg_restore" --exit-on-error -d regress_dump_dst "$WORK/src.dump"

after=$(q regress_dump_dst "$rows")
[ "$before" = "$after" ] || fail "keys differ: '$before' vs '$after'"
[ "$(q regress_dump_dst "SELECT token FROM idempotency.tokens")" = "$token" ] || fail "token lost"
[ "$(q regress_dump_dst "SELECT outcome || ' ' || response_code || ' ' || response_body
      FROM idempotency.claim('paid', '{\"amount\":100}')")" = 'replay 201 {"id": 7}' ] ||
  fail "no replay after restore"
[ "$(q regress_dump_dst "SELECT idempotency.consume_token('$token')")" = t ] || fail "token unusable"
new_fence=$(q regress_dump_dst "SELECT fence FROM idempotency.claim('new')")
[ "$new_fence" -gt "$max_fence" ] || fail "fence $new_fence not above $max_fence: sequence not restored"
[ "$(q regress_dump_dst "SELECT count(*) FROM idempotency.idempotency_keys")" = 3 ] || fail "row count"
[ "$(q regress_dump_dst "SELECT string_agg(role || ' ' || scope || ' ' || is_prefix, ';' ORDER BY scope)
      FROM idempotency.scope_grants")" = 'regress_dump_scoped shop false;regress_dump_scoped tenant- true' ] ||
  fail "scope grants not restored"
[ "$(q regress_dump_dst "SET ROLE regress_dump_scoped;
      SELECT (idempotency.lookup('working', 'shop')).status")" = processing ] || fail "scoped role lost its scope"
if q regress_dump_dst "SET ROLE regress_dump_scoped; SELECT idempotency.lookup('paid')" >/dev/null 2>&1; then
  fail "scoped role not restricted after restore"
fi

q postgres 'DROP DATABASE regress_dump_src'
q postgres 'DROP DATABASE regress_dump_dst'
q postgres 'DROP ROLE regress_dump_scoped'
echo "dump/restore round trip kept keys, tokens, the fence sequence and the scope grants"

# A dump of a database at 1.2 restored where CREATE EXTENSION gives the
# current version: 1.2's COPY of idempotency_keys leaves out key_hash (a
# generated column then), and the restored rows get it from the trigger.
q postgres 'CREATE DATABASE regress_dump_src'
q regress_dump_src "CREATE EXTENSION idempotency VERSION '1.2'"
q regress_dump_src "
SELECT idempotency.complete('old-paid', fence, '{\"id\":9}', 201)
  FROM idempotency.claim('old-paid', '{\"amount\":5}');
SELECT idempotency.claim('old-held', lease => '1 hour');" >/dev/null
as_pg "$BIN/pg_dump" -Fc -d regress_dump_src -f "$WORK/src12.dump"
q postgres 'CREATE DATABASE regress_dump_dst'
as_pg "$BIN/pg_restore" --exit-on-error -d regress_dump_dst "$WORK/src12.dump"
[ "$(q regress_dump_dst "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" = \
  "$(q regress_dump_dst "SELECT default_version FROM pg_available_extensions WHERE name = 'idempotency'")" ] ||
  fail "restore did not create the default version"
[ "$(q regress_dump_dst "SELECT count(*) FROM idempotency.idempotency_keys
      WHERE key_hash = idempotency.key_hash(scope, idempotency_key)")" = 2 ] || fail "1.2 rows without their hash"
[ "$(q regress_dump_dst "SELECT outcome || ' ' || response_body
      FROM idempotency.claim('old-paid', '{\"amount\":5}')")" = 'replay {"id": 9}' ] ||
  fail "no replay of a 1.2 key after restore"
[ "$(q regress_dump_dst "SELECT outcome FROM idempotency.claim('old-held')")" = in_progress ] ||
  fail "held 1.2 key not in progress after restore"
q postgres 'DROP DATABASE regress_dump_src'
q postgres 'DROP DATABASE regress_dump_dst'
rm -rf "$WORK"
echo "a dump of 1.2 restored into the current version replays its keys"
