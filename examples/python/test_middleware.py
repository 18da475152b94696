"""The Flask middleware against a real HTTP server and the real extension
(PGHOST/PGPORT/PGUSER/PGDATABASE from the environment).

    /usr/bin/python3 -m unittest -v test_middleware
"""
import http.client
import json
import logging
import os
import subprocess
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import psycopg2.pool

from server import create_app, serve, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def post(port, route, key=None, token="token-alice", body=None):
    """POST JSON; returns (status, headers, body)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", route, json.dumps(body or {}), headers)
        r = conn.getresponse()
        text = r.read()
        return r.status, r.headers, json.loads(text) if text else None
    finally:
        conn.close()


class Server:
    """The app on a real threaded HTTP server in this process."""

    def __init__(self, app):
        self.httpd = serve(app)
        self.port = self.httpd.server_port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Child:
    """server.py in a child process (so that it can crash)."""

    def __init__(self, **env):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py")],
                                     env={**os.environ, **env}, stdout=subprocess.PIPE, cwd=HERE)
        self.port = json.loads(self.proc.stdout.readline())["port"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()


class MiddlewareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        cls.pool = psycopg2.pool.ThreadedConnectionPool(1, 40, "")
        setup(cls.pool)
        cls.sql("TRUNCATE demo_side_effects, demo_orders")
        cls.sql("DELETE FROM idempotency.idempotency_keys WHERE scope IN ('alice', 'bob')")
        cls.server = Server(create_app(cls.pool, lease="5 seconds", delay=0.5))
        cls.port = cls.server.port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.pool.closeall()

    @classmethod
    def sql(cls, query, args=()):
        conn = cls.pool.getconn()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchone() if cur.description else None
        finally:
            cls.pool.putconn(conn)

    def effects(self, key, effect, scope="alice"):
        """How often a side effect ran for (scope, key)."""
        return self.sql("SELECT count(*) FROM demo_side_effects WHERE scope = %s AND key = %s AND effect = %s",
                        (scope, key, effect))[0]

    def test_missing_key_is_400(self):
        status, headers, body = post(self.port, "/payments", body={"amount": 5})
        self.assertEqual(status, 400)
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        self.assertEqual(body["title"], "Idempotency-Key is missing")

    def test_overlong_key_is_400(self):
        status, _, _ = post(self.port, "/payments", key="k" * 256, body={"amount": 5})
        self.assertEqual(status, 400)

    def test_unauthenticated_is_401(self):
        status, _, _ = post(self.port, "/payments", key="no-auth", token=None, body={"amount": 5})
        self.assertEqual(status, 401)

    def test_concurrent_posts_run_once(self):
        key = "concurrent-1"
        with ThreadPoolExecutor(20) as ex:
            rs = list(ex.map(lambda _: post(self.port, "/payments", key=key, body={"amount": 100}), range(20)))
        codes = [r[0] for r in rs]
        self.assertTrue(all(c in (201, 409) for c in codes), codes)
        self.assertIn(409, codes)
        fresh = [r for r in rs if r[0] == 201 and r[1].get("Idempotent-Replayed") != "true"]
        self.assertEqual(len(fresh), 1, "exactly one response comes from running the view")
        for status, headers, body in rs:
            if status == 201:
                self.assertEqual(body, {"paid": 100, "attempts": 1})
            else:
                self.assertIn(int(headers["Retry-After"]), range(1, 6))
        self.assertEqual(self.effects(key, "charge"), 1)
        self.assertEqual(self.effects(key, "receipt"), 1)

        status, headers, body = post(self.port, "/payments", key=key, body={"amount": 100})
        self.assertEqual((status, headers["Idempotent-Replayed"], body),
                         (201, "true", {"paid": 100, "attempts": 1}))
        self.assertEqual(self.effects(key, "charge"), 1)

    def test_same_key_other_body_is_422(self):
        key = "mismatch-1"
        self.assertEqual(post(self.port, "/payments", key=key, body={"amount": 7})[0], 201)
        self.assertEqual(post(self.port, "/payments", key=key, body={"amount": 8})[0], 422)
        self.assertEqual(self.effects(key, "charge"), 1)

    def test_keys_are_per_caller(self):
        key = "shared-key"
        self.assertEqual(post(self.port, "/payments", key=key, body={"amount": 3})[0], 201)
        status, headers, _ = post(self.port, "/payments", key=key, token="token-bob", body={"amount": 3})
        self.assertEqual(status, 201)
        self.assertIsNone(headers.get("Idempotent-Replayed"))
        self.assertEqual(self.effects(key, "charge", scope="bob"), 1)

    def test_5xx_is_retried(self):
        key = "flaky-1"
        self.assertEqual(post(self.port, "/flaky", key=key)[0], 503)
        status, _, body = post(self.port, "/flaky", key=key)
        self.assertEqual((status, body), (200, {"ok": True, "attempts": 2}))
        status, headers, _ = post(self.port, "/flaky", key=key)
        self.assertEqual((status, headers["Idempotent-Replayed"]), (200, "true"))
        self.assertEqual(self.effects(key, "flaky attempt 1"), 1)
        self.assertEqual(self.effects(key, "flaky attempt 2"), 1)

    def test_4xx_is_final(self):
        key = "invalid-1"
        first = post(self.port, "/payments", key=key, body={"amount": -1})
        self.assertEqual(first[0], 400)
        again = post(self.port, "/payments", key=key, body={"amount": -1})
        self.assertEqual((again[0], again[1]["Idempotent-Replayed"], again[2]), (400, "true", first[2]))

    def test_transaction_mode(self):
        key = "order-1"
        with ThreadPoolExecutor(5) as ex:
            rs = list(ex.map(lambda _: post(self.port, "/orders", key=key, body={"item": "book"}), range(5)))
        self.assertEqual([r[0] for r in rs], [201] * 5)
        self.assertEqual(len({r[2]["order"] for r in rs}), 1)
        self.assertEqual(sum(r[1].get("Idempotent-Replayed") == "true" for r in rs), 4)
        self.assertEqual(self.sql("SELECT count(*) FROM demo_orders WHERE item = 'book'")[0], 1)

    def test_crash_between_side_effects_resumes(self):
        key = "crash-1"
        # the second server is up before the crash, so its first try lands inside the lease
        child = Child(IDEM_LEASE="3 seconds")
        try:
            crashing = Child(IDEM_LEASE="3 seconds", CRASH_AFTER="charged")
            try:
                with self.assertRaises((ConnectionError, http.client.HTTPException)):
                    post(crashing.port, "/payments", key=key, body={"amount": 42})
                self.assertEqual(crashing.proc.wait(10), 3)
            finally:
                crashing.stop()
            self.assertEqual(self.effects(key, "charge"), 1)
            self.assertEqual(self.effects(key, "receipt"), 0)

            status, headers, _ = post(child.port, "/payments", key=key, body={"amount": 42})
            self.assertEqual(status, 409, "the crashed holder keeps its lease until it runs out")
            wait = int(headers["Retry-After"])
            self.assertIn(wait, (1, 2, 3))
            time.sleep(wait + 0.2)
            status, _, body = post(child.port, "/payments", key=key, body={"amount": 42})
            self.assertEqual((status, body), (201, {"paid": 42, "attempts": 2}))
            self.assertEqual(self.effects(key, "charge"), 1, "the charge is not repeated")
            self.assertEqual(self.effects(key, "receipt"), 1)
        finally:
            child.stop()

    def test_key_works_afresh_after_ttl(self):
        server = Server(create_app(self.pool, ttl="2 seconds", lease="1 second"))
        try:
            key = "expiring-1"
            self.assertEqual(post(server.port, "/payments", key=key, body={"amount": 1})[0], 201)
            self.assertEqual(post(server.port, "/payments", key=key, body={"amount": 2})[0], 422)
            time.sleep(2.2)
            status, headers, body = post(server.port, "/payments", key=key, body={"amount": 2})
            self.assertEqual((status, headers.get("Idempotent-Replayed"), body),
                             (201, None, {"paid": 2, "attempts": 1}))
            self.assertEqual(self.effects(key, "charge"), 2)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
