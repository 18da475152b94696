"""server: a small payments API using the Flask idempotency middleware.

    PGHOST=... PGDATABASE=... /usr/bin/python3 server.py

listens on 127.0.0.1, a free port, and prints {"port": N}.  The auth layer
turns "Authorization: Bearer <token>" into flask.g.user; the middleware
scopes keys by it.  POST /payments has two side effects (charge, then
receipt) in phases, so a retry after a crash between them resumes after the
charge.  CRASH_AFTER=charged makes the process die right after that
checkpoint (used by the tests to simulate a crash).
"""
import json
import logging
import os
import time

import flask
import psycopg2.pool
from werkzeug.serving import make_server

from idempotency_middleware import HTTPError, idempotent

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


def setup(pool):
    """Demo tables: side effects and orders."""
    conn = pool.getconn()
    try:
        with conn, conn.cursor() as cur:
            cur.execute("""CREATE TABLE IF NOT EXISTS demo_side_effects (
                id bigserial PRIMARY KEY, scope text, key text, effect text,
                at timestamptz DEFAULT now())""")
            cur.execute("""CREATE TABLE IF NOT EXISTS demo_orders (
                id bigserial PRIMARY KEY, owner text, item text)""")
    finally:
        pool.putconn(conn)


def create_app(pool, ttl=None, lease=None, delay=0.0, crash_after=None):
    """The API; ttl / lease for its keys, delay slows the charge down,
    crash_after dies after that checkpoint."""
    app = flask.Flask(__name__)

    @app.before_request
    def auth():
        """Auth layer: only this sets g.user, from a credential the server checks."""
        header = flask.request.headers.get("Authorization", "")
        user = TOKENS.get(header[7:]) if header.startswith("Bearer ") else None
        if user is None:
            return flask.jsonify(error="unauthenticated"), 401
        flask.g.user = user
        return None

    def effect(ctx, what):
        with ctx.conn.cursor() as cur:
            cur.execute("INSERT INTO demo_side_effects(scope, key, effect) VALUES (%s, %s, %s)",
                        (flask.g.user, ctx.key, what))

    @app.post("/payments")
    @idempotent(pool, ttl=ttl, lease=lease)
    def payments(ctx):
        amount = (flask.request.get_json(silent=True) or {}).get("amount")
        if not isinstance(amount, int) or amount <= 0:
            raise HTTPError(400, "amount must be a positive integer")

        def charge():
            time.sleep(delay)
            effect(ctx, "charge")
        ctx.phase("charged", charge)
        if crash_after == "charged":
            os._exit(3)                     # simulated crash between the side effects
        ctx.phase("receipt_sent", lambda: effect(ctx, "receipt"))
        return {"paid": amount, "attempts": ctx.attempts}, 201

    @app.post("/flaky")
    @idempotent(pool, ttl=ttl, lease=lease)
    def flaky(ctx):
        """Fails with 503 on the first attempt: the retry runs it again."""
        effect(ctx, f"flaky attempt {ctx.attempts}")
        if ctx.attempts == 1:
            raise HTTPError(503, "upstream unavailable")
        return {"ok": True, "attempts": ctx.attempts}, 200

    @app.post("/orders")
    @idempotent(pool, ttl=ttl, lease=lease, mode="transaction")
    def orders(ctx):
        """One transaction: the order row and the stored answer commit together."""
        item = flask.request.get_json()["item"]
        with ctx.conn.cursor() as cur:
            cur.execute("INSERT INTO demo_orders(owner, item) VALUES (%s, %s) RETURNING id",
                        (flask.g.user, item))
            order = cur.fetchone()[0]
        return {"order": order, "item": item}, 201

    return app


def serve(app):
    """A threaded server on 127.0.0.1, a free port."""
    return make_server("127.0.0.1", 0, app, threaded=True)


if __name__ == "__main__":
    pool = psycopg2.pool.ThreadedConnectionPool(1, 30, "")
    setup(pool)
    server = serve(create_app(pool, ttl=os.environ.get("IDEM_TTL"), lease=os.environ.get("IDEM_LEASE"),
                              crash_after=os.environ.get("CRASH_AFTER")))
    print(json.dumps({"port": server.server_port}), flush=True)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)   # no request log
    server.serve_forever()
