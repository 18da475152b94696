#!/usr/bin/env python3
"""bench/wait_fanout.py DSN SECONDS KEYS WAITERS: many hot keys, each with
many waiters (make bench, group "wait"; doc/reference.md, "Waiting for the
holder").

KEYS holders, each on its own connection, claim a new key over and over
(phased: the claim commits), work for 20 to 80 ms and complete it, noting
when the COMMIT of the completion returned.  Just after each claim,
WAITERS duplicates of that key, each on its own connection, ask for the
answer with claim(..., wait => '10 seconds').  So KEYS keys are hot at
any time, with KEYS x WAITERS claims asleep.

The latency of a duplicate is when it got replay minus when the holder's
completion committed.  The wake-up counts come from the library's shared
counters (idempotency_wait_counts, declared by bench/run.sh as
bench.wait_counts()), read before and after: commits that woke a slot,
waiters woken, and woken waiters that claimed again and found their key
still held (woken for another key of their slot).  A library without the
counters prints NA for them.

Prints "p50_ms p99_ms duplicates commits woken_per_commit unchanged_per_commit slots".
"""
import random
import sys
import threading
import time

import psycopg2

dsn, seconds, nkeys, nwaiters = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
REQUEST = '{"amount": 100}'
run = '%d-%d' % (time.time() * 1000, random.randrange(1 << 30))


def connect():
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def counts():
    cur = connect().cursor()
    try:
        cur.execute("SELECT commits, woken, unchanged, slots FROM bench.wait_counts()")
        return cur.fetchone()
    except psycopg2.Error:
        return None
    finally:
        cur.connection.close()


latencies = []
lock = threading.Lock()
errors = []


def holder(h, end):
    cur = connect().cursor()
    waiters = [connect().cursor() for _ in range(nwaiters)]
    n = 0
    while time.monotonic() < end and not errors:
        n += 1
        key = 'fanout-%s-%d-%d' % (run, h, n)
        cur.execute("SELECT fence FROM idempotency.claim(%s, %s)", (key, REQUEST))
        fence = cur.fetchone()[0]
        results = [{} for _ in waiters]

        def wait(wcur, result):
            try:
                wcur.execute("SELECT outcome FROM idempotency.claim(%s, %s, wait => '10 seconds')",
                             (key, REQUEST))
                result['outcome'] = wcur.fetchone()[0]
            except psycopg2.Error as e:
                result['outcome'] = str(e)
            result['at'] = time.monotonic()

        threads = [threading.Thread(target=wait, args=(w, r)) for w, r in zip(waiters, results)]
        for t in threads:
            t.start()
        time.sleep(random.uniform(0.020, 0.080))
        cur.execute("SELECT idempotency.complete(%s, %s, %s)", (key, fence, '{"paid": true}'))
        committed = time.monotonic()
        for t in threads:
            t.join()
        with lock:
            for r in results:
                if r.get('outcome') != 'replay':
                    errors.append('duplicate of %s got %s, not replay' % (key, r.get('outcome')))
                    break
                latencies.append(max(0.0, r['at'] - committed) * 1000)


before = counts()
end = time.monotonic() + seconds
holders = [threading.Thread(target=holder, args=(h, end)) for h in range(nkeys)]
for t in holders:
    t.start()
for t in holders:
    t.join()
after = counts()
if errors:
    sys.exit(errors[0])
latencies.sort()


def pct(p):
    return latencies[min(len(latencies) - 1, int(p * len(latencies)))]


if before is None or after is None:
    tail = 'NA NA NA NA'
else:
    commits = after[0] - before[0]
    woken = after[1] - before[1]
    unchanged = after[2] - before[2]
    tail = '%d %.2f %.3f %d' % (commits, woken / max(commits, 1), unchanged / max(commits, 1), after[3])
print('%.1f %.1f %d %s' % (pct(0.50), pct(0.99), len(latencies), tail))
