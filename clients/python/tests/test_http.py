"""The HTTP behaviour table (README.md) on every framework: Starlette
(ASGI), Flask and Django run the same app (apps.py) and the same cases."""
import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pg_idempotency import client, http

from apps import FRAMEWORKS


@pytest.fixture(params=sorted(FRAMEWORKS))
def make(request):
    return lambda **policy: FRAMEWORKS[request.param](http.Policy(**policy))


@pytest.fixture
def ledger(conn):
    conn.execute("CREATE TABLE IF NOT EXISTS py_ledger (note text)")
    conn.commit()
    return lambda note: conn.execute("SELECT count(*) FROM py_ledger WHERE note = %s",
                                     (note,)).fetchone()[0]


def expiry_of(conn, key, scope=""):
    """The expiry headers the key's row calls for, computed apart from the
    package: (Idempotency-Key-Expires, Idempotency-Replay-Expires or None)."""
    row = conn.execute("SELECT expires_at, CASE WHEN response_expires_at > clock_timestamp() "
                       "THEN response_expires_at END FROM idempotency.idempotency_keys "
                       "WHERE key_hash = idempotency.key_hash(%s, %s)", (scope, key)).fetchone()
    conn.commit()

    def date(at):
        if at is None:
            return None
        whole = at.replace(microsecond=0) + timedelta(seconds=1 if at.microsecond else 0)
        return whole.astimezone(timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")
    return date(row[0]), date(row[1])


def expiry_headers(reply, key_name="idempotency-key-expires"):
    return reply[1].get(key_name), reply[1].get("idempotency-replay-expires")


def from_now(header, delta):
    """True when the HTTP date header is delta from now, within 5 seconds."""
    at = datetime.strptime(header, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=timezone.utc)
    return abs(at - datetime.now(timezone.utc) - delta) < timedelta(seconds=5)


def problem_of(reply):
    status, headers, body = reply
    assert headers["content-type"] == "application/problem+json"
    doc = json.loads(body)
    assert doc["status"] == status
    return doc


def test_missing_key_400(make):
    post = make()
    reply = post("/pay", {"amount": 1}, {})
    assert reply[0] == 400
    assert problem_of(reply)["title"] == "Idempotency-Key is missing"
    assert expiry_headers(reply) == (None, None)


def test_key_optional_and_unguarded_methods(make, key):
    post = make(required=False)
    assert post("/pay", {"amount": 1}, {})[0] == 201
    assert post("/pay", {}, {}, method="GET")[0] == 200


@pytest.mark.parametrize("bad", ["k" * 401, "k" * 300, "a\tb", "a\x01b", "a\x7fb"],
                         ids=["over-400", "over-setting", "tab", "soh", "del"])
def test_invalid_key_400(make, bad):
    # over 400 characters or with a control character: refused before any
    # query; 300 characters: by the database's max_key_length (255)
    reply = make()("/pay", {"amount": 1}, {"Idempotency-Key": bad})
    assert reply[0] == 400
    assert problem_of(reply)["title"] == "Invalid Idempotency-Key"


def test_empty_key_400(make):
    reply = make()("/pay", {"amount": 1}, {"Idempotency-Key": ""})
    assert reply[0] == 400
    assert problem_of(reply)["title"] == "Idempotency-Key is missing"


def test_policy_22023_is_not_a_key_problem(make, key):
    # a ttl shorter than the lease is the server's mistake, not the client's:
    # raised to the framework (a 500; Flask's test client raises it on)
    post = make(ttl="1 second", lease="1 minute")
    try:
        status = post("/pay", {"amount": 1}, {"Idempotency-Key": key})[0]
    except psycopg.errors.InvalidParameterValue:
        status = 500
    assert status == 500


def test_key_rule_needs_no_query():
    for bad in (None, "", "k" * 401, "a\nb", "a\x00b", "a\x7fb"):
        steps = http.exchange(http.Policy(), http.Request("POST", "/pay", b"{}", "application/json", bad, ""))
        with pytest.raises(StopIteration) as stop:
            next(steps)
        assert stop.value.value.status == 400, bad
    for good in ("k" * 400, "clé ü 42", "a b"):
        assert http.key_problem(good) is None


def test_key_over_the_roles_max_key_length_400(limited, key):
    # the role's max_key_length is 40
    ran = []

    def handler(_holding):
        ran.append(1)
        return http.Answer(201, [], b"{}")

    def send(k):
        req = http.Request("POST", "/pay", b"{}", "application/json", k, "")
        return http.drive(http.exchange(http.Policy(), req), limited, handler).status

    assert send(key + "x" * (41 - len(key))) == 400
    assert send(key) == 201 and ran == [1]


def test_replay_with_stored_status_headers_body(make, key):
    post = make()
    first = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert first[0] == 201 and "idempotent-replayed" not in first[1]
    again = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert again[0] == 201
    assert again[1]["idempotent-replayed"] == "true"
    assert again[1]["location"] == "/payments/1"
    assert again[1]["content-type"] == first[1]["content-type"]
    assert json.loads(again[2]) == json.loads(first[2])     # the same run, not a second one


def test_expiry_headers_on_the_answer_and_its_replay(make, key, conn):
    post = make()
    first = post("/pay", {"amount": 5}, {"Idempotency-Key": key, "X-Tenant": "t"})
    again = post("/pay", {"amount": 5}, {"Idempotency-Key": key, "X-Tenant": "t"})
    want = expiry_of(conn, key, "t")
    assert want[0] is not None and want[1] is None     # the answer lives as long as the key
    assert expiry_headers(first) == expiry_headers(again) == want


def test_answer_gone_after_response_ttl_410(make, key, conn):
    # extension 1.6: replayed for response_ttl, then 410; the handler does
    # not run again
    post = make(response_ttl="1 hour")
    first = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert first[0] == 201
    again = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert again[1]["idempotent-replayed"] == "true"
    # kept for an hour of the key's day: Idempotency-Replay-Expires
    want = expiry_of(conn, key)
    assert expiry_headers(first) == expiry_headers(again) == want
    assert from_now(want[1], timedelta(hours=1))
    conn.execute("UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second' "
                 "WHERE key_hash = idempotency.key_hash('', %s)", (key,))
    conn.commit()
    reply = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert reply[0] == 410
    problem_of(reply)
    assert expiry_headers(reply) == (want[0], None)         # the key's time; the answer is gone
    assert post("/pay", {"amount": 6}, {"Idempotency-Key": key})[0] == 422


def test_other_request_same_key_422(make, key, conn):
    post = make()
    assert post("/pay", {"amount": 5}, {"Idempotency-Key": key})[0] == 201
    reply = post("/pay", {"amount": 6}, {"Idempotency-Key": key})
    assert reply[0] == 422
    problem_of(reply)
    assert expiry_headers(reply) == expiry_of(conn, key)


def test_body_whitespace_and_key_order_do_not_matter(make, key):
    post = make()
    post("/pay", {"amount": 5, "note": "a"}, {"Idempotency-Key": key})
    assert post("/pay", {"note": "a", "amount": 5}, {"Idempotency-Key": key})[0] == 201


def test_in_flight_409_retry_after(make, key, conn):
    post = make(lease="40 seconds")
    body = {"amount": 5}
    fp = http.default_fingerprint(http.Request("POST", "/pay", json.dumps(body).encode(),
                                               "application/json", key, ""))
    assert client.claim(conn, key, fp, "", None, "40 seconds").outcome == "claimed"
    conn.commit()
    reply = post("/pay", body, {"Idempotency-Key": key})
    assert reply[0] == 409
    assert 39 <= int(reply[1]["retry-after"]) <= 40
    problem_of(reply)
    assert expiry_headers(reply) == expiry_of(conn, key)    # as the holder's claim left it


def _pay_fingerprint(key, body):
    return http.default_fingerprint(http.Request("POST", "/pay", json.dumps(body).encode(),
                                                 "application/json", key, ""))


def test_wait_gets_the_holders_answer_not_409(make, key, conn):
    # extension 1.6: a duplicate of a request in flight waits for its holder
    post = make(wait="10 seconds")
    body = {"amount": 5}
    holder = client.claim(conn, key, _pay_fingerprint(key, body), "", None, "40 seconds")
    conn.commit()
    answer = {"headers": [["content-type", "application/json"]], "body": '{"paid": 5, "run": 0}'}

    def complete_later():
        time.sleep(0.5)
        with psycopg.connect() as other:
            client.complete(other, key, holder.fence, answer, 201)
    t = threading.Thread(target=complete_later)
    t.start()
    start = time.monotonic()
    reply = post("/pay", body, {"Idempotency-Key": key})
    waited = time.monotonic() - start
    t.join()
    assert waited >= 0.5
    assert (reply[0], reply[1]["idempotent-replayed"], json.loads(reply[2])) == (201, "true", {"paid": 5, "run": 0})
    assert expiry_headers(reply) == expiry_of(conn, key)


def test_wait_that_runs_out_409_retry_after(make, key, conn):
    post = make(wait="300 milliseconds")
    body = {"amount": 5}
    assert client.claim(conn, key, _pay_fingerprint(key, body), "", None, "40 seconds").outcome == "claimed"
    conn.commit()
    start = time.monotonic()
    reply = post("/pay", body, {"Idempotency-Key": key})
    assert time.monotonic() - start >= 0.3
    assert reply[0] == 409
    assert 39 <= int(reply[1]["retry-after"]) <= 40
    problem_of(reply)


def test_expiry_headers_renamed_or_left_out(make, key, conn):
    quiet = make(response_ttl="1 hour", key_expires_header=None, replay_expires_header=None)
    reply = quiet("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert reply[0] == 201 and expiry_headers(reply) == (None, None)
    renamed = make(response_ttl="1 hour", key_expires_header="X-Key-Expires")
    other = key + "-renamed"
    reply = renamed("/pay", {"amount": 5}, {"Idempotency-Key": other})
    want = expiry_of(conn, other)
    assert expiry_headers(reply, "x-key-expires") == want and want[1] is not None
    assert "idempotency-key-expires" not in reply[1]


def test_scope_per_tenant(make, key):
    post = make()
    a = post("/pay", {"amount": 5}, {"Idempotency-Key": key, "X-Tenant": "a"})
    b = post("/pay", {"amount": 5}, {"Idempotency-Key": key, "X-Tenant": "b"})
    assert a[0] == b[0] == 201
    assert "idempotent-replayed" not in b[1]
    assert json.loads(a[2])["run"] != json.loads(b[2])["run"]


def test_scope_that_raises_500_problem_nothing_claimed(make, key, conn):
    # issue 45: a scope reading a user that no authentication middleware set
    post = make(scope=lambda request: request.user.id)
    reply = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert reply[0] == 500
    problem_of(reply)
    assert client.lookup(conn, key) is None


def test_replay_of_the_node_packages_old_format(make, key, conn):
    # {"headers": {...}, "body": <JSON>}: what pg-idempotency 0.1.0 stored
    post = make()
    fp = http.default_fingerprint(http.Request("POST", "/pay", json.dumps({"amount": 5}).encode(),
                                               "application/json", key, ""))
    r = client.claim(conn, key, fp)
    client.complete(conn, key, r.fence, {"headers": {"content-type": "application/json", "x-old": "yes"},
                                         "body": {"paid": 5}}, 201)
    conn.commit()
    reply = post("/pay", {"amount": 5}, {"Idempotency-Key": key})
    assert (reply[0], reply[2], reply[1]["x-old"], reply[1]["idempotent-replayed"]) == (201, b'{"paid":5}', "yes", "true")


def test_custom_fingerprint(make, key):
    post = make(fingerprint=lambda req: {"path": req.path})     # the body is not compared
    assert post("/pay", {"amount": 5}, {"Idempotency-Key": key})[0] == 201
    assert post("/pay", {"amount": 6}, {"Idempotency-Key": key})[1]["idempotent-replayed"] == "true"


def test_retention(make, key, conn):
    reply = make(ttl="2 hours")("/pay", {"amount": 5}, {"Idempotency-Key": key})
    window = conn.execute("SELECT expires_at - updated_at FROM idempotency.idempotency_keys "
                          "WHERE key_hash = idempotency.key_hash('', %s)", (key,)).fetchone()[0]
    assert window.total_seconds() == 7200
    assert from_now(reply[1]["idempotency-key-expires"], timedelta(hours=2))


def test_handler_error_500_then_retry_runs_again(make, key, conn):
    post = make()
    # the framework may answer the exception itself (Flask, Django); when
    # it reaches the middleware (Starlette) the answer is problem+json
    reply = post("/boom", {}, {"Idempotency-Key": key})
    assert reply[0] == 500
    if "problem" in reply[1]["content-type"]:
        assert problem_of(reply)["title"] == "Internal Server Error"
    row = client.lookup(conn, key)
    assert (row["status"], row["retryable"]) == ("failed", True)
    assert post("/boom", {}, {"Idempotency-Key": key})[0] == 500
    assert client.lookup(conn, key)["attempts"] == 2


def test_one_transaction_commits_with_answer(make, key, ledger):
    post = make(one_transaction=True)
    note = uuid.uuid4().hex
    assert post("/tx", {"note": note}, {"Idempotency-Key": key})[0] == 201
    assert ledger(note) == 1
    replay = post("/tx", {"note": note}, {"Idempotency-Key": key})
    assert replay[1]["idempotent-replayed"] == "true"
    assert ledger(note) == 1


def test_one_transaction_5xx_rolls_back_claim_and_work(make, key, ledger, conn):
    post = make(one_transaction=True)
    note = uuid.uuid4().hex
    reply = post("/tx", {"note": note, "fail": True}, {"Idempotency-Key": key})
    assert reply[0] == 500
    assert ledger(note) == 0
    assert client.lookup(conn, key) is None          # the next try claims afresh
    assert expiry_headers(reply) == (None, None)     # no key, no expiry


def test_phased_5xx_rolls_back_uncommitted_work(make, key, ledger, conn):
    post = make()
    note = uuid.uuid4().hex
    assert post("/tx", {"note": note, "fail": True}, {"Idempotency-Key": key})[0] == 500
    assert ledger(note) == 0
    assert client.lookup(conn, key)["status"] == "failed"


def test_lease_lost_at_complete_409(key, conn):
    policy = http.Policy()
    req = http.Request("POST", "/pay", b"{}", "application/json", key, "")
    steps = http.exchange(policy, req)

    def steal(_holding):
        # another holder takes the key over before the answer is stored
        with psycopg.connect() as other:
            other.execute("UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1s' "
                          "WHERE key_hash = idempotency.key_hash('', %s)", (key,))
            assert client.claim(other, key, http.default_fingerprint(req)).outcome == "resumed"
        return http.Answer(201, [], b"{}")

    answer = http.drive(steps, conn, steal)
    assert answer.status == 409 and ("retry-after", "1") in answer.headers


def test_checkpoint_then_resume(make, key, conn):
    post = make()
    first = post("/resume", {}, {"Idempotency-Key": key})
    assert first[0] == 503
    assert client.lookup(conn, key)["recovery_point"] == "charged"
    conn.commit()
    again = post("/resume", {}, {"Idempotency-Key": key})
    assert (again[0], json.loads(again[2])) == (201, {"resumed_from": "charged", "attempts": 2})
    replay = post("/resume", {}, {"Idempotency-Key": key})
    assert replay[1]["idempotent-replayed"] == "true"


def test_pool_gets_its_connections_back_clean(key, caplog):
    # psycopg_pool warns when a connection comes back inside a transaction
    import flask
    from psycopg_pool import ConnectionPool

    from pg_idempotency.flask import Idempotency

    app = flask.Flask("pooled")

    @app.post("/pay")
    def pay():
        return {"ok": True}, 201

    @app.post("/boom")
    def boom():
        return {"error": "down"}, 503

    with ConnectionPool("", min_size=1, max_size=1) as pool:
        Idempotency(app, pool)
        tc = app.test_client()
        for path, k in (("/pay", key), ("/pay", key), ("/pay", key + "-2"), ("/boom", key + "-3"),
                        ("/pay", "")):
            tc.post(path, json={"a": 1}, headers={"Idempotency-Key": k} if k else {})
        with pool.connection() as c:
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
