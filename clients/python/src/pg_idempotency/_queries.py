"""The SQL API of the idempotency extension as parameterised queries.

Each builder returns a Query: fixed SQL text with %s placeholders, its
parameters and a decoder of the result rows.  The sync (client.py) and
async (aio.py) modules only run them, so both say the same thing.  No SQL
text is ever built from an argument.  Signatures follow doc/reference.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar, Union

from psycopg.types.json import Jsonb

T = TypeVar("T")
Interval = Union[str, timedelta, None]
Rows = List[Tuple[Any, ...]]

#: the oldest extension version this package works with
MIN_EXTENSION_VERSION = (1, 3)


@dataclass(frozen=True)
class Query(Generic[T]):
    sql: str
    params: Tuple[Any, ...]
    decode: Callable[[Rows], T]


@dataclass(frozen=True)
class ClaimResult:
    """claim_result (doc/reference.md, claim)."""
    outcome: str            # claimed, resumed, replay, gone (1.6), in_progress, mismatch
    fence: Optional[int]
    status: Optional[str]
    response_code: Optional[int]
    response_body: Any
    recovery_point: Optional[str]
    attempts: Optional[int]
    retry_after: Optional[timedelta]

    @property
    def holds(self) -> bool:
        """True when this caller holds the key (claimed or resumed)."""
        return self.outcome in ("claimed", "resumed")

    def retry_after_seconds(self) -> int:
        """Retry-After in whole seconds, rounded up, at least 1."""
        if self.retry_after is None:
            return 1
        return max(1, math.ceil(self.retry_after.total_seconds()))


@dataclass(frozen=True)
class KeyExpiry:
    """key_expiry(): the times an HTTP answer advertises, rounded up to the
    whole second (an HTTP date has no fraction), so that each is in force
    from the second it names."""
    expires_at: datetime                     # the key's: after it a retry runs as a new request
    response_expires_at: Optional[datetime]  # 1.6: after it a retry gets gone; None when the
                                             # answer lives as long as the key, or is gone


@dataclass(frozen=True)
class TransitionResult:
    outcome: str            # applied, already, rejected, not_found
    current_state: Optional[str]


@dataclass(frozen=True)
class OutboxEvent:
    id: int
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: Any
    headers: Any
    attempts: int
    lease_token: int
    created_at: datetime


class ExtensionVersionError(RuntimeError):
    """The database's idempotency extension is missing or too old."""


def _interval(v: Interval) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    return "%f seconds" % v.total_seconds()


def _json(v: Any) -> Optional[Jsonb]:
    return None if v is None else Jsonb(v)


def _none(rows: Rows) -> None:
    return None


def _scalar(rows: Rows) -> Any:
    return rows[0][0] if rows else None


def _column(rows: Rows) -> List[Any]:
    return [r[0] for r in rows]


def _claim_result(rows: Rows) -> ClaimResult:
    return ClaimResult(*rows[0])


def _named(call: str, params: Tuple[Any, ...], **intervals: Interval) -> Tuple[str, Tuple[Any, ...]]:
    """call (the text of "idempotency.f(%s, ...") closed, with each of the
    interval arguments of extension 1.6 (response_ttl, wait) that is given
    passed by name; without them the call works before 1.6 too.  The names
    are this module's, never input."""
    for name, value in intervals.items():
        if value is not None:
            call += ", %s => %%s::interval" % name
            params += (_interval(value),)
    return call + ")", params


CLAIM_COLUMNS = ("outcome, fence, status::text, response_code, response_body, "
                 "recovery_point, attempts, retry_after")


def claim(key: str, request: Any = None, scope: str = "", ttl: Interval = None,
          lease: Interval = None, wait: Interval = None) -> Query[ClaimResult]:
    """wait (extension 1.6): when a holder is working on the key, wait up
    to this long for it to finish, then answer as a claim made after it
    (replay, gone, resumed or claimed; in_progress only when the wait runs
    out).  It needs the library in shared_preload_libraries (else 55000)
    and READ COMMITTED (else 0A000): doc/reference.md, "Waiting for the
    holder".  Sent only when given."""
    sql, params = _named("SELECT " + CLAIM_COLUMNS + " FROM idempotency.claim(%s, %s, %s, %s::interval, %s::interval",
                         (key, _json(request), scope, _interval(ttl), _interval(lease)), wait=wait)
    return Query(sql, params, _claim_result)


def key_too_long(key: str) -> Query[bool]:
    """True when key has more characters than idempotency.max_key_length
    allows in this session (255, the default, where it is not set)."""
    return Query("SELECT char_length(%s) > coalesce(current_setting('idempotency.max_key_length', true)::int, 255)",
                 (key,), _scalar)


def complete(key: str, fence: int, response_body: Any, response_code: int = 200,
             scope: str = "", ttl: Interval = None, response_ttl: Interval = None) -> Query[None]:
    """response_ttl (extension 1.6): how long the answer is replayed (None:
    idempotency.default_response_ttl; unset, as long as the key); later
    claims get gone.  Sent only when given."""
    sql, params = _named("SELECT idempotency.complete(%s, %s, %s, %s, %s, %s::interval",
                         (key, fence, Jsonb(response_body), response_code, scope, _interval(ttl)),
                         response_ttl=response_ttl)
    return Query(sql, params, _none)


def fail(key: str, fence: int, error: Any = None, response_code: int = 500,
         retryable: bool = True, scope: str = "", ttl: Interval = None,
         response_ttl: Interval = None) -> Query[None]:
    """response_ttl as for complete(), for a final failure only (with
    retryable the server refuses it, 22023)."""
    sql, params = _named("SELECT idempotency.fail(%s, %s, %s, %s, %s, %s, %s::interval",
                         (key, fence, _json(error), response_code, retryable, scope, _interval(ttl)),
                         response_ttl=response_ttl)
    return Query(sql, params, _none)


def checkpoint(key: str, fence: int, recovery_point: Optional[str], lease: Interval = None,
               scope: str = "") -> Query[None]:
    return Query("SELECT idempotency.checkpoint(%s, %s, %s, %s::interval, %s)",
                 (key, fence, recovery_point, _interval(lease), scope), _none)


def release(key: str, fence: int, scope: str = "") -> Query[None]:
    return Query("SELECT idempotency.release(%s, %s, %s)", (key, fence, scope), _none)


def _lookup_row(rows: Rows) -> Optional[Dict[str, Any]]:
    return rows[0][0] if rows and rows[0][0] is not None else None


def lookup(key: str, scope: str = "") -> Query[Optional[Dict[str, Any]]]:
    """The key's row as a dict (to_jsonb of it: its columns in the
    installed version, response_expires_at from 1.6), or None when absent
    or expired."""
    return Query("SELECT CASE WHEN l IS NULL THEN NULL ELSE to_jsonb(l) END "
                 "FROM idempotency.lookup(%s, %s) AS l", (key, scope), _lookup_row)


def _key_expiry(rows: Rows) -> Optional[KeyExpiry]:
    return KeyExpiry(*rows[0]) if rows else None


def key_expiry(key: str, scope: str = "") -> Query[Optional[KeyExpiry]]:
    """When the key is forgotten and when its stored answer goes (KeyExpiry),
    or None when the key is absent or expired.  lookup()'s row is read
    through to_jsonb, with the body left out first (jsonb_populate_record),
    so that the query works before 1.6, where the row has no
    response_expires_at, without serialising an answer of up to
    idempotency.max_response_bytes."""
    return Query("SELECT to_timestamp(ceil(extract(epoch FROM k.expires_at))), "
                 "CASE WHEN k.answer_goes > clock_timestamp() "
                 "THEN to_timestamp(ceil(extract(epoch FROM k.answer_goes))) END "
                 "FROM (SELECT l.expires_at, "
                 "(to_jsonb(jsonb_populate_record(l, '{\"response_body\": null}')) "
                 "->> 'response_expires_at')::timestamptz AS answer_goes "
                 "FROM idempotency.lookup(%s, %s) AS l WHERE l.idempotency_key IS NOT NULL) AS k",
                 (key, scope), _key_expiry)


def execute(key: str, request: Any, statement: str, params: Sequence[Optional[str]] = (),
            scope: str = "", ttl: Interval = None, response_ttl: Interval = None,
            wait: Interval = None) -> Query[ClaimResult]:
    """statement is the application's own fixed SQL text, never client input:
    its values go in params ($1..$n, bound as text); response_ttl as for
    complete(), wait as for claim()."""
    sql, args = _named("SELECT " + CLAIM_COLUMNS +
                       " FROM idempotency.execute(%s, %s, %s, %s::text[], %s, %s::interval",
                       (key, _json(request), statement, list(params), scope, _interval(ttl)),
                       response_ttl=response_ttl, wait=wait)
    return Query(sql, args, _claim_result)


def issue_token(scope: str = "", ttl: Interval = None) -> Query[Any]:
    return Query("SELECT idempotency.issue_token(%s, %s::interval)", (scope, _interval(ttl)), _scalar)


def consume_token(token: Any, scope: str = "") -> Query[bool]:
    return Query("SELECT idempotency.consume_token(%s::uuid, %s)", (str(token), scope), _scalar)


def _transition_result(rows: Rows) -> TransitionResult:
    return TransitionResult(*rows[0])


def transition(table: str, key_column: str, key: str, state_column: str, from_state: str,
               to_state: str, set_columns: Optional[Dict[str, Any]] = None) -> Query[TransitionResult]:
    """table and columns are passed as values (regclass, name): the extension
    quotes them; they are never spliced into SQL here."""
    return Query("SELECT outcome, current_state FROM idempotency.transition("
                 "%s::regclass, %s::name, %s, %s::name, %s, %s, %s)",
                 (table, key_column, key, state_column, from_state, to_state, _json(set_columns)),
                 _transition_result)


def enqueue_event(aggregate_type: str, aggregate_id: str, event_type: str, payload: Any,
                  headers: Any = None) -> Query[int]:
    return Query("SELECT idempotency.enqueue_event(%s, %s, %s, %s, %s)",
                 (aggregate_type, aggregate_id, event_type, Jsonb(payload), _json(headers)), _scalar)


def enqueue_events(events: Sequence[Tuple[str, str, str, Any]],
                   headers: Optional[Sequence[Any]] = None) -> Query[List[int]]:
    """Many (aggregate_type, aggregate_id, event_type, payload) in one
    statement; returns their ids in order."""
    return Query("SELECT * FROM idempotency.enqueue_events(%s::text[], %s::text[], %s::text[], "
                 "%s::jsonb[], %s::jsonb[])",
                 ([e[0] for e in events], [e[1] for e in events], [e[2] for e in events],
                  [Jsonb(e[3]) for e in events],
                  None if headers is None else [_json(h) for h in headers]), _column)


def _events(rows: Rows) -> List[OutboxEvent]:
    return [OutboxEvent(*r) for r in rows]


def claim_events(batch: int = 100, lease: Interval = "30 seconds") -> Query[List[OutboxEvent]]:
    return Query("SELECT id, aggregate_type, aggregate_id, event_type, payload, headers, attempts, "
                 "lease_token, created_at FROM idempotency.claim_events(%s, %s::interval)",
                 (batch, _interval(lease)), _events)


def mark_published(ids: Sequence[int], lease_token: Optional[int]) -> Query[int]:
    return Query("SELECT idempotency.mark_published(%s::bigint[], %s::bigint)",
                 (list(ids), lease_token), _scalar)


def mark_failed(ids: Sequence[int], error: str, lease_token: Optional[int]) -> Query[int]:
    return Query("SELECT idempotency.mark_failed(%s::bigint[], %s, %s::bigint)",
                 (list(ids), error, lease_token), _scalar)


def outbox_quiet_commits() -> Query[int]:
    return Query("SELECT idempotency.outbox_quiet_commits()", (), _scalar)


def process_once(consumer: str, event_id: str) -> Query[bool]:
    return Query("SELECT idempotency.process_once(%s, %s::text)", (consumer, event_id), _scalar)


def process_once_batch(consumer: str, event_ids: Sequence[str]) -> Query[List[str]]:
    """The ids seen for the first time, in order of first occurrence."""
    return Query("SELECT * FROM idempotency.process_once(%s, %s::text[])",
                 (consumer, list(event_ids)), _column)


def _version(rows: Rows) -> str:
    version = rows[0][0] if rows else None
    if version is None:
        raise ExtensionVersionError("the idempotency extension is not installed in this database "
                                    "(neither pg_extension nor idempotency.plain_version has it)")
    parts = tuple(int(p) for p in str(version).split(".")[:2] if p.isdigit())
    if parts < MIN_EXTENSION_VERSION:
        raise ExtensionVersionError(
            "the database's idempotency extension is version %s; pg_idempotency needs %s or later "
            "(ALTER EXTENSION idempotency UPDATE)" % (version, ".".join(map(str, MIN_EXTENSION_VERSION))))
    return str(version)


def extension_version() -> Query[str]:
    """The installed version (C edition or pg_tle: pg_extension; plain
    edition: idempotency.plain_version); raises ExtensionVersionError when
    it is missing or older than MIN_EXTENSION_VERSION."""
    return Query("SELECT coalesce((SELECT extversion FROM pg_catalog.pg_extension "
                 "WHERE extname = 'idempotency'), "
                 "CASE WHEN to_regclass('idempotency.plain_version') IS NOT NULL THEN "
                 "(xpath('/row/version/text()', "
                 "query_to_xml('SELECT version FROM idempotency.plain_version', false, true, '')))[1]::text END)",
                 (), _version)
