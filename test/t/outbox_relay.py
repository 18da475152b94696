#!/usr/bin/env python3
"""test/t/outbox_relay.py DSN INTERVAL_MS POLL_S: a relay for the TAP tests
that does exactly what doc/reference.md ("Waking relays") asks of one, and
says what it does on stdout, a line each, flushed:

  listening                      once it listens
  notified PAYLOAD               a notification arrived
  claimed ID EVENT_TYPE HOW      it claimed (and published) an event; HOW is
                                 what led to that claim: start, notification,
                                 look (a look again after an empty claim) or
                                 poll (no notification within POLL_S)

The rule: LISTEN idempotency_outbox; claim until a claim returns nothing;
then, twice the producers' idempotency.outbox_notify_interval (INTERVAL_MS)
later, read outbox_quiet_commits() and claim again, and keep doing so while
the count was above 0; then wait for a notification, at most POLL_S
seconds.  Its transactions do not wait for synchronous standbys.  It runs
until it is killed.
"""
import select
import sys

import psycopg2

dsn, interval_ms, poll_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
LOOK = 2 * interval_ms / 1000.0

conn = psycopg2.connect(dsn)
conn.autocommit = True
cur = conn.cursor()
cur.execute("SET synchronous_commit = local")
cur.execute("LISTEN idempotency_outbox")
print("listening", flush=True)


def wait(seconds):
    """Wait for a notification at most this long; True if one came."""
    if not conn.notifies and select.select([conn], [], [], seconds)[0]:
        conn.poll()
    woken = bool(conn.notifies)
    for n in conn.notifies:
        print("notified", n.payload, flush=True)
    conn.notifies.clear()
    return woken


def claim(how):
    """Claim a batch, publish it with its lease token; True if not empty."""
    cur.execute("SELECT id, event_type, lease_token"
                " FROM idempotency.claim_events(100, '1 minute') ORDER BY id")
    rows = cur.fetchall()
    for event_id, event_type, _ in rows:
        print("claimed", event_id, event_type, how, flush=True)
    if rows:
        cur.execute("SELECT idempotency.mark_published(%s, %s)",
                    ([r[0] for r in rows], rows[0][2]))
    return bool(rows)


how = "start"
while True:
    if claim(how):
        continue
    while True:
        if wait(LOOK):
            how = "notification"
            break
        cur.execute("SELECT idempotency.outbox_quiet_commits()")
        quiet = cur.fetchone()[0]
        if claim("look"):
            how = "look"
            break
        if quiet == 0:
            how = "notification" if wait(poll_s) else "poll"
            break
