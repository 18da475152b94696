"""Outbox relay worker (doc/reference.md, "Waking relays", "Stale relays").

Relay(conninfo, publish).run() listens on idempotency_outbox, claims
batches with claim_events in their own READ COMMITTED transactions,
publishes each event in id order and marks the batch with its lease token
(mark_published / mark_failed; the extension backs failed events off).
After a failure the later events of that aggregate are not published in
this batch, so they never overtake it.  On SIGTERM or SIGINT (or stop())
it finishes the event in hand and hands the rest of its lease back with
mark_failed(..., "relay stopped") under the lease token.  A lost database
connection is retried with exponential backoff.
"""
from __future__ import annotations

import logging
import select
import signal
import threading
import time
from typing import Any, Callable, List, Optional

import psycopg

from . import client
from ._queries import Interval, OutboxEvent

log = logging.getLogger("pg_idempotency.relay")
CHANNEL = "idempotency_outbox"
SECOND_LOOK = 0.020     # twice idempotency.outbox_notify_interval


class Relay:
    def __init__(self, conninfo: str, publish: Callable[[OutboxEvent], Any], batch: int = 100,
                 lease: Interval = "30 seconds", poll: float = 1.0, max_backoff: float = 30.0) -> None:
        self.conninfo, self.publish = conninfo, publish
        self.batch, self.lease, self.poll, self.max_backoff = batch, lease, poll, max_backoff
        self._stop = threading.Event()
        self.published = 0
        self.failed = 0

    def stop(self, *_: Any) -> None:
        """Asks the worker to stop after the event in hand."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)

    def run(self) -> None:
        """Runs until stop(); reconnects with backoff after connection errors."""
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute("LISTEN " + CHANNEL)
                    backoff = 0.1
                    self._loop(conn)
            except psycopg.OperationalError as e:
                log.warning("relay: %s; retrying in %.1fs", e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def run_once(self, conn: "psycopg.Connection[Any]") -> int:
        """Claims and publishes one batch on an autocommit connection;
        returns how many events it claimed."""
        events = client.claim_events(conn, self.batch, self.lease)
        if events:
            self._publish(conn, events)
        return len(events)

    def _loop(self, conn: "psycopg.Connection[Any]") -> None:
        while not self._stop.is_set():
            while self.run_once(conn) and not self._stop.is_set():
                pass
            # the second look of doc/reference.md, "Waking relays"
            while not self._stop.is_set():
                time.sleep(SECOND_LOOK)
                quiet = client.outbox_quiet_commits(conn)
                if self.run_once(conn):
                    break
                if not quiet:
                    self._wait(conn)
                    break

    def _wait(self, conn: "psycopg.Connection[Any]") -> None:
        """Waits for a notification, the poll timer or stop()."""
        deadline = time.monotonic() + self.poll
        while not self._stop.is_set() and time.monotonic() < deadline:
            ready, _, _ = select.select([conn.fileno()], [], [], min(0.1, self.poll))
            if ready:
                conn.pgconn.consume_input()
                woken = False
                while conn.pgconn.notifies() is not None:
                    woken = True
                if woken:
                    return

    def _publish(self, conn: "psycopg.Connection[Any]", events: List[OutboxEvent]) -> None:
        token = events[0].lease_token
        done: List[int] = []
        failed: List[int] = []
        left: List[int] = []
        stopped = set()
        error: Optional[str] = None
        for event in events:
            aggregate = (event.aggregate_type, event.aggregate_id)
            if self._stop.is_set():
                left.append(event.id)
            elif aggregate in stopped:
                continue        # stays leased until its lease runs out: keeps the order
            else:
                try:
                    self.publish(event)
                    done.append(event.id)
                except Exception as e:  # noqa: BLE001 - the sink's error is recorded
                    failed.append(event.id)
                    stopped.add(aggregate)
                    error = str(e) or type(e).__name__
        if done:
            self.published += client.mark_published(conn, done, token)
        if failed:
            self.failed += client.mark_failed(conn, failed, error or "error", token)
        if left:
            client.mark_failed(conn, left, "relay stopped", token)
