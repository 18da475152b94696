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

Behind a transaction pooler (PgBouncer in transaction mode, RDS Proxy,
Supavisor) notifications do not reach a LISTEN: listen_dsn names a direct
or session-mode address for it (claims and marks stay on conninfo).  On
each connection the relay checks that notifications reach its listener
(a probe on a channel of its own); when they do not, it says so once in
its log and polls every `poll` seconds.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import select
import signal
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Set, Tuple

import psycopg

from . import _queries as q
from . import aio, client
from ._queries import Interval, OutboxEvent

log = logging.getLogger("pg_idempotency.relay")
CHANNEL = "idempotency_outbox"
SECOND_LOOK = 0.020     # twice idempotency.outbox_notify_interval
PROBE_WAIT = 2.0        # seconds the listener's probe may take to arrive
POLLING = ("notifications do not reach this connection (a transaction pooler?); polling every %s; "
           "give the relay a direct or session-mode connection for LISTEN")


def _connect(conninfo: str) -> "psycopg.Connection[Any]":
    return psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)


async def _aconnect(conninfo: str) -> "psycopg.AsyncConnection[Any]":
    return await psycopg.AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=None)


def _probe_channel() -> str:
    """A channel of the relay's own, for the probe (a name of hex digits:
    safe to put in LISTEN's text)."""
    return "idempotency_relay_" + secrets.token_hex(8)


def _heard(conn: Any, channel: Optional[str]) -> bool:
    """Reads what arrived on conn: True when a notification on channel
    (on any, for None) is among it."""
    conn.pgconn.consume_input()
    heard = False
    while (n := conn.pgconn.notifies()) is not None:
        heard = heard or channel is None or n.relname.decode() == channel
    return heard


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
    idle timer in seconds; max_backoff: the longest reconnect wait;
    listen_dsn: where to LISTEN when conninfo is a transaction pooler's
    (a direct or session-mode address; None: on conninfo's connection).
    published, failed: events marked so far; listening: whether
    notifications reach the relay (else it polls)."""

    def __init__(self, conninfo: str, publish: Callable[[OutboxEvent], Any], batch: int = 100,
                 lease: Interval = "30 seconds", poll: float = 1.0, max_backoff: float = 30.0,
                 listen_dsn: Optional[str] = None) -> None:
        self.conninfo, self.publish, self.listen_dsn = conninfo, publish, listen_dsn
        self.batch, self.lease, self.poll, self.max_backoff = batch, lease, poll, max_backoff
        self.published = self.failed = 0
        self.listening = False
        self._said_polling = False

    def _probed(self, channel: str, arrived: bool) -> str:
        """Records whether the probe on channel arrived (the first time it
        did not, one line in the log) and returns what to UNLISTEN: the
        probe's channel, or, where notifications do not arrive, every
        channel, so that no pooled server connection stays listening and
        passes notifications to the other clients it serves."""
        self.listening = arrived
        if arrived:
            return "UNLISTEN " + channel
        if not self._said_polling:
            self._said_polling = True
            log.warning(POLLING, "%gs" % self.poll)
        return "UNLISTEN *"


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
                with contextlib.ExitStack() as stack:
                    conn = stack.enter_context(_connect(self.conninfo))
                    listener = conn if self.listen_dsn is None else stack.enter_context(_connect(self.listen_dsn))
                    self._listen(listener, conn)
                    backoff = 0.1
                    self._loop(conn, listener)
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

    def _listen(self, listener: "psycopg.Connection[Any]", conn: "psycopg.Connection[Any]") -> None:
        """LISTENs on the listener, and probes that notifications reach it."""
        listener.execute("LISTEN " + CHANNEL)
        channel = _probe_channel()
        listener.execute("LISTEN " + channel)
        # The probe is sent from another session: through a transaction
        # pooler the listener's next statement may run on the very server
        # connection that LISTENs, and a session's own notification reaches
        # it with the statement's answer, which would prove nothing.
        if conn is listener:
            with _connect(self.conninfo) as other:
                other.execute("SELECT pg_notify(%s, '')", (channel,), prepare=False)
        else:
            conn.execute("SELECT pg_notify(%s, '')", (channel,), prepare=False)
        listener.execute(self._probed(channel, self._notified(listener, PROBE_WAIT, channel)))

    def _loop(self, conn: "psycopg.Connection[Any]", listener: "psycopg.Connection[Any]") -> None:
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
                    self._wait(listener)
                    break

    def _wait(self, listener: "psycopg.Connection[Any]") -> None:
        """Waits for a notification (where they arrive), the poll timer or stop()."""
        if self.listening:
            self._notified(listener, self.poll)
        else:
            self._stop.wait(self.poll)

    def _notified(self, conn: "psycopg.Connection[Any]", timeout: float, channel: Optional[str] = None) -> bool:
        """True when a notification on channel (any, for None) arrives on
        conn within timeout seconds; False at the timeout or stop()."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([conn.fileno()], [], [], min(0.1, left))
            if ready and _heard(conn, channel):
                return True
        return False


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
                async with contextlib.AsyncExitStack() as stack:
                    conn = await stack.enter_async_context(await _aconnect(self.conninfo))
                    listener = conn if self.listen_dsn is None else \
                        await stack.enter_async_context(await _aconnect(self.listen_dsn))
                    await self._listen(listener, conn)
                    backoff = 0.1
                    await self._loop(conn, listener)
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

    async def _listen(self, listener: "psycopg.AsyncConnection[Any]", conn: "psycopg.AsyncConnection[Any]") -> None:
        """Relay._listen on asyncio."""
        await listener.execute("LISTEN " + CHANNEL)
        channel = _probe_channel()
        await listener.execute("LISTEN " + channel)
        if conn is listener:
            async with await _aconnect(self.conninfo) as other:
                await other.execute("SELECT pg_notify(%s, '')", (channel,), prepare=False)
        else:
            await conn.execute("SELECT pg_notify(%s, '')", (channel,), prepare=False)
        await listener.execute(self._probed(channel, await self._notified(listener, PROBE_WAIT, channel)))

    async def _loop(self, conn: "psycopg.AsyncConnection[Any]", listener: "psycopg.AsyncConnection[Any]") -> None:
        while not self._stop.is_set():
            while await self.run_once(conn) and not self._stop.is_set():
                pass
            while not self._stop.is_set():
                await asyncio.sleep(SECOND_LOOK)
                quiet = await aio.outbox_quiet_commits(conn)
                if await self.run_once(conn):
                    break
                if not quiet:
                    await self._wait(listener)
                    break

    async def _wait(self, listener: "psycopg.AsyncConnection[Any]") -> None:
        """Waits for a notification (where they arrive), the poll timer or stop()."""
        if self.listening:
            await self._notified(listener, self.poll)
        else:
            await self._sleep(self.poll)

    async def _notified(self, conn: "psycopg.AsyncConnection[Any]", timeout: float,
                        channel: Optional[str] = None) -> bool:
        """Relay._notified on asyncio."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def readable() -> None:
            if _heard(conn, channel):
                woken.set()

        loop.add_reader(conn.fileno(), readable)
        waits = [asyncio.ensure_future(woken.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(conn.fileno())
            for w in waits:
                w.cancel()
        return woken.is_set()
