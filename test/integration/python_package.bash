# test/integration/python_package.bash: sourced by the tests of the Python
# package clients/python (test/integration/python_package.sh, directly;
# test/pooler/python.sh, through PgBouncer), not run.  Its caller has
# scripts/lib.sh, and test/integration/readme_block.bash and
# wait_burst/wait_burst.bash sourced, and $IDEM_TOP set.
#
# python_package_setup TMP: Debian's python3 as $PY (psycopg 3, its pool
#   and the frameworks come from apt, there is no PyPI), and a copy of
#   clients/python in TMP/src, the working directory after it.
# python_package_pytest [ARG...]: the pytest suite, in that copy.
# python_package_serving PORT PID: waits until something answers HTTP on
#   127.0.0.1:PORT; fails when PID ends first.
# python_package_wait_burst LOG PYTHON: test/integration/wait_burst's
#   Python app (test/integration/wait_burst/app.py) under PYTHON's uvicorn,
#   checked by wait_burst/check.py; in the current directory.
# python_package_quick_start DIR BIN: the README's FastAPI quick start, as
#   written, in the empty DIR, run with the README's command line by the
#   python3 of BIN (where pg_idempotency imports) on 127.0.0.1, and
#   test/conformance/http.json run against it over real HTTP.  The
#   server's PID is in $server while it runs.

python_package_setup() {
  idem_ensure_packages python3-psycopg python3-psycopg-pool python3-starlette python3-fastapi \
    python3-django python3-flask python3-pytest python3-pytest-asyncio python3-httpx python3-build \
    python3-venv python3-setuptools python3-wheel python3-uvicorn python3-mypy
  PY=/usr/bin/python3
  export PYTHONDONTWRITEBYTECODE=1
  cp -r "$IDEM_TOP/clients/python" "$1/src"
  cd "$1/src"
}

python_package_pytest() {
  PYTHONPATH=src:tests $PY -m pytest -q -p no:cacheprovider "$@"
}

python_package_serving() {
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

python_package_wait_burst() {
  local log=$1 python=$2
  cp "$IDEM_TOP/test/integration/wait_burst/app.py" wait_burst_app.py
  wait_burst python "$log" sh -c 'echo "listening on 127.0.0.1:$1"
    exec "$0" -m uvicorn wait_burst_app:app --host 127.0.0.1 --port "$1" --log-level warning' \
    "$python" "$(idem_free_port)"
}

python_package_quick_start() {
  local dir=$1 bin=$2 run port
  mkdir -p "$dir"
  cd "$dir"
  readme_block "$IDEM_TOP/clients/python/README.md" "quick-start: fastapi" python > app.py
  # the README's command line, with this run's address
  run=$(readme_block "$IDEM_TOP/clients/python/README.md" "quick-start: run" sh)
  [ "$run" = "python3 -m uvicorn app:app" ] || { echo "python_package: the README runs the app with: $run" >&2; return 1; }
  port=$(idem_free_port)
  PATH=$bin:$PATH $run --host 127.0.0.1 --port "$port" --log-level warning >"$dir/quick.log" 2>&1 &
  server=$!
  python_package_serving "$port" "$server" || { cat "$dir/quick.log"; return 1; }
  python3 "$IDEM_TOP/test/conformance/http_check.py" "http://127.0.0.1:$port" || { cat "$dir/quick.log"; return 1; }
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}
