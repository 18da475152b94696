"""test/integration/wait_burst/check.py URL LABEL: the one HTTP checker of
the packages' burst of duplicates with wait (doc/clients.md, "Waiting for
the holder").  URL serves POST /wait-burst/<pool> for pools of 2, 4 and 10
connections: a handler of HANDLER seconds that inserts its key into
wait_burst_runs on that pool, behind the package's middleware with a wait
of WAIT seconds, scoped by X-User.  For each pool, 20 and then 100
duplicates of one key are sent at once, then 10 duplicates of each of as
many keys as the pool has connections (the server lets one claim per key
sleep: only the client's bound per pool keeps a connection free for the
holders then); it checks exactly one execution per key (the table's
rows), every other answer a byte-identical replay or a 409 with
Retry-After, no other status, and all answered within HANDLER + WAIT
seconds of the first being sent.  It prints one line per burst (the
figures of the report) and, with WAIT_BURST_FIGURES set to a directory,
writes them there as a markdown table, LABEL.md, once every burst passed
(test/integration/wait_burst/doc.sh puts them in doc/clients.md).  psql
reaches the database of the PG* variables."""
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

HANDLER, WAIT = 0.35, 5.0
POOLS, BURSTS = (2, 4, 10), (20, 100)
base, label = sys.argv[1], sys.argv[2]
rows = []


def psql(sql):
    return subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
                          check=True, capture_output=True, text=True).stdout.strip()


def post(url, key):
    req = urllib.request.Request(url, b'{"amount": 5}', {
        "Content-Type": "application/json", "Idempotency-Key": key, "X-User": "burst"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def burst(pool, keys, n):
    """n duplicates of each of keys keys, all sent at once."""
    tag = "%s-%d-%dx%d-%s" % (label, pool, keys, n, uuid.uuid4().hex[:8])
    url = "%s/wait-burst/%d" % (base, pool)
    sent = ["%s-%d" % (tag, i % keys) for i in range(keys * n)]
    replies = [None] * len(sent)
    barrier = threading.Barrier(len(sent) + 1)

    def send(i):
        barrier.wait()
        replies[i] = post(url, sent[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sent))]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.monotonic()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    runs = dict(l.split("|") for l in psql(
        "SELECT key, count(*) FROM wait_burst_runs WHERE key LIKE '%s-%%' GROUP BY key" % tag).split("\n") if l)
    first = {k: r for k, r in zip(sent, replies) if r[0] == 201 and r[1].get("Idempotent-Replayed") is None}
    replays = [(k, r) for k, r in zip(sent, replies) if r[0] == 201 and r[1].get("Idempotent-Replayed") == "true"]
    busy = [r for r in replies if r[0] == 409 and int(r[1].get("Retry-After") or 0) >= 1]
    executions = sum(int(v) for v in runs.values())
    line = ("wait burst, %s: pool %d, %d key(s) x %d duplicates: %d execution(s); %d 201, %d replays, %d 409; %.2f s"
            % (label, pool, keys, n, executions, len(first), len(replays), len(busy), took))
    print(line, flush=True)
    rows.append((label, pool, "%d x %d" % (keys, n), executions,
                 len(first), len(replays), len(busy), "%.2f" % took))
    others = [(r[0], r[2][:200]) for r in replies if r[0] not in (201, 409)]
    assert sorted(runs.values()) == ["1"] * keys and len(first) == keys, line
    assert len(first) + len(replays) + len(busy) == len(sent), "%s; other answers: %s" % (line, others[:3])
    assert all(r[2] == first[k][2] for k, r in replays), "%s: a replay differs" % line
    assert took < HANDLER + WAIT, "%s: longer than the handler plus the wait" % line


psql("CREATE TABLE IF NOT EXISTS wait_burst_runs (key text NOT NULL, at timestamptz DEFAULT clock_timestamp())")
for _ in range(100):           # the app is up
    try:
        urllib.request.urlopen(base + "/", timeout=1)
        break
    except urllib.error.HTTPError:
        break
    except OSError:
        time.sleep(0.1)
for pool in POOLS:
    for n in BURSTS:
        burst(pool, 1, n)
    # as many keys as the pool has connections, each with duplicates: with
    # a sleeper per key (the server's bound) the pool would be all asleep
    burst(pool, pool, 10)
figures = os.environ.get("WAIT_BURST_FIGURES")
if figures:
    with open(os.path.join(figures, label + ".md"), "w") as f:
        f.write("| package | pool | keys x duplicates | executions | first 201 | replays | 409 | seconds |\n"
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
        f.writelines("| %s |\n" % " | ".join(map(str, r)) for r in rows)
