"""Django middleware for the Idempotency-Key header; the behaviour is
http.py's.  settings.py:

    MIDDLEWARE = [..., "pg_idempotency.django.IdempotencyMiddleware"]
    PG_IDEMPOTENCY = {"pool": ConnectionPool(...), "policy": Policy(...)}

pool: anything with a .connection() context manager; policy.scope is
called with the HttpRequest.  In one_transaction mode a view finds the
connection in request.idempotency_connection; request.idempotency is
the key it holds (an http.Holding).
"""
from __future__ import annotations

from typing import Any, Callable

from . import http


def _response(answer: http.Answer) -> Any:
    from django.http import HttpResponse
    response = HttpResponse(answer.body, status=answer.status)
    for k, v in answer.headers:
        response[k] = v
    return response


class IdempotencyMiddleware:
    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        from django.conf import settings
        config = settings.PG_IDEMPOTENCY
        self.get_response, self.pool = get_response, config["pool"]
        self.policy: http.Policy = config.get("policy") or http.Policy()

    def __call__(self, request: Any) -> Any:
        if not http.guarded(self.policy, request.method):
            return self.get_response(request)
        key = request.headers.get(self.policy.header)
        if not key:
            if self.policy.required:
                return _response(http.missing_key())
            return self.get_response(request)
        scope_of = self.policy.scope or (lambda _request: "")
        try:
            scope = scope_of(request)
        except Exception:  # noqa: BLE001 - the application's scope function
            return _response(http.scope_failed())
        req = http.Request(request.method, request.path, request.body,
                           request.headers.get("content-type", ""), key, scope)
        # outside one_transaction mode no connection is held while the view runs
        answer = http.run(self.policy, req, self.pool, lambda holding: self._run(request, holding),
                          lambda conn: setattr(request, "idempotency_connection", conn))
        return _response(answer)

    def _run(self, request: Any, holding: http.Holding) -> http.Answer:
        request.idempotency = holding
        response = self.get_response(request)
        return http.Answer(response.status_code, list(response.items()), response.content)
