"""Synchronous client: every function takes a psycopg.Connection first and
runs one statement of the SQL API on it (doc/reference.md).  Nothing is
kept between calls (pool friendly); fences and lease tokens are explicit.
Transactions are the caller's: the functions neither commit nor roll back.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Concatenate, ParamSpec, TypeVar

import psycopg

from . import _queries as q

T = TypeVar("T")
P = ParamSpec("P")


def run(conn: "psycopg.Connection[Any]", query: "q.Query[T]") -> T:
    """Runs one Query on conn and decodes its rows."""
    with conn.cursor() as cur:
        # never a named prepared statement (psycopg prepares a query run 5
        # times): behind a transaction pooler the next transaction may run on
        # a server connection that does not have it
        cur.execute(query.sql, query.params, prepare=False)
        return query.decode(cur.fetchall() if cur.description else [])


def _sync(build: Callable[P, "q.Query[T]"]) -> Callable[Concatenate["psycopg.Connection[Any]", P], T]:
    """The builder's signature with a connection in front."""
    @functools.wraps(build)
    def call(conn: "psycopg.Connection[Any]", /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run(conn, build(*args, **kwargs))
    return call


claim = _sync(q.claim)
complete = _sync(q.complete)
fail = _sync(q.fail)
checkpoint = _sync(q.checkpoint)
release = _sync(q.release)
lookup = _sync(q.lookup)
key_expiry = _sync(q.key_expiry)
execute = _sync(q.execute)
issue_token = _sync(q.issue_token)
consume_token = _sync(q.consume_token)
transition = _sync(q.transition)
enqueue_event = _sync(q.enqueue_event)
enqueue_events = _sync(q.enqueue_events)
claim_events = _sync(q.claim_events)
mark_published = _sync(q.mark_published)
mark_failed = _sync(q.mark_failed)
outbox_quiet_commits = _sync(q.outbox_quiet_commits)
process_once = _sync(q.process_once)
process_once_batch = _sync(q.process_once_batch)
check_version = _sync(q.extension_version)
