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
idem_ensure_packages python3-psycopg python3-psycopg-pool python3-starlette python3-fastapi \
  python3-django python3-flask python3-pytest python3-pytest-asyncio python3-httpx python3-build \
  python3-venv python3-setuptools python3-wheel python3-uvicorn python3-mypy
. "$here/fresh_db.bash"
. "$here/readme_block.bash"
. "$here/wait_burst/wait_burst.bash"
fresh_db idem_python_package

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
tmp=$(mktemp -d /tmp/idem-python-package.XXXXXX)
server=
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
cp -r "$IDEM_TOP/clients/python" "$tmp/src"
cd "$tmp/src"

idem_log "python_package: pytest"
PYTHONPATH=src:tests $PY -m pytest -q -p no:cacheprovider

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
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$tmp/venv/bin/python" -m uvicorn app:app --host 127.0.0.1 --port "$port" --log-level warning \
  >"$tmp/uvicorn.log" 2>&1 &
server=$!

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


for _ in range(100):
    try:
        post({"amount": 1})
        break
    except OSError:
        time.sleep(0.1)
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
cp "$IDEM_TOP/test/integration/wait_burst/app.py" wait_burst_app.py
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
wait_burst python "$tmp/wait-burst.log" sh -c 'echo "listening on 127.0.0.1:$1"
  exec "$0" -m uvicorn wait_burst_app:app --host 127.0.0.1 --port "$1" --log-level warning' "$tmp/venv/bin/python" "$port"

# a new user (issue 45): the README's FastAPI quick start, as written, in
# the empty project with the wheel installed as the README's Install says;
# its handler takes its own connection from the quick start's pool (4):
# 16 concurrent requests with distinct keys are all answered 201
idem_log "python_package: the README's FastAPI quick start"
mkdir "$tmp/quick"
cd "$tmp/quick"
readme_block "$IDEM_TOP/clients/python/README.md" "quick-start: fastapi" python > app.py
# the README's command line, with this run's address
run=$(readme_block "$IDEM_TOP/clients/python/README.md" "quick-start: run" sh)
[ "$run" = "python3 -m uvicorn app:app" ] || { echo "python_package: the README runs the app with: $run" >&2; exit 1; }
port=$((18000 + RANDOM % 1000))
PATH=$tmp/venv/bin:$PATH $run --host 127.0.0.1 --port "$port" --log-level warning >"$tmp/quick.log" 2>&1 &
server=$!
"$tmp/venv/bin/python" - "$port" <<'PY' || { cat "$tmp/quick.log"; exit 1; }
import json, sys, time, urllib.error, urllib.request, uuid
from concurrent.futures import ThreadPoolExecutor

url = "http://127.0.0.1:%s/payments" % sys.argv[1]


def post(body, key=None, user="alice"):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    if user:
        headers["X-User"] = user
    req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


for _ in range(100):
    try:
        post({"amount": 1})
        break
    except OSError:
        time.sleep(0.1)
key = "quick-" + uuid.uuid4().hex
first, again = post({"amount": 5}, key), post({"amount": 5}, key)
assert first[0] == 201 and json.loads(first[2])["paid"] == 5, first
assert again[0] == 201 and again[1]["Idempotent-Replayed"] == "true" and again[2] == first[2], again
nobody = post({"amount": 5}, key + "-x", user=None)
assert nobody[0] == 401 and nobody[1]["Content-Type"] == "application/problem+json", nobody
started = time.monotonic()
with ThreadPoolExecutor(16) as ex:
    burst = list(ex.map(lambda i: post({"amount": i}, "%s-%d" % (key, i)), range(16)))
assert [r[0] for r in burst] == [201] * 16, [(r[0], r[2]) for r in burst]
print("README quick start: 201, byte-identical replay, 401 without a caller, 16 concurrent 201 in %.1fs"
      % (time.monotonic() - started))
PY
kill "$server"
wait "$server" 2>/dev/null || true
server=
echo "python_package: ok"
