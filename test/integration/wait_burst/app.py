"""test/integration/wait_burst/app.py: the Python package's burst app for
check.py, under uvicorn (python3 -m uvicorn app:app).  POST
/wait-burst/<n>: IdempotencyMiddleware with wait on an AsyncConnectionPool
of n (2, 4, 10), scoped by X-User; the handler sleeps 0.35 s and records
its run on the same pool.  Each pool has its own Starlette app, chosen
by the request's path.  PGIDEM_SERVER_CONNECTIONS: a transaction pooler's
pool, the middleware's server_connections."""
import asyncio
import datetime
import os

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pg_idempotency.asgi import IdempotencyMiddleware

pools = []


def burst_app(size):
    # prepare_threshold: the README's line for a transaction pooler
    pool = AsyncConnectionPool("", min_size=size, max_size=size, kwargs={"prepare_threshold": None},
                               open=False)
    pools.append(pool)

    async def pay(request: Request):
        key = request.headers["idempotency-key"]
        await asyncio.sleep(0.35)
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO wait_burst_runs (key) VALUES (%s)", [key])
        return JSONResponse({"key": key, "at": datetime.datetime.now().isoformat()}, status_code=201)

    inner = Starlette(routes=[Route("/wait-burst/%d" % size, pay, methods=["POST"])])
    inner.add_middleware(IdempotencyMiddleware, pool=pool, wait="5 seconds",
                         server_connections=int(os.environ.get("PGIDEM_SERVER_CONNECTIONS") or 0) or None,
                         scope=lambda s: dict(s["headers"]).get(b"x-user", b"").decode() or None)
    return inner


apps = {"/wait-burst/%d" % n: burst_app(n) for n in (2, 4, 10)}
not_found = Starlette()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":     # the pools open and close with the server
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for p in pools:
                    await p.open()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for p in pools:
                    await p.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    await apps.get(scope["path"], not_found)(scope, receive, send)
