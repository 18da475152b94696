"""app.py: a payment API on pg_idempotency (Flask).  POST /payments needs
an Idempotency-Key; in the one-transaction mode the payments row and the
stored answer commit together, so a retry gets the first answer back and
never pays twice.  GET /payments/<id> reads a payment.

Connection: the usual PG* variables.  `python3 app.py` serves
127.0.0.1:$PORT (5000) with Flask's development server.
"""
import os

import flask
from psycopg_pool import ConnectionPool

from pg_idempotency.flask import Idempotency, connection

SCHEMA = """CREATE TABLE IF NOT EXISTS payments (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  amount integer NOT NULL CHECK (amount > 0),
  currency text NOT NULL,
  payee text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now())"""
COLUMNS = "id::text, amount, currency, payee"


def create_app(pool: ConnectionPool) -> flask.Flask:
    with pool.connection() as conn:
        conn.execute(SCHEMA)
    app = flask.Flask(__name__)
    Idempotency(app, pool, one_transaction=True, ttl="1 day")

    @app.post("/payments")
    def pay():
        body = flask.request.get_json(silent=True) or {}
        amount, currency, payee = body.get("amount"), body.get("currency"), body.get("payee")
        if type(amount) is not int or amount <= 0 or not isinstance(currency, str) or not isinstance(payee, str):
            return {"error": "amount (a positive integer), currency and payee are required"}, 400
        with connection().cursor() as cur:  # the transaction that stores the answer
            cur.execute("INSERT INTO payments (amount, currency, payee) VALUES (%s, %s, %s)"
                        " RETURNING " + COLUMNS, (amount, currency, payee))
            row = cur.fetchone()
        paid = dict(zip(("id", "amount", "currency", "payee"), row))
        return paid, 201, {"Location": "/payments/" + paid["id"]}

    @app.get("/payments/<int:payment_id>")
    def read(payment_id: int):
        with pool.connection() as conn:
            row = conn.execute("SELECT " + COLUMNS + " FROM payments WHERE id = %s",
                               (payment_id,)).fetchone()
        if row is None:
            return {"error": "no such payment"}, 404
        return dict(zip(("id", "amount", "currency", "payee"), row))

    return app


if __name__ == "__main__":
    # prepare_threshold None: the handlers' queries are never prepared, so
    # the app also runs behind a transaction pooler (the package's README)
    create_app(ConnectionPool("", kwargs={"prepare_threshold": None})).run(
        "127.0.0.1", int(os.environ.get("PORT", "5000")))
