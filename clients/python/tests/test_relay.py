"""The relay worker: LISTEN wakes it, events go out in order and are
marked under the batch's lease token, a failing sink backs off and holds
back the aggregate's later events, SIGTERM hands the lease back.  Where
notifications do not reach its listener (a transaction pooler) it says so
once and polls; listen_dsn gives it a connection where they do."""
import asyncio
import os
import signal
import threading
import time

import pytest

from conftest import DIRECT_DSN, LISTEN_DSN, POOLED
from pg_idempotency import client
from pg_idempotency.relay import POLLING, AsyncRelay, Relay


@pytest.fixture
def outbox(conn):
    conn.execute("DELETE FROM idempotency.outbox_events")
    conn.commit()

    def enqueue(*events):
        ids = [client.enqueue_event(conn, *e) for e in events]
        conn.commit()
        return ids

    def row(event_id):
        r = conn.execute("SELECT published_at IS NOT NULL, attempts, last_error, locked_until "
                         "FROM idempotency.outbox_events WHERE id = %s", (event_id,)).fetchone()
        conn.commit()
        return r
    return enqueue, row


def start(relay):
    t = threading.Thread(target=relay.run, daemon=True)
    t.start()
    return t


def until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def polling_lines(caplog):
    return [r for r in caplog.records if r.getMessage().startswith(POLLING.split(";")[0])]


@pytest.mark.parametrize("listen", ["own", "listen_dsn"])
def test_publishes_in_order_after_notification(outbox, caplog, listen):
    # own: LISTEN on the relay's connection; listen_dsn: on a connection
    # of its own, to the database itself (through a pooler, the only one
    # that notifications reach)
    if listen == "own" and POOLED:
        pytest.skip("notifications do not reach a connection through a transaction pooler")
    enqueue, row = outbox
    seen = []
    relay = Relay("", lambda e: seen.append((e.aggregate_id, e.event_type)), poll=30.0,
                  listen_dsn=None if listen == "own" else DIRECT_DSN)
    t = start(relay)
    until(lambda: relay.listening)  # idle, listening: only a notification wakes it
    time.sleep(0.1)
    started = time.monotonic()
    ids = enqueue(("order", "1", "created", {"n": 1}), ("order", "1", "paid", {"n": 2}))
    until(lambda: relay.published == 2)
    assert time.monotonic() - started < 5        # well before the poll (30 s)
    assert seen == [("1", "created"), ("1", "paid")]
    assert all(row(i)[0] for i in ids)
    relay.stop()
    t.join(5)
    assert not t.is_alive()
    assert polling_lines(caplog) == []


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_polls_where_notifications_do_not_arrive(outbox, caplog, monkeypatch, kind):
    # Through a transaction pooler without listen_dsn the probe never
    # arrives: one line in the log, and every event goes out once, in
    # order per aggregate, at the poll.  On a direct connection the same
    # is seen with notifications dropped.
    import pg_idempotency.relay as relay_module

    def dropped(conn, channel):
        relay_module._heard_before(conn, channel)
        return False
    if not POOLED:
        monkeypatch.setattr(relay_module, "_heard_before", relay_module._heard, raising=False)
        monkeypatch.setattr(relay_module, "_heard", dropped)
    caplog.set_level("WARNING", logger="pg_idempotency.relay")
    enqueue, row = outbox
    seen = []
    poll = 0.5
    publish = lambda e: seen.append((e.aggregate_id, e.payload["n"]))   # noqa: E731
    if kind == "sync":
        relay = Relay("", publish, poll=poll)
        runner = start(relay)
        stop = relay.stop
    else:                           # on an event loop of its own, in a thread
        relay = AsyncRelay("", publish, poll=poll)
        loop = asyncio.new_event_loop()
        runner = threading.Thread(target=loop.run_until_complete, args=(relay.run(),), daemon=True)
        runner.start()

        def stop():
            loop.call_soon_threadsafe(relay.stop)
    try:
        until(lambda: polling_lines(caplog))
        assert relay.listening is False
        ids = []
        for n in range(4):          # four transactions, each an event of each aggregate
            ids += enqueue(*[("order", "p%d" % a, "step", {"n": n}) for a in range(3)])
        until(lambda: relay.published == len(ids), 15)
        time.sleep(poll * 2)        # nothing more comes
    finally:
        stop()
        runner.join(5)
    assert not runner.is_alive()
    assert sorted(seen) == sorted(("p%d" % a, n) for a in range(3) for n in range(4))   # each once
    for a in range(3):
        assert [n for agg, n in seen if agg == "p%d" % a] == [0, 1, 2, 3]
    assert all(row(i)[0] for i in ids)
    lines = polling_lines(caplog)
    assert len(lines) == 1, lines
    assert lines[0].getMessage() == POLLING % "0.5s"


def test_the_polling_line_is_said_once_per_relay():
    # a reconnect probes again, and says nothing again
    import logging
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    handler = Keep()
    logging.getLogger("pg_idempotency.relay").addHandler(handler)
    try:
        relay = Relay("", lambda e: None, poll=2.0)
        assert [relay._probed("c", False) for _ in range(3)] == ["UNLISTEN *"] * 3
        assert relay._probed("c", True) == "UNLISTEN c" and relay.listening
        assert Relay("", lambda e: None)._probed("c", False) == "UNLISTEN *"
    finally:
        logging.getLogger("pg_idempotency.relay").removeHandler(handler)
    assert records == [POLLING % "2s", POLLING % "1s"]


def test_enqueue_events_in_order(outbox, conn):
    ids = client.enqueue_events(conn, [("order", "5", "created", {"n": 1}),
                                       ("order", "5", "paid", {"n": 2})], [None, {"h": 1}])
    conn.commit()
    assert ids == sorted(ids) and len(ids) == 2
    events = client.claim_events(conn, 10, "1 minute")
    conn.rollback()
    assert [(e.id, e.event_type, e.headers) for e in events] == \
        [(ids[0], "created", None), (ids[1], "paid", {"h": 1})]


def test_failure_backs_off_and_holds_back_the_aggregate(outbox):
    enqueue, row = outbox

    def publish(e):
        if e.event_type == "bad":
            raise ConnectionError("broker down")

    first, later, other = enqueue(("order", "2", "bad", {}), ("order", "2", "next", {}),
                                  ("order", "3", "fine", {}))
    relay = Relay("", publish, poll=0.1)
    t = start(relay)
    until(lambda: relay.failed == 1 and relay.published == 1)
    relay.stop()
    t.join(5)
    published, attempts, error, _ = row(first)
    assert (published, attempts, error) == (False, 1, "broker down")
    assert row(later)[0] is False           # never overtakes the failed event
    assert row(other)[0] is True


def test_sigterm_hands_the_lease_back(outbox):
    enqueue, row = outbox
    gate = threading.Event()
    got = []

    def publish(e):
        got.append(e.id)
        gate.wait(5)                        # SIGTERM arrives while the first event is in hand

    ids = enqueue(*[("order", str(10 + i), "created", {}) for i in range(3)])
    relay = Relay("", publish, lease="5 minutes")
    relay.install_signal_handlers()
    try:
        t = start(relay)
        until(lambda: got)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        gate.set()
        t.join(5)
        assert not t.is_alive()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert row(got[0])[0] is True           # the event in hand was finished
    for i in ids[1:]:
        published, attempts, error, locked_until = row(i)
        assert (published, error, locked_until) == (False, "relay stopped", None)


async def test_async_relay(outbox):
    enqueue, row = outbox
    seen = []

    async def publish(e):
        if e.event_type == "bad":
            raise ConnectionError("broker down")
        seen.append(e.id)

    relay = AsyncRelay("", publish, poll=30.0, listen_dsn=LISTEN_DSN)
    task = asyncio.ensure_future(relay.run())
    for _ in range(250):                    # listening: the notification wakes it
        if relay.listening:
            break
        await asyncio.sleep(0.02)
    good, bad = enqueue(("order", "20", "created", {}), ("order", "21", "bad", {}))
    for _ in range(500):
        if relay.published == 1 and relay.failed == 1:
            break
        await asyncio.sleep(0.02)
    relay.stop()
    await asyncio.wait_for(task, 5)
    assert seen == [good]
    assert row(good)[0] is True
    assert row(bad)[1:3] == (1, "broker down")


async def test_async_relay_stops_on_sigterm(outbox):
    relay = AsyncRelay("", lambda e: None, poll=30.0)
    relay.install_signal_handlers()
    loop = asyncio.get_running_loop()
    try:
        task = asyncio.ensure_future(relay.run())
        await asyncio.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(task, 5)     # the idle wait ends at once
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGINT)


def test_unreachable_database_is_retried_with_backoff(caplog):
    caplog.set_level("WARNING", logger="pg_idempotency.relay")
    relay = Relay("host=127.0.0.1 port=1 connect_timeout=1", lambda e: None, max_backoff=0.2)
    t = start(relay)
    until(lambda: len(caplog.records) >= 3)
    relay.stop()
    t.join(5)
    assert not t.is_alive()
    waits = [float(r.getMessage().rsplit(" ", 1)[1].rstrip("s")) for r in caplog.records]
    assert waits[:3] == [0.1, 0.2, 0.2]         # doubling, capped at max_backoff
