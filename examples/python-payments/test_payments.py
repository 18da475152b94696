"""test_payments.py: the payment API over real HTTP on 127.0.0.1 (a
werkzeug server in a thread) against a real database (PG* variables): a
payment, its retry, a different body under the same key, a request
without a key, and one payments row in the end.
"""
import json
import threading
import urllib.error
import urllib.request
import uuid

import pytest
from psycopg_pool import ConnectionPool
from werkzeug.serving import make_server

from app import create_app


@pytest.fixture(scope="module")
def api():
    pool = ConnectionPool("", min_size=1, max_size=4, kwargs={"prepare_threshold": None})
    server = make_server("127.0.0.1", 0, create_app(pool), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_port, pool
    server.shutdown()
    thread.join()
    pool.close()


def call(url, body=None, key=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def test_payments_with_an_idempotency_key(api):
    base, pool = api
    payee, key = "payee-%s" % uuid.uuid4(), str(uuid.uuid4())  # this run's only
    payment = {"amount": 4200, "currency": "EUR", "payee": payee}

    status, headers, paid = call(base + "/payments", payment, key)
    assert status == 201 and headers["Idempotent-Replayed"] is None, paid
    assert paid["amount"] == 4200 and headers["Location"] == "/payments/" + paid["id"]

    status, headers, again = call(base + "/payments", payment, key)
    assert status == 201 and headers["Idempotent-Replayed"] == "true"
    assert again == paid

    status, headers, _ = call(base + "/payments", dict(payment, amount=9900), key)
    assert status == 422 and headers["Content-Type"].startswith("application/problem+json")

    status, _, _ = call(base + "/payments", payment)
    assert status == 400

    with pool.connection() as conn:
        rows = conn.execute("SELECT count(*) FROM payments WHERE payee = %s", (payee,)).fetchone()
    assert rows[0] == 1, "exactly one payments row"

    status, _, read = call(base + "/payments/" + paid["id"])
    assert status == 200 and read == paid
    assert call(base + "/payments/0")[0] == 404
