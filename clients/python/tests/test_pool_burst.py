"""Issue 45, item 2: outside one_transaction mode a middleware holds no
pooled connection while the handler runs.  Each framework's quick start
(the pool at psycopg_pool's default size, 4) serves a view that takes its
own connection from the same pool; a burst of 4x the pool's size of
concurrent requests with distinct keys, over real HTTP on 127.0.0.1, is
answered 201 every one, well before the pool's timeout.  (When the
middleware held its connection, four requests took the pool and every
view waited for it: PoolTimeout, 500s.)"""
import json
import socketserver
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from conftest import NO_PREPARE

POOL_TIMEOUT = 8.0          # seconds a view waits for a connection
BURST = 4 * 4               # 4x the quick start's pool (psycopg_pool's default size)
PORTS = iter(range(18460, 18480))


def _burst(port: int):
    def one(i: int):
        req = urllib.request.Request(
            "http://127.0.0.1:%d/pay" % port, data=json.dumps({"amount": i}).encode(), method="POST",
            headers={"content-type": "application/json", "Idempotency-Key": "burst-" + uuid.uuid4().hex})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read()
    started = time.monotonic()
    with ThreadPoolExecutor(BURST) as ex:
        replies = list(ex.map(one, range(BURST)))
    elapsed = time.monotonic() - started
    assert [s for s, _ in replies] == [201] * BURST, replies
    assert sorted(b["paid"] for _, b in replies) == list(range(BURST))
    assert elapsed < POOL_TIMEOUT, elapsed


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class _Threaded(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _serve_wsgi(app):
    port = next(PORTS)
    server = make_server("127.0.0.1", port, app, server_class=_Threaded, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return port, server


def test_flask_burst_does_not_starve_the_pool():
    import flask
    from psycopg_pool import ConnectionPool

    from pg_idempotency.flask import Idempotency

    pool = ConnectionPool("", timeout=POOL_TIMEOUT, kwargs=NO_PREPARE)        # the quick start's pool
    app = flask.Flask("burst")
    Idempotency(app, pool)

    @app.post("/pay")
    def pay():
        with pool.connection() as conn:                     # the view's own connection
            conn.execute("SELECT pg_sleep(0.1)")
        return {"paid": flask.request.get_json()["amount"]}, 201

    port, server = _serve_wsgi(app)
    try:
        _burst(port)
    finally:
        server.shutdown()
        pool.close()


def test_django_burst_does_not_starve_the_pool():
    import apps
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.http import JsonResponse
    from django.urls import path as route
    from psycopg_pool import ConnectionPool

    from pg_idempotency import http

    apps.django_app(http.Policy())                          # configures Django once
    pool = ConnectionPool("", timeout=POOL_TIMEOUT, kwargs=NO_PREPARE)

    def pay(request):
        with pool.connection() as conn:
            conn.execute("SELECT pg_sleep(0.1)")
        return JsonResponse({"paid": json.loads(request.body)["amount"]}, status=201)

    apps.urlpatterns[:] = [route("pay", pay)]
    settings.PG_IDEMPOTENCY = {"pool": pool, "policy": http.Policy()}
    settings.ALLOWED_HOSTS = ["127.0.0.1", "testserver"]
    port, server = _serve_wsgi(WSGIHandler())
    try:
        _burst(port)
    finally:
        server.shutdown()
        pool.close()


def test_starlette_burst_does_not_starve_the_pool():
    uvicorn = pytest.importorskip("uvicorn")
    from psycopg_pool import AsyncConnectionPool
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from pg_idempotency.asgi import IdempotencyMiddleware

    pool = AsyncConnectionPool("", timeout=POOL_TIMEOUT, kwargs=NO_PREPARE, open=False)   # the quick start's pool

    async def pay(request):
        async with pool.connection() as conn:               # the view's own connection
            await conn.execute("SELECT pg_sleep(0.1)")
        return JSONResponse({"paid": (await request.json())["amount"]}, 201)

    app = Starlette(routes=[Route("/pay", pay, methods=["POST"])],
                    on_startup=[pool.open], on_shutdown=[pool.close])
    app.add_middleware(IdempotencyMiddleware, pool=pool)
    port = next(PORTS)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    server.install_signal_handlers = lambda: None         # not the main thread
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        _burst(port)
    finally:
        server.should_exit = True
        thread.join(10)
