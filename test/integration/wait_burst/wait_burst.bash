# test/integration/wait_burst/wait_burst.bash: sourced by the package tests.
# wait_burst LABEL LOG COMMAND...: starts COMMAND (a package's burst app,
# which prints "listening on 127.0.0.1:PORT" once it serves), runs the one
# HTTP checker (check.py) against it, and stops it.  The database is the
# PG* variables' (the app's and the checker's).
wait_burst() {
  local label=$1 log=$2 port= pid
  shift 2
  PORT=0 "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log"; kill "$pid" 2>/dev/null; echo "wait_burst: the $label app did not start" >&2; return 1; }
  if ! python3 "$IDEM_TOP/test/integration/wait_burst/check.py" "http://127.0.0.1:$port" "$label"; then
    kill "$pid" 2>/dev/null; cat "$log"; return 1
  fi
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}
