"""The Idempotency-Key behaviour shared by every framework, without I/O.

exchange() is a generator: it yields steps (a Query to run, COMMIT,
ROLLBACK, or Holding to run the application) and returns the Answer to
send.  drive() (sync) and drive_async() run it on a connection from a
pool; the framework modules (asgi.py, flask.py, django.py) only translate
requests and responses.  The mapping (README.md, doc/clients.md):

    no key where one is required         400 problem+json
    key empty, over 400 characters or    400 problem+json, before any query
      with control characters (key_problem)
    claim raises 22023 and the key is    400 problem+json; another 22023
      over the database's                (a ttl shorter than the lease: the
      idempotency.max_key_length         policy's mistake) is raised
    claimed / resumed                    the handler runs; its answer is stored
    replay                               stored status, headers, body + Idempotent-Replayed: true
    gone (1.6: the answer was kept for   410 problem+json; the handler does
      response_ttl only)                 not run again
    in_progress (with wait: the holder   409 problem+json, Retry-After
      still works when it runs out)
    mismatch                             422 problem+json
    handler answers 5xx or raises        fail(retryable): the next try runs again
    lease lost (55000) at complete       409 problem+json, Retry-After: 1
    answer over max_response_bytes       500 problem+json; fail(retryable)
    claim raises another error (55000,   raised: wait without the library
      0A000, ...)                        preloaded, or not READ COMMITTED

Every answer that follows a claim of the key (all but the 400s and 401)
carries Idempotency-Key-Expires, the key's expires_at, and while the stored
answer is kept for less than the key (response_ttl),
Idempotency-Replay-Expires, its response_expires_at: read with key_expiry()
once the answer is settled, left out when the key is not there or the read
fails (doc/clients.md, "Expiry headers").
"""
from __future__ import annotations

import base64
import email.utils
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import (Any, Callable, ContextManager, Dict, Generator, List,
                    Optional, Sequence, Tuple, Union)

import psycopg

from . import _queries as q
from . import aio, client

Headers = List[Tuple[str, str]]
log = logging.getLogger("pg_idempotency")


@dataclass
class Answer:
    status: int
    headers: Headers
    body: bytes


@dataclass
class Request:
    method: str
    path: str
    body: bytes
    content_type: str
    key: Optional[str]
    scope: Optional[str]


#: the most characters idempotency.max_key_length allows (doc/reference.md,
#: Settings: 1-400); a shorter key may still be over the database's setting
KEY_MAX_CHARS = 400


def key_problem(key: Optional[str]) -> Optional[str]:
    """Why key cannot be an Idempotency-Key, or None.  The rule of
    doc/reference.md (1 to idempotency.max_key_length characters, counted
    as characters) as far as it holds whatever the setting, and HTTP's: a
    field value has no control characters (U+0000-U+001F, U+007F)."""
    if not key:
        return "The key is empty."
    if len(key) > KEY_MAX_CHARS:
        return "The key has %d characters; at most %d are allowed." % (len(key), KEY_MAX_CHARS)
    if any(c < " " or c == "\x7f" for c in key):
        return "The key contains control characters."
    return None


def invalid_key(detail: str) -> "Answer":
    return problem(400, "Invalid Idempotency-Key", detail)


def default_fingerprint(req: Request) -> Any:
    """method, path and body (parsed when it is JSON, so key order and
    whitespace do not matter; text otherwise)."""
    body: Any = req.body.decode("utf-8", "replace")
    if "json" in req.content_type:
        try:
            body = json.loads(req.body or b"null")
        except ValueError:
            pass
    return {"method": req.method, "path": req.path, "body": body}


@dataclass
class Policy:
    """What the middleware does; every field has a default.

    methods: the methods that take a key (others pass through untouched);
    required: a key is required on them (else a request without one runs
    unguarded); scope(request) -> str or None (None: 401) names the key's
    owner, e.g. the tenant or user; fingerprint(Request) -> JSON value;
    ttl: how long a key and its answer are kept (None: the extension's
    idempotency.default_ttl); response_ttl (extension 1.6): how long the
    answer is replayed within that, then 410 (None: the extension's
    idempotency.default_response_ttl; unset, as long as the key; passed
    only when set); lease: the holder's lease; one_transaction:
    the handler's queries (on the connection it is given) commit in the
    transaction that stores the answer, and a 5xx rolls them back with the
    claim; stored_headers: the response headers kept for replays; wait
    (extension 1.6): how long a duplicate of a request in flight waits for
    its holder to finish and then gets its answer, instead of 409 at once
    (None: no wait; passed only when set; needs the library in
    shared_preload_libraries; the waiting request holds its connection,
    and at most the pool's max_size minus one wait at once: see
    _enter_wait); server_connections: behind a transaction pooler, the
    server connections it lends this service (its pool for the database
    and user), which sleeping claims keep: at most this minus one sleep at
    once, as max_size bounds them without a pooler (None: max_size alone);
    key_expires_header, replay_expires_header: the names of the expiry
    headers (None leaves one out; with both None nothing is read).
    """
    header: str = "Idempotency-Key"
    methods: Sequence[str] = ("POST", "PATCH")
    required: bool = True
    scope: Optional[Callable[[Any], Optional[str]]] = None
    fingerprint: Callable[[Request], Any] = default_fingerprint
    ttl: q.Interval = None
    response_ttl: q.Interval = None
    lease: q.Interval = None
    one_transaction: bool = False
    stored_headers: Sequence[str] = field(default_factory=lambda: ("content-type", "location"))
    wait: q.Interval = None
    key_expires_header: Optional[str] = "Idempotency-Key-Expires"
    replay_expires_header: Optional[str] = "Idempotency-Replay-Expires"
    server_connections: Optional[int] = None


def problem(status: int, title: str, detail: str, headers: Optional[Headers] = None) -> Answer:
    """An application/problem+json answer (RFC 9457)."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return Answer(status, [("content-type", "application/problem+json")] + (headers or []),
                  json.dumps(body).encode())


def stored(answer: Answer, keep: Sequence[str]) -> Dict[str, Any]:
    """The jsonb kept for a replay: headers named in keep, the body as
    text (base64 when it is not UTF-8)."""
    names = {k.lower() for k in keep}
    doc: Dict[str, Any] = {"headers": [[k, v] for k, v in answer.headers if k.lower() in names]}
    try:
        doc["body"] = answer.body.decode("utf-8")
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(answer.body).decode()
    return doc


def replayed(code: int, doc: Any) -> Answer:
    if not isinstance(doc, dict) or "headers" not in doc:     # stored by another client
        return Answer(code, [("content-type", "application/json")], json.dumps(doc).encode())
    if isinstance(doc["headers"], dict):        # the Node package's 0.1.0: {"headers": {...}, "body": <JSON>}
        return Answer(code, [(str(k), str(v)) for k, v in doc["headers"].items()]
                      + [("idempotent-replayed", "true")],
                      json.dumps(doc.get("body"), separators=(",", ":")).encode())
    body = doc["body"].encode() if "body" in doc else base64.b64decode(doc.get("body_base64", ""))
    return Answer(code, [(k, v) for k, v in doc["headers"]] + [("idempotent-replayed", "true")], body)


@dataclass(frozen=True)
class Holding:
    """The step that runs the handler, and what the handler learns about
    the key it holds: to checkpoint progress (client.checkpoint(conn, key,
    fence, name, scope=scope)) and, when resumed, to skip the phases done
    before (recovery_point)."""
    key: str
    scope: str
    fence: int
    outcome: str            # claimed or resumed
    recovery_point: str
    attempts: int


COMMIT, ROLLBACK = "COMMIT", "ROLLBACK"
Step = Union["q.Query[Any]", str, Holding]


def guarded(policy: Policy, method: str) -> bool:
    return method.upper() in {m.upper() for m in policy.methods}


def exchange(policy: Policy, req: Request) -> Generator[Step, Any, Answer]:
    """The steps of one keyed request; see the module's table.  The Holding
    step is sent back the handler's Answer, or an exception thrown in."""
    bad = key_problem(req.key)
    if bad is not None:
        return invalid_key(bad)
    if req.scope is None:
        return problem(401, "Unauthenticated", "Idempotency keys belong to an authenticated caller.")
    fp = policy.fingerprint(req)
    try:
        claim = yield q.claim(req.key or "", fp, req.scope, policy.ttl, policy.lease, policy.wait)
    except psycopg.Error as e:
        yield ROLLBACK
        if e.sqlstate != "22023":
            raise
        # invalid_parameter_value: the key is to blame only when it is
        # longer than the database's idempotency.max_key_length
        too_long = yield q.key_too_long(req.key or "")
        yield ROLLBACK
        if too_long:
            return invalid_key("The key is longer than idempotency.max_key_length characters.")
        raise
    if claim.holds:
        answer = yield from _held(policy, req.key or "", req.scope, claim)
    else:
        answer = answer_for(claim)      # its expiry is read in the claim's transaction
    answer.headers = answer.headers + (yield from expiry_headers(policy, req.key or "", req.scope))
    yield COMMIT
    return answer


def _held(policy: Policy, key: str, scope: str, claim: q.ClaimResult) -> Generator[Step, Any, Answer]:
    """The steps of a request that holds the key: the handler runs, and its
    answer is stored and committed."""
    if not policy.one_transaction:
        yield COMMIT
    answer: Answer
    try:
        answer = yield Holding(key, scope, claim.fence or 0, claim.outcome,
                               claim.recovery_point or "started", claim.attempts or 1)
    except Exception as e:  # noqa: BLE001 - every handler error is recorded
        answer = problem(500, "Internal Server Error", "The request failed; it may be retried.")
        failure: Optional[Exception] = e
    else:
        failure = None
    try:
        if answer.status >= 500:
            yield ROLLBACK
            if not policy.one_transaction:
                yield q.fail(key, claim.fence or 0, stored(answer, policy.stored_headers),
                             answer.status, True, scope)
        else:
            yield q.complete(key, claim.fence or 0, stored(answer, policy.stored_headers),
                             answer.status, scope, policy.ttl, policy.response_ttl)
        yield COMMIT
    except psycopg.Error as e:
        yield ROLLBACK
        if e.sqlstate == "55000":
            return problem(409, "Idempotency-Key lease lost",
                           "Another request holds this key now.", [("retry-after", "1")])
        if e.sqlstate == "54000":       # over idempotency.max_response_bytes
            if not policy.one_transaction:
                yield q.fail(key, claim.fence or 0, None, 500, True, scope)
                yield COMMIT
            return problem(500, "Response too large to store",
                           "The answer exceeds idempotency.max_response_bytes; it was not kept.")
        raise
    if failure is not None:
        log.error("idempotent handler failed", exc_info=failure)
    return answer


def http_date(at: datetime) -> str:
    """An HTTP date (IMF-fixdate, RFC 9110)."""
    return email.utils.format_datetime(at.astimezone(timezone.utc), usegmt=True)


def expiry_headers(policy: Policy, key: str, scope: str) -> Generator[Step, Any, Headers]:
    """The expiry headers of the key as it is now: none when it is absent,
    or when the read fails (which rolls back the transaction; the caller
    commits after it either way)."""
    if policy.key_expires_header is None and policy.replay_expires_header is None:
        return []
    try:
        expiry = yield q.key_expiry(key, scope)
    except psycopg.Error:
        log.warning("idempotency key expiry not read", exc_info=True)
        yield ROLLBACK
        return []
    headers: Headers = []
    if expiry is not None and policy.key_expires_header is not None:
        headers.append((policy.key_expires_header.lower(), http_date(expiry.expires_at)))
    if expiry is not None and expiry.response_expires_at is not None and policy.replay_expires_header is not None:
        headers.append((policy.replay_expires_header.lower(), http_date(expiry.response_expires_at)))
    return headers


def answer_for(claim: q.ClaimResult) -> Answer:
    """The answer of a claim that does not hold the key."""
    if claim.outcome == "replay":
        return replayed(claim.response_code or 200, claim.response_body)
    if claim.outcome == "gone":
        return problem(410, "The answer to this Idempotency-Key is gone",
                       "The request was processed and its answer is no longer kept; it does not run "
                       "again. Use a new key to send it again.")
    if claim.outcome == "in_progress":
        return problem(409, "A request with this Idempotency-Key is being processed",
                       "Retry after the time given in Retry-After.",
                       [("retry-after", str(claim.retry_after_seconds()))])
    return problem(422, "Idempotency-Key reused with another request",
                   "This key was used for a different request; use a new key.")


def scope_failed() -> Answer:
    """The answer when the policy's scope function raises (say it reads a
    user no authentication middleware set): nothing is claimed or run."""
    log.error("idempotency scope function failed", exc_info=True)
    return problem(500, "Internal Server Error",
                   "The request's idempotency scope could not be computed; nothing was done.")


def missing_key() -> Answer:
    return problem(400, "Idempotency-Key is missing", "This operation requires an Idempotency-Key header.")


def drive(gen: Generator[Step, Any, Answer], conn: "psycopg.Connection[Any]",
          handler: Callable[[Holding], Answer]) -> Answer:
    """Runs exchange() on a synchronous connection."""
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            step = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            answer: Answer = stop.value
            return answer
        value, error = None, None
        try:
            if step == COMMIT:
                conn.commit()
            elif step == ROLLBACK:
                conn.rollback()
            elif isinstance(step, Holding):
                value = handler(step)
            elif isinstance(step, q.Query):
                value = client.run(conn, step)
            else:
                raise ValueError("unknown step %r" % (step,))
        except Exception as e:  # noqa: BLE001 - thrown into the exchange
            error = e


async def drive_async(gen: Generator[Step, Any, Answer], conn: "psycopg.AsyncConnection[Any]",
                      handler: Callable[[Holding], Any]) -> Answer:
    """Runs exchange() on an asynchronous connection."""
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            step = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            answer: Answer = stop.value
            return answer
        value, error = None, None
        try:
            if step == COMMIT:
                await conn.commit()
            elif step == ROLLBACK:
                await conn.rollback()
            elif isinstance(step, Holding):
                value = await handler(step)
            elif isinstance(step, q.Query):
                value = await aio.run(conn, step)
            else:
                raise ValueError("unknown step %r" % (step,))
        except Exception as e:  # noqa: BLE001 - thrown into the exchange
            error = e




# The claims that may sleep with wait at once, per pool (by id). A
# sleeping claim keeps its connection, and a holder needs one for its
# handler's queries and to store its answer: were every connection of the
# pool asleep in claim, the holder would wait until its lease ran out and
# a waiter took the key over, running the request twice (or its store
# would end in PoolTimeout after the side effect ran). The server lets one
# claim per key sleep (idempotency.max_waiters_per_key); this bounds the
# sleepers of all keys to the pool's max_size minus one, so a connection
# is always left for the holders. A duplicate past the bound claims without
# wait: 409 with Retry-After at once. A source without max_size (Connect)
# opens a connection per request and is not bounded here. The wait never
# outlasts the holder's lease: the server wakes the waiter when it runs out.
# Behind a transaction pooler the connections a sleeper keeps are the
# pooler's server connections (Policy.server_connections, when fewer).
_sleeping: Dict[int, int] = {}
_sleeping_lock = threading.Lock()


def _enter_wait(pool: Any, servers: Optional[int]) -> bool:
    size = getattr(pool, "max_size", None)
    if servers is not None and not (isinstance(size, int) and size <= servers):
        size = servers
    with _sleeping_lock:
        n = _sleeping.get(id(pool), 0)
        if isinstance(size, int) and n >= size - 1:
            return False
        _sleeping[id(pool)] = n + 1
        return True


def _leave_wait(pool: Any) -> bool:
    with _sleeping_lock:
        _sleeping[id(pool)] -= 1
    return False


def _waiting_policy(policy: Policy, pool: Any) -> Tuple[Policy, bool]:
    """policy, and whether its claim may sleep (it took a place to); a
    policy without wait when the pool's places are taken."""
    if policy.wait is None:
        return policy, False
    if _enter_wait(pool, policy.server_connections):
        return policy, True
    return replace(policy, wait=None), False


# How long the holder's store waits for a connection in all, a PoolTimeout
# after another: the handler's side effect has run, and an answer not stored
# lets a retry run it again once the lease (by default 30 s) is out.
STORE_PATIENCE = 30.0


def _pool_timed_out(e: BaseException, since: Optional[float]) -> bool:
    """true when e is psycopg_pool's PoolTimeout for the connection of the
    holder's store (since: when its handler returned), to be taken again
    within STORE_PATIENCE."""
    return (since is not None and type(e).__name__ == "PoolTimeout"
            and time.monotonic() - since < STORE_PATIENCE)


def run(policy: Policy, req: Request, pool: Any, handler: Callable[[Holding], Answer],
        expose: Optional[Callable[[Any], None]] = None) -> Answer:
    """Runs exchange() with connections from pool (anything with a
    .connection() context manager).  Outside one_transaction mode the
    connection goes back to the pool while the handler runs (the claim is
    committed by then), so a handler that takes its own connection from
    the same pool never waits for the one its middleware holds; the answer
    is stored on a connection taken again afterwards.  In one_transaction
    mode the handler's writes are on that connection: expose(conn) hands
    it over, and it is held throughout."""
    policy, waiting = _waiting_policy(policy, pool)
    gen = exchange(policy, req)
    lease: Any = None
    conn: Any = None
    value: Any = None
    error: Optional[BaseException] = None
    held_since: Optional[float] = None
    try:
        while True:
            try:
                step = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                answer: Answer = stop.value
                return answer
            value, error = None, None
            try:
                if isinstance(step, Holding):
                    if not policy.one_transaction and lease is not None:
                        done, lease, conn = lease, None, None
                        done.__exit__(None, None, None)
                    value = handler(step)
                    held_since = time.monotonic()
                    continue
                while conn is None:
                    try:
                        lease = pool.connection()
                        conn = lease.__enter__()
                    except Exception as e:  # noqa: BLE001 - PoolTimeout, when psycopg_pool is there
                        lease = None
                        if not _pool_timed_out(e, held_since):
                            raise
                        continue
                    if policy.one_transaction and expose is not None:
                        expose(conn)
                if step == COMMIT:
                    conn.commit()
                elif step == ROLLBACK:
                    conn.rollback()
                elif isinstance(step, q.Query):
                    try:
                        value = client.run(conn, step)
                    finally:
                        # the first query is the claim: its sleep is over
                        waiting = waiting and _leave_wait(pool)
                else:
                    raise ValueError("unknown step %r" % (step,))
            except Exception as e:  # noqa: BLE001 - thrown into the exchange
                error = e
    finally:
        if waiting:
            _leave_wait(pool)
        if lease is not None:
            lease.__exit__(*sys.exc_info())


async def run_async(policy: Policy, req: Request, pool: Any, handler: Callable[[Holding], Any],
                    expose: Optional[Callable[[Any], None]] = None) -> Answer:
    """run() for asyncio: pool has an async .connection() context manager
    (psycopg_pool.AsyncConnectionPool); the connection is not held while
    the handler runs, except in one_transaction mode."""
    policy, waiting = _waiting_policy(policy, pool)
    gen = exchange(policy, req)
    lease: Any = None
    conn: Any = None
    value: Any = None
    error: Optional[BaseException] = None
    held_since: Optional[float] = None
    try:
        while True:
            try:
                step = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                answer: Answer = stop.value
                return answer
            value, error = None, None
            try:
                if isinstance(step, Holding):
                    if not policy.one_transaction and lease is not None:
                        done, lease, conn = lease, None, None
                        await done.__aexit__(None, None, None)
                    value = await handler(step)
                    held_since = time.monotonic()
                    continue
                while conn is None:
                    try:
                        lease = pool.connection()
                        conn = await lease.__aenter__()
                    except Exception as e:  # noqa: BLE001 - PoolTimeout, when psycopg_pool is there
                        lease = None
                        if not _pool_timed_out(e, held_since):
                            raise
                        continue
                    if policy.one_transaction and expose is not None:
                        expose(conn)
                if step == COMMIT:
                    await conn.commit()
                elif step == ROLLBACK:
                    await conn.rollback()
                elif isinstance(step, q.Query):
                    try:
                        value = await aio.run(conn, step)
                    finally:
                        # the first query is the claim: its sleep is over
                        waiting = waiting and _leave_wait(pool)
                else:
                    raise ValueError("unknown step %r" % (step,))
            except Exception as e:  # noqa: BLE001 - thrown into the exchange
                error = e
    finally:
        if waiting:
            _leave_wait(pool)
        if lease is not None:
            await lease.__aexit__(*sys.exc_info())


class Connect:
    """A connection source without a pool: a new connection per request
    (conninfo as for psycopg.connect).  Pools (psycopg_pool) do the same
    job faster; this suits tests and low traffic."""

    def __init__(self, conninfo: str = "") -> None:
        self.conninfo = conninfo

    def connection(self) -> ContextManager["psycopg.Connection[Any]"]:
        # prepare_threshold=None: the handler's queries on it are never
        # prepared either, so it works behind a transaction pooler
        return psycopg.connect(self.conninfo, prepare_threshold=None)


class AsyncConnect(Connect):
    """Connect for asyncio: an AsyncConnection per request."""

    def connection(self) -> Any:
        return _AsyncConnection(self.conninfo)


class _AsyncConnection:
    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.conn: Optional["psycopg.AsyncConnection[Any]"] = None

    async def __aenter__(self) -> "psycopg.AsyncConnection[Any]":
        self.conn = await psycopg.AsyncConnection.connect(self.conninfo, prepare_threshold=None)
        return self.conn

    async def __aexit__(self, *exc: Any) -> None:
        assert self.conn is not None
        await self.conn.close()
