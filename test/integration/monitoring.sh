#!/usr/bin/env bash
# test/integration/monitoring.sh: the files of monitoring/ work.
#
# monitoring/postgres_exporter.yaml parses (python3-yaml; without it the
# test says so and passes), every query has the shape postgres_exporter
# reads (query, metrics of LABEL, COUNTER, GAUGE ... with a description),
# and runs in a fresh database, as a role given only the grants that its
# header and doc/operations.md ("Metrics") name, returning exactly the
# columns its metrics list, after a call of every outcome.
# monitoring/grafana-dashboard.json is valid JSON whose expressions use
# only metrics the queries file defines.  Then, on the host (not in the
# chroot of another major), the real thing: Debian's postgres_exporter
# runs the queries file as that role, Prometheus scrapes it every second
# while calls are made (bench/dashboard.py serve), and every expression of
# every panel of the dashboard must evaluate to series and draw
# (bench/dashboard.py check and draw, as make bench draws doc/dashboard.svg).
#
# In make test (test/run.sh, integration group) PGHOST, PGPORT and PGUSER
# point at the throwaway cluster, which preloads the library (the outcome
# counts need it).
. "$(dirname "$0")/lib.bash"
: "${BIN:?needs test/run.sh (IDEM_TEST_BIN)}"
DB=regress_monitoring
ROLE=regress_monitoring_exporter

python3 -c 'import yaml' 2>/dev/null ||
  skip "python3-yaml is not installed (apt-get install python3-yaml)"

psql_pg -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "DROP ROLE IF EXISTS $ROLE" \
  -c "CREATE DATABASE $DB" -c "CREATE ROLE $ROLE LOGIN"
at_exit 'psql_pg -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "DROP ROLE IF EXISTS $ROLE"'
psql_pg -d "$DB" >/dev/null <<SQL
CREATE EXTENSION idempotency;
GRANT USAGE ON SCHEMA idempotency TO $ROLE;
GRANT EXECUTE ON FUNCTION idempotency.metrics() TO $ROLE;
GRANT SELECT ON idempotency.metrics, idempotency.stats, idempotency.stalled_keys TO $ROLE;
-- a call of every outcome but gone, and a key of every status
SELECT idempotency.claim('k1', '{"n": 1}', 'shop');
SELECT idempotency.claim('k1', '{"n": 1}', 'shop');
SELECT idempotency.claim('k1', '{"n": 2}', 'shop');
SELECT idempotency.complete('k1', fence, '{}', scope => 'shop')
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'k1';
SELECT idempotency.claim('k1', '{"n": 1}', 'shop');
SELECT idempotency.claim('k2');
UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1 second'
 WHERE idempotency_key = 'k2';
SELECT idempotency.claim('k2');
SELECT idempotency.claim('k3', scope => 'shop');
SELECT idempotency.fail('k3', fence, retryable => false, scope => 'shop')
  FROM idempotency.idempotency_keys WHERE idempotency_key = 'k3';
DO \$\$ BEGIN
  PERFORM idempotency.release('k2', 1);
EXCEPTION WHEN object_not_in_prerequisite_state THEN NULL;
END \$\$;
SELECT idempotency.claim('old');
UPDATE idempotency.idempotency_keys
   SET expires_at = now() - interval '1 second', locked_until = NULL
 WHERE idempotency_key = 'old';
SELECT idempotency.purge_expired_batch();
SELECT idempotency.enqueue_event('order', 'o1', 'created', '{}');
SQL

export TOP DB ROLE BIN PGHOST PGPORT
python3 - <<'PY'
import json, os, re, subprocess, sys
import yaml

TOP, DB, ROLE, BIN = (os.environ[v] for v in ("TOP", "DB", "ROLE", "BIN"))
USAGES = {"LABEL", "COUNTER", "GAUGE", "DISCARD", "MAPPEDMETRIC", "DURATION", "HISTOGRAM"}
errors = []

def psql(sql):
    """the rows of sql as the exporter's role, with a header line"""
    p = subprocess.run(["runuser", "-u", "postgres", "--", BIN + "/psql", "-X", "-q", "-A",
                        "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", DB, "-c",
                        "SET ROLE " + ROLE, "-c", sql],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout

path = os.path.join(TOP, "monitoring", "postgres_exporter.yaml")
with open(path, encoding="utf-8") as f:
    queries = yaml.safe_load(f)
if not isinstance(queries, dict) or not queries:
    sys.exit("FAIL: %s holds no queries" % path)
names = set()
for name, q in queries.items():
    where = "%s: %s" % (os.path.relpath(path, TOP), name)
    if not isinstance(q, dict) or not isinstance(q.get("query"), str):
        errors.append(where + ": no query")
        continue
    unknown = set(q) - {"query", "metrics", "master", "primary", "cache_seconds", "runonserver"}
    if unknown:
        errors.append("%s: unknown keys %s" % (where, sorted(unknown)))
    columns = []
    for m in q.get("metrics") or []:
        if not isinstance(m, dict) or len(m) != 1:
            errors.append(where + ": a metric is not one column")
            continue
        (column, spec), = m.items()
        columns.append(column)
        if spec.get("usage") not in USAGES or not spec.get("description"):
            errors.append("%s.%s: usage %r, description %r" % (where, column, spec.get("usage"),
                                                                spec.get("description")))
        if spec.get("usage") in ("COUNTER", "GAUGE"):
            names.add("%s_%s" % (name, column))
    rc, out = psql(q["query"])
    if rc != 0:
        errors.append("%s: the query fails:\n%s" % (where, out))
        continue
    lines = out.splitlines()
    got = lines[0].split("\t") if lines else []
    if got != columns:
        errors.append("%s: the query returns %s, the metrics list %s" % (where, got, columns))
    rows = [l for l in lines[1:] if not re.fullmatch(r"\(\d+ rows?\)", l)]
    if not rows:
        errors.append(where + ": no row")
    print("%s: %d rows of %s" % (name, len(rows), ", ".join(columns)))

# the dashboard: valid JSON, and every metric it plots is one of the above
path = os.path.join(TOP, "monitoring", "grafana-dashboard.json")
with open(path, encoding="utf-8") as f:
    dashboard = json.load(f)
used = set()
def walk(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "definition") and isinstance(v, str):
                used.update(re.findall(r"\bidempotency_[a-z_]+", v))
            walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(dashboard)
if not used:
    errors.append("monitoring/grafana-dashboard.json plots nothing")
for metric in sorted(used - names):
    errors.append("monitoring/grafana-dashboard.json: %s is not in postgres_exporter.yaml" % metric)
print("grafana-dashboard.json: %d panels, metrics %s" % (len(dashboard.get("panels", [])),
                                                        ", ".join(sorted(used))))
if errors:
    print("FAIL:\n" + "\n".join(errors))
    sys.exit(1)
print("ok: every query runs as the exporter's role")
PY

if [ -f /etc/idempotency-chroot ]; then
  echo "dashboard: skipped inside the $(cat /etc/idempotency-chroot) chroot; the host's run checks it"
  exit 0
fi
for c in prometheus prometheus-postgres-exporter gnuplot; do
  command -v $c >/dev/null || fail "$c is not installed (test/run.sh installs it)"
done
work_dir monitoring
DIR=$WORK
python3 "$TOP/bench/dashboard.py" serve "$DIR" \
  "host=$PGHOST port=$PGPORT user=$ROLE dbname=$DB sslmode=disable" --scrape 1 &
SERVE=$!
at_exit 'kill "$SERVE" 2>/dev/null && wait "$SERVE"'
for _ in $(seq 120); do
  [ -s "$DIR/serve.json" ] && break
  kill -0 "$SERVE" 2>/dev/null || fail "dashboard.py serve exited"
  sleep 0.5
done
[ -s "$DIR/serve.json" ] || fail "dashboard.py serve did not start"
# calls while it scrapes, so that the rates are not all zero: a replay and
# a new key every second
for i in $(seq 8); do
  psql_pg -d "$DB" -c "SELECT idempotency.claim('k1', '{\"n\": 1}', 'shop')" \
    -c "SELECT idempotency.claim('n$i', scope => 'shop')" >/dev/null
  sleep 1
done
python3 "$TOP/bench/dashboard.py" check "$DIR"
python3 "$TOP/bench/dashboard.py" draw "$DIR" "$DIR/dashboard.svg" --title "test/integration/monitoring.sh"
# a dashboard that asks for a metric the exporter does not produce fails
sed 's/idempotency_keys_count/idempotency_keys_counted/' "$TOP/monitoring/grafana-dashboard.json" \
  >"$DIR/drifted.json"
if python3 "$TOP/bench/dashboard.py" check "$DIR" --dashboard "$DIR/drifted.json" >"$DIR/drifted.log" 2>&1 ||
   ! grep -q 'idempotency_keys_counted.*matches no series\|matches no series.*idempotency_keys_counted' "$DIR/drifted.log"; then
  cat "$DIR/drifted.log"
  echo "FAIL: dashboard.py check did not refuse a metric the exporter does not produce"
  exit 1
fi
python3 - "$TOP/monitoring/grafana-dashboard.json" "$DIR/dashboard.svg" <<'PY'
import json, sys
from xml.sax.saxutils import escape
svg = open(sys.argv[2], encoding="utf-8").read()
missing = [p["title"] for p in json.load(open(sys.argv[1], encoding="utf-8"))["panels"]
           if ">%s<" % escape(p["title"]) not in svg]
if missing:
    sys.exit("FAIL: the picture lacks the panels %s" % missing)
print("ok: every panel of the dashboard evaluates and is drawn")
PY
