#!/usr/bin/env bash
# test/integration/http_conformance.sh: test/conformance/http.json, the
# cases every client package runs (their README quick starts through
# test/conformance/http_check.py, their suites through a runner of their
# own), names the rows of doc/clients.md's behaviour table, no more and no
# fewer (test/conformance/check_table.py).
. "$(dirname "$0")/lib.bash"
python3 "$IDEM_TOP/test/conformance/check_table.py" "$IDEM_TOP"
