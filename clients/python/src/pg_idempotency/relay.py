"""Outbox relay worker (doc/reference.md, "Waking relays", "Stale relays").

Relay(conninfo, publish).run() listens on idempotency_outbox, claims
batches with claim_events in their own READ COMMITTED transactions,
publishes each event in id order and marks the batch with its lease token
(mark_published / mark_failed; the extension backs failed events off).
After a failure the later events of that aggregate are not published in
this batch, so they never overtake it.  On SIGTERM or SIGINT (or stop())
it finishes the event in hand and hands the rest of its lease back with
mark_failed(..., "relay stopped") under the lease token.  A lost database
connection is retried with exponential backoff.  AsyncRelay does the same
on asyncio.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import select
import signal
import threading
import time
from typing import Any, Callable, Iterator, List, Set, Tuple

import psycopg

from . import _queries as q
from . import aio, client
from ._queries import Interval, OutboxEvent

log = logging.getLogger("pg_idempotency.relay")
CHANNEL = "idempotency_outbox"
SECOND_LOOK = 0.020     # twice idempotency.outbox_notify_interval


class Batch:
    """One claimed batch: which events to publish, in id order, and the
    marks to send under its lease token (shared by Relay and AsyncRelay)."""

    def __init__(self, events: List[OutboxEvent]) -> None:
        self.events, self.token = events, events[0].lease_token
        self.done: List[int] = []
        self.failed_ids: List[int] = []
        self.left: List[int] = []
        self.stopped: Set[Tuple[str, str]] = set()
        self.error = "error"

    def todo(self, stopping: Callable[[], bool]) -> Iterator[OutboxEvent]:
        """The events to publish now.  After a failure the aggregate's later
        events are skipped (they stay leased until the lease runs out, so
        they never overtake it); after stop the rest is handed back."""
        for event in self.events:
            if stopping():
                self.left.append(event.id)
            elif (event.aggregate_type, event.aggregate_id) not in self.stopped:
                yield event

    def ok(self, event: OutboxEvent) -> None:
        self.done.append(event.id)

    def failed(self, event: OutboxEvent, error: BaseException) -> None:
        self.failed_ids.append(event.id)
        self.stopped.add((event.aggregate_type, event.aggregate_id))
        self.error = str(error) or type(error).__name__

    def marks(self) -> List[Tuple["q.Query[int]", str]]:
        """(query, counter) pairs: mark_published, mark_failed, and the
        hand-back of a stopped relay's unpublished events."""
        marks: List[Tuple["q.Query[int]", str]] = []
        if self.done:
            marks.append((q.mark_published(self.done, self.token), "published"))
        if self.failed_ids:
            marks.append((q.mark_failed(self.failed_ids, self.error, self.token), "failed"))
        if self.left:
            marks.append((q.mark_failed(self.left, "relay stopped", self.token), ""))
        return marks


class _Settings:
    """conninfo: as for psycopg.connect; publish(event) sends one event
    (raises on failure); batch, lease: claim_events' arguments; poll: the
    idle timer in seconds; max_backoff: the longest reconnect wait.
    published, failed: events marked so far."""

    def __init__(self, conninfo: str, publish: Callable[[OutboxEvent], Any], batch: int = 100,
                 lease: Interval = "30 seconds", poll: float = 1.0, max_backoff: float = 30.0) -> None:
        self.conninfo, self.publish = conninfo, publish
        self.batch, self.lease, self.poll, self.max_backoff = batch, lease, poll, max_backoff
        self.published = self.failed = 0


def _count(relay: _Settings, counter: str, n: int) -> None:
    if counter:
        setattr(relay, counter, getattr(relay, counter) + n)


class Relay(_Settings):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()

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
            batch = Batch(events)
            for event in batch.todo(self._stop.is_set):
                try:
                    self.publish(event)
                    batch.ok(event)
                except Exception as e:  # noqa: BLE001 - the sink's error is recorded
                    batch.failed(event, e)
            for mark, counter in batch.marks():
                _count(self, counter, client.run(conn, mark))
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


class AsyncRelay(_Settings):
    """Relay for asyncio: the same loop on a psycopg.AsyncConnection;
    publish may be a coroutine function.  stop() (or SIGTERM/SIGINT after
    install_signal_handlers()) ends run() the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    async def run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
                    await conn.execute("LISTEN " + CHANNEL)
                    backoff = 0.1
                    await self._loop(conn)
            except psycopg.OperationalError as e:
                log.warning("relay: %s; retrying in %.1fs", e, backoff)
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    async def run_once(self, conn: "psycopg.AsyncConnection[Any]") -> int:
        events = await aio.claim_events(conn, self.batch, self.lease)
        if events:
            batch = Batch(events)
            for event in batch.todo(self._stop.is_set):
                try:
                    result = self.publish(event)
                    if inspect.isawaitable(result):
                        await result
                    batch.ok(event)
                except Exception as e:  # noqa: BLE001 - the sink's error is recorded
                    batch.failed(event, e)
            for mark, counter in batch.marks():
                _count(self, counter, await aio.run(conn, mark))
        return len(events)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _loop(self, conn: "psycopg.AsyncConnection[Any]") -> None:
        while not self._stop.is_set():
            while await self.run_once(conn) and not self._stop.is_set():
                pass
            while not self._stop.is_set():
                await asyncio.sleep(SECOND_LOOK)
                quiet = await aio.outbox_quiet_commits(conn)
                if await self.run_once(conn):
                    break
                if not quiet:
                    await self._wait(conn)
                    break

    async def _wait(self, conn: "psycopg.AsyncConnection[Any]") -> None:
        """Waits for a notification, the poll timer or stop()."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def readable() -> None:
            conn.pgconn.consume_input()
            while conn.pgconn.notifies() is not None:
                woken.set()

        loop.add_reader(conn.fileno(), readable)
        waits = [asyncio.ensure_future(woken.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait(waits, timeout=self.poll, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(conn.fileno())
            for w in waits:
                w.cancel()
