#!/usr/bin/env bash
# test/integration/python_package.sh: the Python package clients/python
# (pg_idempotency) as a team installs it.  Its pytest suite runs against
# the test cluster (client, relay, and the HTTP behaviour table on
# Starlette, Flask and Django); then a wheel built with Debian's toolchain
# (python3 -m build --no-isolation) is installed into a fresh virtual
# environment (--system-site-packages: psycopg and the frameworks come from
# apt, there is no PyPI) and a FastAPI app imports it from there and serves
# real HTTP on 127.0.0.1 under uvicorn: a request, then its replay, both
# with Idempotency-Key-Expires a day ahead; a duplicate sent while the
# first runs waits for it (wait) and gets its answer; bursts of 20 and 100
# duplicates with wait through pools of 2, 4 and 10 run once
# (wait_burst/).  mypy
# --strict checks the package's types and that its signatures reach users.
# Debian's python3 is used whatever else is first on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
# The package does not depend on the server's major: the host's run tests it once.
idem_host_only "tests the Python package"
. "$here/readme_block.bash"
. "$here/wait_burst/wait_burst.bash"
. "$here/python_package.bash"
. "$here/fresh_db.bash"
fresh_db idem_python_package

tmp=$(mktemp -d /tmp/idem-python-package.XXXXXX)
server=
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
python_package_setup "$tmp"

idem_log "python_package: pytest"
python_package_pytest

idem_log "python_package: mypy --strict"
$PY -m mypy --strict --ignore-missing-imports --no-incremental --cache-dir=/dev/null \
  src/pg_idempotency tests/typing_check.py

idem_log "python_package: wheel"
$PY -m build --no-isolation --wheel --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
wheel=$(ls "$tmp"/dist/pg_idempotency-*.whl)
$PY -c 'import sys, zipfile; assert "pg_idempotency/py.typed" in zipfile.ZipFile(sys.argv[1]).namelist(), "py.typed missing"' "$wheel"

idem_log "python_package: fresh venv"
$PY -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
mkdir "$tmp/app"
cd "$tmp/app"
"$tmp/venv/bin/python" - "$tmp/venv" <<'PY'
import sys, pg_idempotency
assert pg_idempotency.__file__.startswith(sys.argv[1]), pg_idempotency.__file__
print("pg_idempotency", pg_idempotency.__version__, "from", pg_idempotency.__file__)
PY
cat > app.py <<'PY'
import asyncio

from fastapi import FastAPI, Request
from psycopg_pool import AsyncConnectionPool

from pg_idempotency.asgi import IdempotencyMiddleware

pool = AsyncConnectionPool("", open=False)
app = FastAPI()
app.add_event_handler("startup", pool.open)
app.add_event_handler("shutdown", pool.close)
app.add_middleware(IdempotencyMiddleware, pool=pool, ttl="1 day", wait="10 seconds")
runs = 0


@app.post("/payments", status_code=201)
async def pay(request: Request):
    global runs
    runs += 1
    return {"amount": (await request.json())["amount"], "run": runs}


@app.post("/slow", status_code=201)
async def slow(request: Request):
    global runs
    await asyncio.sleep(1)
    runs += 1
    return {"run": runs}
PY
port=$(idem_free_port)
"$tmp/venv/bin/python" -m uvicorn app:app --host 127.0.0.1 --port "$port" --log-level warning \
  >"$tmp/uvicorn.log" 2>&1 &
server=$!
python_package_serving "$port" "$server" || { cat "$tmp/uvicorn.log"; exit 1; }

idem_log "python_package: HTTP on 127.0.0.1:$port"
"$tmp/venv/bin/python" - "$port" <<'PY' || { cat "$tmp/uvicorn.log"; exit 1; }
import json, sys, threading, time, urllib.error, urllib.request
from datetime import datetime, timedelta, timezone

base = "http://127.0.0.1:%s" % sys.argv[1]


def post(body, key=None, url=base + "/payments"):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


status, headers, body = post({"amount": 5})
assert status == 400 and headers["Content-Type"] == "application/problem+json", (status, body)
first = post({"amount": 5}, "wheel-1")
again = post({"amount": 5}, "wheel-1")
other = post({"amount": 6}, "wheel-1")
assert first[0] == 201 and first[1].get("Idempotent-Replayed") is None, first
assert again[0] == 201 and again[1]["Idempotent-Replayed"] == "true" and again[2] == first[2], again
assert other[0] == 422, other
expires = first[1]["Idempotency-Key-Expires"]
ahead = datetime.strptime(expires, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=timezone.utc) - datetime.now(timezone.utc)
assert abs(ahead - timedelta(days=1)) < timedelta(seconds=10), expires
assert again[1]["Idempotency-Key-Expires"] == expires and again[1].get("Idempotency-Replay-Expires") is None, again
print("installed wheel over HTTP: 400, 201, replay 201 (run %d once), 422; keys kept until %s" % (first[2]["run"], expires))

# a duplicate sent while the first runs (a second) waits for it
replies = {}
def send(name):
    replies[name] = post({}, "wheel-slow", base + "/slow")
threads = [threading.Thread(target=send, args=("first",)), threading.Thread(target=send, args=("second",))]
threads[0].start()
time.sleep(0.3)
threads[1].start()
for t in threads:
    t.join()
first, second = replies["first"], replies["second"]
assert first[0] == 201 and first[1].get("Idempotent-Replayed") is None, first
assert second[0] == 201 and second[1]["Idempotent-Replayed"] == "true" and second[2] == first[2], second
print("installed wheel over HTTP: the duplicate of a request in flight waited and got its answer (run %d)" % first[2]["run"])
PY
kill "$server"
wait "$server" 2>/dev/null || true
server=

# bursts of duplicates with wait through small pools: one execution each
python_package_wait_burst "$tmp/wait-burst.log" "$tmp/venv/bin/python"

# a new user: the README's FastAPI quick start, as written, in the empty
# project with the wheel installed as the README's Install says; its
# handler takes its own connection from the quick start's pool (4): 16
# concurrent requests with distinct keys are all answered 201
idem_log "python_package: the README's FastAPI quick start"
python_package_quick_start "$tmp/quick" "$tmp/venv/bin"
echo "python_package: ok"
