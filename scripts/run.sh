#!/usr/bin/env bash
# scripts/run.sh (make run): the extension at work, from a fresh Debian 12.
#
# Installs what is missing, builds, installs the extension into Debian's
# PostgreSQL 15, starts a throwaway cluster (as the postgres OS user, on
# 127.0.0.1 and a unix socket in $IDEM_DEMO_DIR, pg_cron and the library
# preloaded), creates the extension in database "demo" and walks a payment
# request through claimed -> replay -> mismatch -> in_progress -> resumed,
# then execute, a duplicate that waits for the first request, an answer
# that expires before its key (gone) and the outcome counts.  The cluster
# keeps running; the script ends by printing how to connect and stop it.
set -euo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"

DEMO_DIR=${IDEM_DEMO_DIR:-/tmp/idempotency-demo}
PORT=${IDEM_DEMO_PORT:-54329}

idem_ensure_packages $IDEM_PACKAGES
idem_log "building and installing into $($PG_BIN/pg_config --pkglibdir)"
idem_build
make -s -C "$IDEM_TOP" PG_CONFIG=$PG_BIN/pg_config install >/dev/null

# a throwaway cluster: replace the one a previous run left
idem_stop_cluster $PG_BIN "$DEMO_DIR"
rm -rf "$DEMO_DIR"
idem_log "starting a cluster in $DEMO_DIR on 127.0.0.1:$PORT"
idem_start_cluster $PG_BIN "$DEMO_DIR" "$PORT" 127.0.0.1 'pg_cron, idempotency'

psql_demo() {
  runuser -u postgres -- $PG_BIN/psql -X -q -h "$DEMO_DIR" -p "$PORT" "$@"
}
psql_demo -d postgres -c 'CREATE EXTENSION pg_cron' -c 'CREATE DATABASE demo'
psql_demo -d demo -c 'CREATE EXTENSION idempotency'

idem_log "a payment request, retried every way a client can"
psql_demo -d demo -e -v ON_ERROR_STOP=1 <<'SQL'
\pset footer off
CREATE TABLE payments (id serial PRIMARY KEY, order_no text, amount int);

\echo
\echo '-- 1. claimed: the first request runs; its fence identifies the holder'
SELECT outcome, fence, recovery_point, attempts
  FROM idempotency.claim('pay-7f3a', '{"order": "ORD-1", "amount": 4200}') \gset claim_
\echo outcome = :claim_outcome, fence = :claim_fence, recovery_point = :claim_recovery_point, attempts = :claim_attempts
INSERT INTO payments (order_no, amount) VALUES ('ORD-1', 4200);
SELECT idempotency.complete('pay-7f3a', :claim_fence,
                            '{"payment_id": 1, "status": "paid"}', 201);

\echo
\echo '-- 2. replay: the client retries; the stored answer comes back (HTTP 201 again)'
SELECT outcome, response_code, response_body
  FROM idempotency.claim('pay-7f3a', '{"amount": 4200, "order": "ORD-1"}');

\echo
\echo '-- 3. mismatch: the same key with another body (HTTP 422)'
SELECT outcome, status FROM idempotency.claim('pay-7f3a', '{"order": "ORD-1", "amount": 9999}');

\echo
\echo '-- 4. in_progress: a second request arrives while the first still works (HTTP 409 + Retry-After)'
SELECT fence FROM idempotency.claim('pay-91c2', '{"order": "ORD-2", "amount": 100}',
                                    lease => '2 seconds') \gset crashed_
\echo the first holder got fence :crashed_fence, charged the card, then crashed
SELECT idempotency.checkpoint('pay-91c2', :crashed_fence, 'card_charged', '2 seconds');
SELECT outcome, retry_after FROM idempotency.claim('pay-91c2', '{"order": "ORD-2", "amount": 100}');

\echo
\echo '-- 5. resumed: the first holder crashed; after its lease the retry resumes'
\echo '--    from the last recovery point with a larger fence'
SELECT pg_sleep(2.1);
SELECT outcome, fence > :crashed_fence AS larger_fence, recovery_point, attempts
  FROM idempotency.claim('pay-91c2', '{"order": "ORD-2", "amount": 100}');
\echo '--    ... and the crashed holder can no longer write (55000):'
\set ON_ERROR_STOP 0
SELECT idempotency.complete('pay-91c2', :crashed_fence, '{"late": true}');
\set ON_ERROR_STOP 1

\echo
\echo '-- 6. execute: claim, business write, stored answer and commit in one round trip'
SELECT outcome, response_body FROM idempotency.execute('pay-a001', '{"order": "ORD-3", "amount": 500}',
  'INSERT INTO payments (order_no, amount) VALUES ($1, $2::int) RETURNING to_jsonb(payments.*)',
  ARRAY['ORD-3', '500']);
SELECT outcome, response_body FROM idempotency.execute('pay-a001', '{"order": "ORD-3", "amount": 500}',
  'INSERT INTO payments (order_no, amount) VALUES ($1, $2::int) RETURNING to_jsonb(payments.*)',
  ARRAY['ORD-3', '500']);
SELECT count(*) AS payments FROM payments;

\echo
\echo '-- 7. gone: an answer kept for less time than its key; a late retry is not run again (HTTP 410)'
SELECT fence FROM idempotency.claim('pay-c003', '{"order": "ORD-5", "amount": 700}') \gset gone_
SELECT idempotency.complete('pay-c003', :gone_fence, '{"payment_id": 5, "card": "4242"}', 201,
                            response_ttl => '1 second');
SELECT pg_sleep(1.1);
SELECT outcome, status, response_code, response_body
  FROM idempotency.claim('pay-c003', '{"order": "ORD-5", "amount": 700}');
SQL

idem_log "a duplicate that waits for the first request instead of getting 409"
fence=$(psql_demo -d demo -At -c "SELECT fence FROM idempotency.claim('pay-d004', '{\"order\": \"ORD-6\"}')")
echo "-- 8. the first request holds pay-d004 (fence $fence) and completes it one second from now;"
echo "--    a duplicate claims with wait => '10 seconds' and gets the answer as soon as it commits"
( sleep 1
  psql_demo -d demo -c "SELECT idempotency.complete('pay-d004', $fence, '{\"payment_id\": 6}', 201)" >/dev/null ) &
holder=$!
psql_demo -d demo -e -c "SELECT outcome, response_code, response_body,
       round(extract(epoch FROM clock_timestamp() - statement_timestamp())::numeric, 1) AS waited_s
  FROM idempotency.claim('pay-d004', '{\"order\": \"ORD-6\"}', wait => '10 seconds')"
wait $holder

idem_log "what the layer did: the outcome counts (idempotency.metrics)"
psql_demo -d demo -e -c "SELECT scope, claimed, replay, mismatch, in_progress, resumed, gone, lease_lost
  FROM idempotency.metrics WHERE scope IS NOT NULL"

cat <<MSG

The cluster is running (data in $DEMO_DIR/data, log in $DEMO_DIR/server.log).
Connect:  psql -h 127.0.0.1 -p $PORT -U postgres demo
     or:  psql -h $DEMO_DIR -p $PORT -U postgres demo
Stop:     runuser -u postgres -- $PG_BIN/pg_ctl -D $DEMO_DIR/data stop
MSG
