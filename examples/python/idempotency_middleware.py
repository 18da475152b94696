"""idempotency_middleware: the Idempotency-Key header for Flask views,
backed by the idempotency extension's claim / checkpoint / complete / fail.

HTTP mapping (IETF draft "The Idempotency-Key HTTP Header Field"):

    no key on a route that requires one   400
    claimed / resumed                     the view runs; its answer is stored
    replay                                the stored status and body, Idempotent-Replayed: true
    in_progress                           409, Retry-After (seconds, rounded up)
    mismatch (same key, other request)    422
    view raises                           fail(): retryable for 5xx, final for 4xx

The scope of a key is the authenticated caller (scope(), by default
flask.g.user set by the auth layer), never anything the client sends.  The
request fingerprint covers method, path and body.
"""
import functools
import json

import flask
import psycopg2
from werkzeug.exceptions import HTTPException

CLAIM_SQL = """
    SELECT outcome, fence, response_code, response_body, recovery_point, attempts,
           ceil(extract(epoch FROM retry_after))::int
      FROM idempotency.claim(%s, %s::jsonb, %s, %s::interval, %s::interval)"""


class HTTPError(Exception):
    """Raised by a view to answer with a given HTTP status."""

    def __init__(self, status, message, body=None):
        super().__init__(message)
        self.status = status
        self.body = body


def _json(body, status, headers=None):
    return flask.current_app.response_class(
        json.dumps(body), status, headers or {}, mimetype="application/json")


def _problem(status, title, detail, headers=None):
    """application/problem+json answer (RFC 9457)."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return flask.current_app.response_class(
        json.dumps(body), status, headers or {}, mimetype="application/problem+json")


class Unkeyed:
    """The ctx of a view called without a key where the key is optional."""

    def __init__(self, conn):
        self.conn, self.key, self.recovery_point, self.attempts = conn, None, "started", 1

    def checkpoint(self, name):
        self.recovery_point = name

    def phase(self, name, fn):
        return fn()


class Holder:
    """What a view gets while it holds the key (the ctx argument)."""

    def __init__(self, conn, key, scope, claim, lease):
        self.conn, self.key, self.scope, self.lease = conn, key, scope, lease
        self.outcome, self.fence, self.attempts = claim["outcome"], claim["fence"], claim["attempts"]
        self.recovery_point = claim["recovery_point"]
        self._resume_at = claim["recovery_point"]
        self._skipping = self._resume_at != "started"

    def checkpoint(self, name):
        """Records progress and extends the lease."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT idempotency.checkpoint(%s, %s, %s, %s::interval, %s)",
                        (self.key, self.fence, name, self.lease, self.scope))
        self.recovery_point = name

    def phase(self, name, fn):
        """Runs fn unless this phase was done before (a checkpoint at or
        after name), then checkpoints name."""
        if self._skipping:
            if name == self._resume_at:
                self._skipping = False
            return None
        result = fn()
        self.checkpoint(name)
        return result


def idempotent(pool, required=True, scope=None, ttl=None, lease=None, mode="phased"):
    """Decorator for a Flask view view(ctx) -> (body, status).

    pool: a psycopg2.pool.ThreadedConnectionPool; scope(): the caller's
    scope (default flask.g.user); ttl, lease: interval text (None: the
    extension's settings); mode: "phased" (claim commits, the work runs,
    checkpoints record phases) or "transaction" (claim, the view's writes
    through ctx.conn and complete commit together).
    """
    scope_of = scope or (lambda: getattr(flask.g, "user", None))

    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            key = flask.request.headers.get("Idempotency-Key")
            if not key:
                if required:
                    return _problem(400, "Idempotency-Key is missing",
                                    "This operation requires an Idempotency-Key header.")
                return _answer(view, args, kwargs)
            caller = scope_of()
            if caller is None:
                return _problem(401, "Unauthenticated", "Idempotency keys belong to an authenticated caller.")
            request = json.dumps({"method": flask.request.method, "path": flask.request.path,
                                  "body": flask.request.get_json(silent=True)})
            conn = pool.getconn()
            try:
                conn.autocommit = mode != "transaction"
                try:
                    with conn.cursor() as cur:
                        cur.execute(CLAIM_SQL, (key, request, str(caller), ttl, lease))
                        claim = dict(zip(("outcome", "fence", "response_code", "response_body",
                                          "recovery_point", "attempts", "retry_after"), cur.fetchone()))
                except psycopg2.Error as e:
                    conn.rollback()
                    if e.pgcode == "22023":     # empty or over-long key
                        return _problem(400, "Invalid Idempotency-Key", e.diag.message_primary)
                    raise
                if claim["outcome"] in ("claimed", "resumed"):
                    return _hold(view, conn, key, str(caller), claim, args, kwargs)
                conn.commit()
                if claim["outcome"] == "replay":
                    return _json(claim["response_body"], claim["response_code"],
                                 {"Idempotent-Replayed": "true"})
                if claim["outcome"] == "in_progress":
                    return _problem(409, "A request with this Idempotency-Key is being processed",
                                    "Retry after the time given in Retry-After.",
                                    {"Retry-After": str(max(1, claim["retry_after"] or 0))})
                return _problem(422, "Idempotency-Key reused with another request",
                                "This key was used for a different request; use a new key.")
            except Exception:
                if not conn.closed:
                    conn.rollback()
                raise
            finally:
                pool.putconn(conn)

        def _hold(view, conn, key, caller, claim, args, kwargs):
            """Runs the view as the key's holder and stores its answer."""
            ctx = Holder(conn, key, caller, claim, lease)
            with conn.cursor() as cur:
                if mode == "transaction":
                    cur.execute("SAVEPOINT idempotent_work")
                try:
                    body, status = view(ctx, *args, **kwargs)
                    cur.execute("SELECT idempotency.complete(%s, %s, %s::jsonb, %s, %s)",
                                (key, claim["fence"], json.dumps(body), status, caller))
                except psycopg2.Error as e:
                    if e.pgcode == "55000":     # lease lost: another holder owns the key now
                        raise
                    body, status = _failed(conn, cur, key, caller, claim, e)
                except Exception as e:          # noqa: BLE001 - every view error is recorded
                    body, status = _failed(conn, cur, key, caller, claim, e)
            conn.commit()
            return _json(body, status)

        def _failed(conn, cur, key, caller, claim, e):
            """Records a view's error: retryable for 5xx, final for 4xx."""
            if mode == "transaction":
                cur.execute("ROLLBACK TO SAVEPOINT idempotent_work")
            elif conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_INERROR:
                conn.rollback()
            if isinstance(e, HTTPError):
                status, body = e.status, e.body
            elif isinstance(e, HTTPException):      # flask.abort()
                status, body = e.code, {"error": e.description}
            else:
                status, body = 500, None
            if not isinstance(status, int) or not 400 <= status < 600:
                status = 500
            body = body or {"error": str(e) if status < 500 else "internal error"}
            cur.execute("SELECT idempotency.fail(%s, %s, %s::jsonb, %s, %s, %s)",
                        (key, claim["fence"], json.dumps(body), status, status >= 500, caller))
            return body, status

        def _answer(view, args, kwargs):
            """A route where the key is optional, called without one."""
            conn = pool.getconn()
            try:
                conn.autocommit = True
                body, status = view(Unkeyed(conn), *args, **kwargs)
            except HTTPError as e:
                if e.status >= 500:
                    raise
                body, status = e.body or {"error": str(e)}, e.status
            finally:
                pool.putconn(conn)
            return _json(body, status)

        return wrapper
    return decorate
