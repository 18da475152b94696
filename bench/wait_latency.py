#!/usr/bin/env python3
"""bench/wait_latency.py DSN SECONDS MODE: how soon a duplicate request gets
the first request's answer (make bench, group "wait").

Over and over, a holder on its own connection claims a new key (phased: the
claim commits), works for 20 to 80 ms and completes it, noting when the
COMMIT of its completion returned.  Just after the holder's claim, a
duplicate of the request on another connection asks for the answer:

  wait    one claim(..., wait => '10 seconds'), which sleeps until the
          holder's completion commits (doc/reference.md, "Waiting for the
          holder");
  retry   what a client does without it: claim, and while the answer is
          in_progress sleep and claim again, the sleep starting at 25 ms
          and doubling up to 400 ms (exponential backoff).

The latency of a duplicate is when it got replay minus when the holder's
completion committed (both on this machine's monotonic clock).  Prints
"p50_ms p99_ms duplicates claims_per_duplicate".
"""
import random
import sys
import threading
import time

import psycopg2

dsn, seconds, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if mode not in ('wait', 'retry'):
    sys.exit('MODE must be wait or retry')
REQUEST = '{"amount": 100}'


def connect():
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def claim(cur, key, wait=None):
    cur.execute("SELECT outcome, fence FROM idempotency.claim(%s, %s, wait => %s)",
                (key, REQUEST, wait))
    return cur.fetchone()


def duplicate(cur, key, result):
    claims = 0
    if mode == 'wait':
        outcome, _ = claim(cur, key, '10 seconds')
        claims = 1
    else:
        nap = 0.025
        while True:
            outcome, _ = claim(cur, key)
            claims += 1
            if outcome != 'in_progress':
                break
            time.sleep(nap)
            nap = min(nap * 2, 0.4)
    result['at'] = time.monotonic()
    result['outcome'] = outcome
    result['claims'] = claims


holder = connect().cursor()
dup = connect().cursor()
latencies = []
claims = 0
run = '%d-%d' % (time.time() * 1000, random.randrange(1 << 30))
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    n += 1
    key = 'wait-%s-%s-%d' % (mode, run, n)
    _, fence = claim(holder, key)
    result = {}
    t = threading.Thread(target=duplicate, args=(dup, key, result))
    t.start()
    time.sleep(random.uniform(0.020, 0.080))
    holder.execute("SELECT idempotency.complete(%s, %s, %s)", (key, fence, '{"paid": true}'))
    committed = time.monotonic()
    t.join()
    if result.get('outcome') != 'replay':
        sys.exit('duplicate of %s got %s, not replay' % (key, result.get('outcome')))
    latencies.append(max(0.0, result['at'] - committed) * 1000)
    claims += result['claims']

latencies.sort()


def pct(p):
    return latencies[min(len(latencies) - 1, int(p * len(latencies)))]


print('%.1f %.1f %d %.1f' % (pct(0.50), pct(0.99), len(latencies), claims / len(latencies)))
