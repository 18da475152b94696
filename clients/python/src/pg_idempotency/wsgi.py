"""WSGI middleware for the Idempotency-Key header (used by flask.py; works
for any WSGI app); the behaviour is http.py's.  In one_transaction mode the
application finds the connection in environ["pg_idempotency.connection"]
and the key it holds (an http.Holding) in environ["pg_idempotency.holding"].
"""
from __future__ import annotations

import io
from typing import Any, Callable, Dict, Iterable, List, Optional

from . import http

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 409: "Conflict",
           410: "Gone", 422: "Unprocessable Content", 500: "Internal Server Error"}


def _respond(start_response: StartResponse, answer: http.Answer) -> List[bytes]:
    start_response("%d %s" % (answer.status, REASONS.get(answer.status, "Status")),
                   [(k, v) for k, v in answer.headers if k.lower() != "content-length"]
                   + [("Content-Length", str(len(answer.body)))])
    return [answer.body]


class IdempotencyWSGI:
    def __init__(self, app: WSGIApp, pool: Any, policy: Optional[http.Policy] = None,
                 **options: Any) -> None:
        """pool: anything with a .connection() context manager
        (psycopg_pool.ConnectionPool, http.Connect); policy.scope is
        called with the WSGI environ."""
        self.app, self.pool = app, pool
        self.policy = policy or http.Policy(**options)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        if not http.guarded(self.policy, method):
            return self.app(environ, start_response)
        key = environ.get("HTTP_" + self.policy.header.upper().replace("-", "_"))
        if not key:
            if self.policy.required:
                return _respond(start_response, http.missing_key())
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length > 0 else b""
        scope_of = self.policy.scope or (lambda _environ: "")
        try:
            scope = scope_of(environ)
        except Exception:  # noqa: BLE001 - the application's scope function
            return _respond(start_response, http.scope_failed())
        req = http.Request(method, environ.get("PATH_INFO", "/"), body,
                           environ.get("CONTENT_TYPE", ""), key, scope)
        # outside one_transaction mode no connection is held while the app runs
        answer = http.run(self.policy, req, self.pool, lambda holding: self._run(environ, body, holding),
                          lambda conn: environ.__setitem__("pg_idempotency.connection", conn))
        return _respond(start_response, answer)

    def _run(self, environ: Environ, body: bytes, holding: http.Holding) -> http.Answer:
        environ["wsgi.input"] = io.BytesIO(body)
        environ["pg_idempotency.holding"] = holding
        captured: Dict[str, Any] = {}

        def start(status: str, headers: List[Any], exc_info: Any = None) -> Callable[[bytes], None]:
            captured["status"], captured["headers"] = int(status.split()[0]), list(headers)
            return lambda _data: None

        result = self.app(environ, start)
        try:
            data = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close:
                close()
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        return http.Answer(captured["status"], headers, data)
