#!/usr/bin/env python3
"""bench/notify_latency.py DSN SECONDS: how soon a listening relay claims an
event after its commit (make bench, group "notify").

A relay on its own connection does what every relay must (doc/reference.md,
"Waking relays"): LISTEN idempotency_outbox; claim_events until a claim
returns nothing; look once more after twice idempotency.outbox_notify_interval
(20 ms); then wait for a notification, at most a second.  A producer on
another connection enqueues a probe event every 5 to 25 ms, each in its own
transaction, and notes when its COMMIT returned.  For every probe, the
latency is the relay's claim time minus that moment (both on this
machine's monotonic clock).  Prints "p50_ms p99_ms probes".  Other writers
(pgbench, say) may run meanwhile: the relay claims and publishes their
events too.
"""
import random
import select
import sys
import threading
import time

import psycopg2

dsn, seconds = sys.argv[1], float(sys.argv[2])
SECOND_LOOK = 0.020
POLL = 1.0

committed = {}   # probe id -> when its COMMIT returned
claimed = {}     # event id -> when the relay claimed it
done = threading.Event()


def relay():
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("LISTEN idempotency_outbox")
    looked_again = False
    while not done.is_set():
        cur.execute("SELECT id FROM idempotency.claim_events(1000, '1 minute')")
        ids = [r[0] for r in cur.fetchall()]
        now = time.monotonic()
        if ids:
            for i in ids:
                claimed[i] = now
            cur.execute("SELECT idempotency.mark_published(%s)", (ids,))
            looked_again = False
            continue
        if conn.notifies:       # arrived while the claim ran: claim again
            conn.notifies.clear()
            looked_again = False
            continue
        timeout = POLL if looked_again else SECOND_LOOK
        looked_again = True
        if select.select([conn], [], [], timeout) != ([], [], []):
            conn.poll()
            conn.notifies.clear()
    conn.close()


def producer():
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
        cur.execute("SELECT idempotency.enqueue_event('probe', %s, 'Probe', '{}')", (str(n),))
        event_id = cur.fetchone()[0]
        conn.commit()
        committed[event_id] = time.monotonic()
        time.sleep(random.uniform(0.005, 0.025))
    conn.close()


relay_thread = threading.Thread(target=relay)
relay_thread.start()
time.sleep(0.2)
producer()
time.sleep(POLL + 0.5)   # the last probes' claims, even if only a poll finds them
done.set()
relay_thread.join()

latencies = sorted(max(0.0, claimed[i] - t) * 1000 for i, t in committed.items() if i in claimed)
missed = len(committed) - len(latencies)
if not latencies:
    print("NA NA 0 %d" % missed)
else:
    p = lambda q: latencies[min(len(latencies) - 1, int(len(latencies) * q))]
    print("%.1f %.1f %d %d" % (p(0.50), p(0.99), len(latencies), missed))
