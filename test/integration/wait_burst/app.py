"""test/integration/wait_burst/app.py: the Python package's burst app for
check.py, under uvicorn (python3 -m uvicorn app:app).  POST
/wait-burst/<n>: IdempotencyMiddleware with wait on an AsyncConnectionPool
of n (2, 4, 10), scoped by X-User; the handler sleeps 0.35 s and records
its run on the same pool.  Each pool has its own Starlette app, mounted."""
import asyncio
import datetime

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from pg_idempotency.asgi import IdempotencyMiddleware

pools = []


def burst_app(size):
    pool = AsyncConnectionPool("", min_size=size, max_size=size, open=False)
    pools.append(pool)

    async def pay(request: Request):
        key = request.headers["idempotency-key"]
        await asyncio.sleep(0.35)
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO wait_burst_runs (key) VALUES (%s)", [key])
        return JSONResponse({"key": key, "at": datetime.datetime.now().isoformat()}, status_code=201)

    inner = Starlette(routes=[Route("/", pay, methods=["POST"])])
    inner.add_middleware(IdempotencyMiddleware, pool=pool, wait="5 seconds",
                         scope=lambda s: dict(s["headers"]).get(b"x-user", b"").decode() or None)
    return Mount("/wait-burst/%d" % size, app=inner)


async def opened():
    for p in pools:
        await p.open()
    print("pools open", flush=True)


app = Starlette(routes=[burst_app(n) for n in (2, 4, 10)], on_startup=[opened])
