"""The same small payment app on every framework, behind the package's
middleware, and a uniform client for it: post(path, json, headers) ->
(status, headers, body).  Routes:

    POST /pay     201 {"paid": amount, "run": n} with a Location header
    POST /boom    raises (a 500)
    POST /tx      inserts into py_ledger (on the middleware's connection in
                  one_transaction mode, else on its own, rolled back when
                  it fails), then answers 201, or 500 when the body says
                  {"fail": true}
    POST /resume  first try: checkpoints "charged", commits, answers 503;
                  a retry resumes from "charged" and answers 201
    GET  /pay     unguarded

The scope is the X-Tenant header, so tenants never share keys.
"""
import itertools
import json
from typing import Any, Dict, Tuple

import psycopg

from pg_idempotency import aio, client, http

RUNS = itertools.count(1)
Reply = Tuple[int, Dict[str, str], bytes]


def _ledger(conn: Any, note: str) -> None:
    conn.execute("INSERT INTO py_ledger (note) VALUES (%s)", (note,))


def _tx(conn: Any, note: str, fail: bool) -> None:
    """The ledger row: on the middleware's connection in one_transaction
    mode; otherwise the middleware holds none while the view runs, and
    the view takes its own (rolled back when the view fails)."""
    if conn is not None:
        _ledger(conn, note)
        return
    with psycopg.connect() as own:
        _ledger(own, note)
        if fail:
            own.rollback()


def _resume(conn: Any, h: http.Holding) -> Tuple[Dict[str, Any], int]:
    if conn is None:
        with psycopg.connect() as own:
            return _resume(own, h)
    if h.recovery_point == "started":
        client.checkpoint(conn, h.key, h.fence, "charged", scope=h.scope)
        conn.commit()
        return {"error": "shipping down"}, 503
    return {"resumed_from": h.recovery_point, "attempts": h.attempts}, 201


def starlette_app(policy: http.Policy):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from pg_idempotency.asgi import IdempotencyMiddleware

    async def pay(request: Request):
        if request.method == "GET":
            return JSONResponse({"ok": True})
        body = await request.json()
        return JSONResponse({"paid": body["amount"], "run": next(RUNS)}, 201,
                            headers={"Location": "/payments/1"})

    async def boom(request: Request):
        raise RuntimeError("boom")

    async def tx(request: Request):
        body = await request.json()
        conn = getattr(request.state, "idempotency_connection", None)
        if conn is None:            # not one_transaction: the view's own connection
            async with await psycopg.AsyncConnection.connect() as own:
                await own.execute("INSERT INTO py_ledger (note) VALUES (%s)", (body["note"],))
                if body.get("fail"):
                    await own.rollback()
        else:
            await conn.execute("INSERT INTO py_ledger (note) VALUES (%s)", (body["note"],))
        return JSONResponse({"noted": body["note"]}, 500 if body.get("fail") else 201)

    async def resume(request: Request):
        h = request.state.idempotency
        if h.recovery_point == "started":
            async with await psycopg.AsyncConnection.connect() as own:
                await aio.checkpoint(own, h.key, h.fence, "charged", scope=h.scope)
            return JSONResponse({"error": "shipping down"}, 503)
        return JSONResponse({"resumed_from": h.recovery_point, "attempts": h.attempts}, 201)

    policy.scope = policy.scope or (lambda scope: dict((k.decode(), v.decode()) for k, v in scope["headers"]).get("x-tenant", ""))
    app = Starlette(routes=[Route("/pay", pay, methods=["GET", "POST"]),
                            Route("/boom", boom, methods=["POST"]),
                            Route("/tx", tx, methods=["POST"]),
                            Route("/resume", resume, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, pool=http.AsyncConnect(), policy=policy)
    tc = TestClient(app, raise_server_exceptions=False)

    def post(path: str, body: Any, headers: Dict[str, str], method: str = "POST") -> Reply:
        r = tc.request(method, path, content=json.dumps(body).encode(),
                       headers={"content-type": "application/json", **headers})
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content
    return post


def flask_app(policy: http.Policy):
    import flask

    from pg_idempotency.flask import Idempotency, connection, holding

    app = flask.Flask("py_flask")

    @app.route("/pay", methods=["GET", "POST"])
    def pay():
        if flask.request.method == "GET":
            return {"ok": True}
        body = flask.request.get_json()
        return {"paid": body["amount"], "run": next(RUNS)}, 201, {"Location": "/payments/1"}

    @app.post("/boom")
    def boom():
        raise RuntimeError("boom")

    @app.post("/tx")
    def tx():
        body = flask.request.get_json()
        _tx(connection(), body["note"], bool(body.get("fail")))
        return {"noted": body["note"]}, 500 if body.get("fail") else 201

    @app.post("/resume")
    def resume():
        return _resume(connection(), holding())

    policy.scope = policy.scope or (lambda environ: environ.get("HTTP_X_TENANT", ""))
    Idempotency(app, http.Connect(), policy)
    tc = app.test_client()

    def post(path: str, body: Any, headers: Dict[str, str], method: str = "POST") -> Reply:
        r = tc.open(path, method=method, data=json.dumps(body),
                    headers={"content-type": "application/json", **headers})
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.data
    return post


# Django: this module is its URLconf.
urlpatterns: list = []


def django_app(policy: http.Policy):
    import django
    from django.conf import settings
    from django.http import JsonResponse
    from django.test import Client
    from django.urls import path as route

    if not settings.configured:
        settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"], DEBUG=False,
                           SECRET_KEY="pg-idempotency-tests-only",
                           MIDDLEWARE=["pg_idempotency.django.IdempotencyMiddleware"],
                           PG_IDEMPOTENCY={})
        django.setup()

    def pay(request):
        if request.method == "GET":
            return JsonResponse({"ok": True})
        body = json.loads(request.body)
        response = JsonResponse({"paid": body["amount"], "run": next(RUNS)}, status=201)
        response["Location"] = "/payments/1"
        return response

    def boom(request):
        raise RuntimeError("boom")

    def tx(request):
        body = json.loads(request.body)
        _tx(getattr(request, "idempotency_connection", None), body["note"], bool(body.get("fail")))
        return JsonResponse({"noted": body["note"]}, status=500 if body.get("fail") else 201)

    def resume(request):
        body, status = _resume(getattr(request, "idempotency_connection", None), request.idempotency)
        return JsonResponse(body, status=status)

    urlpatterns[:] = [route("pay", pay), route("boom", boom), route("tx", tx), route("resume", resume)]
    policy.scope = policy.scope or (lambda request: request.headers.get("x-tenant", ""))
    settings.PG_IDEMPOTENCY = {"pool": http.Connect(), "policy": policy}
    tc = Client(raise_request_exception=False)

    def post(path: str, body: Any, headers: Dict[str, str], method: str = "POST") -> Reply:
        extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
        r = tc.generic(method, path, json.dumps(body), "application/json", **extra)
        return r.status_code, {k.lower(): v for k, v in r.items()}, r.content
    return post


FRAMEWORKS = {"starlette": starlette_app, "flask": flask_app, "django": django_app}
