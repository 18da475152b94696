#!/usr/bin/env bash
# test/integration/node_clients.sh: the Node example, examples/node-payments
# (an Express payment API on the pg-idempotency package of clients/node),
# runs its test against the test cluster over real HTTP on 127.0.0.1: a
# payment answers 201, its retry replays it, another body under the key is
# refused with 422, no key with 400, and one payments row is written.
# The example does not depend on the server's major: the host's run
# (PostgreSQL 15) tests it once.
. "$(dirname "$0")/lib.bash"
idem_host_only "tests the Node example"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_db.bash"
. "$here/node_example.bash"
fresh_db idem_node_clients

node_example "$here/../../examples/node-payments"
node --test test/*.test.js
