"""Asynchronous client: the functions of client.py as coroutines taking a
psycopg.AsyncConnection first.  Same queries (_queries.py), same rules:
no state between calls, explicit fences and lease tokens, transactions
are the caller's.
"""
from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, Concatenate, ParamSpec, TypeVar

import psycopg

from . import _queries as q

T = TypeVar("T")
P = ParamSpec("P")


async def run(conn: "psycopg.AsyncConnection[Any]", query: "q.Query[T]") -> T:
    """Runs one Query on conn and decodes its rows."""
    async with conn.cursor() as cur:
        await cur.execute(query.sql, query.params, prepare=False)   # as client.run
        return query.decode(await cur.fetchall() if cur.description else [])


def _async(build: Callable[P, "q.Query[T]"]) -> Callable[Concatenate["psycopg.AsyncConnection[Any]", P], Awaitable[T]]:
    """The builder's signature with a connection in front, as a coroutine."""
    @functools.wraps(build)
    async def call(conn: "psycopg.AsyncConnection[Any]", /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run(conn, build(*args, **kwargs))
    return call


claim = _async(q.claim)
complete = _async(q.complete)
fail = _async(q.fail)
checkpoint = _async(q.checkpoint)
release = _async(q.release)
lookup = _async(q.lookup)
key_expiry = _async(q.key_expiry)
execute = _async(q.execute)
issue_token = _async(q.issue_token)
consume_token = _async(q.consume_token)
transition = _async(q.transition)
enqueue_event = _async(q.enqueue_event)
enqueue_events = _async(q.enqueue_events)
claim_events = _async(q.claim_events)
mark_published = _async(q.mark_published)
mark_failed = _async(q.mark_failed)
outbox_quiet_commits = _async(q.outbox_quiet_commits)
process_once = _async(q.process_once)
process_once_batch = _async(q.process_once_batch)
check_version = _async(q.extension_version)
