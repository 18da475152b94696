"""Flask integration: Idempotency(app, pool) wraps app.wsgi_app with
wsgi.IdempotencyWSGI.  A view reaches the request's connection (one
transaction mode) through connection(), the key it holds through
holding().
"""
from __future__ import annotations

from typing import Any, Optional

from . import http
from .wsgi import IdempotencyWSGI


class Idempotency:
    def __init__(self, app: Any = None, pool: Any = None, policy: Optional[http.Policy] = None,
                 **options: Any) -> None:
        self.pool, self.policy = pool, policy or http.Policy(**options)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Any) -> None:
        app.wsgi_app = IdempotencyWSGI(app.wsgi_app, self.pool, self.policy)


def connection() -> Any:
    """The connection that stores this request's answer, or None."""
    import flask
    return flask.request.environ.get("pg_idempotency.connection")


def holding() -> Optional[http.Holding]:
    """The key this request holds (to checkpoint or resume), or None."""
    import flask
    value: Optional[http.Holding] = flask.request.environ.get("pg_idempotency.holding")
    return value
