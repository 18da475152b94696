"""ASGI middleware (Starlette, FastAPI, any ASGI app) for the
Idempotency-Key header; the behaviour is http.py's.

    app.add_middleware(IdempotencyMiddleware, pool=pool)   # AsyncConnectionPool

pool: anything with an async .connection() context manager (a
psycopg_pool.AsyncConnectionPool).  In one_transaction mode the handler
finds the connection in request.state.idempotency_connection (scope
["state"]) and its queries commit with the stored answer.  The key it
holds is request.state.idempotency (an http.Holding).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional

from . import http

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _header(scope: Scope, name: str) -> Optional[str]:
    want = name.lower().encode()
    for k, v in scope.get("headers", []):
        if k.lower() == want:
            return str(v.decode("latin-1"))
    return None


async def _send_answer(send: Send, answer: http.Answer) -> None:
    await send({"type": "http.response.start", "status": answer.status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]})
    await send({"type": "http.response.body", "body": answer.body})


class IdempotencyMiddleware:
    def __init__(self, app: ASGIApp, pool: Any, policy: Optional[http.Policy] = None,
                 **options: Any) -> None:
        self.app, self.pool = app, pool
        self.policy = policy or http.Policy(**options)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not http.guarded(self.policy, scope["method"]):
            await self.app(scope, receive, send)
            return
        key = _header(scope, self.policy.header)
        if not key:
            if self.policy.required:
                await _send_answer(send, http.missing_key())
            else:
                await self.app(scope, receive, send)
            return
        chunks: List[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        scope_of = self.policy.scope or (lambda _scope: "")
        try:
            key_scope = scope_of(scope)
        except Exception:  # noqa: BLE001 - the application's scope function
            await _send_answer(send, http.scope_failed())
            return
        req = http.Request(scope["method"], scope["path"], body, _header(scope, "content-type") or "",
                           key, key_scope)
        state: Dict[str, Any] = scope.setdefault("state", {})

        def expose(conn: Any) -> None:      # one_transaction mode only
            state["idempotency_connection"] = conn

        # outside one_transaction mode no connection is held while the app runs
        answer = await http.run_async(self.policy, req, self.pool,
                                      lambda holding: self._run(scope, body, holding), expose)
        await _send_answer(send, answer)

    async def _run(self, scope: Scope, body: bytes, holding: http.Holding) -> http.Answer:
        """Runs the application and captures its answer."""
        scope["state"]["idempotency"] = holding
        sent = False
        result: Dict[str, Any] = {"status": 500, "headers": [], "body": []}

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                result["status"] = message["status"]
                result["headers"] = [(k.decode("latin-1"), v.decode("latin-1"))
                                     for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                result["body"].append(message.get("body", b""))

        await self.app(scope, receive, send)
        return http.Answer(result["status"], result["headers"], b"".join(result["body"]))
