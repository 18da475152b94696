"""http.py without a framework: the stored answer's shape and the cases
no framework test reaches."""
import json
from datetime import datetime, timedelta, timezone

import pytest

from pg_idempotency import _queries as q
from pg_idempotency import http


def test_stored_answer_round_trip_keeps_listed_headers_only():
    answer = http.Answer(201, [("Content-Type", "application/json"), ("Location", "/p/1"),
                               ("Set-Cookie", "session=1")], b'{"ok": true}')
    doc = http.stored(answer, ("content-type", "location"))
    assert doc == {"headers": [["Content-Type", "application/json"], ["Location", "/p/1"]],
                   "body": '{"ok": true}'}
    again = http.replayed(201, json.loads(json.dumps(doc)))
    assert again.body == answer.body
    assert ("idempotent-replayed", "true") in again.headers
    assert all(k != "Set-Cookie" for k, _ in again.headers)


def test_binary_body_is_stored_as_base64():
    answer = http.Answer(200, [("content-type", "application/octet-stream")], b"\xff\x00\xfe")
    doc = http.stored(answer, ("content-type",))
    assert "body" not in doc
    assert http.replayed(200, doc).body == b"\xff\x00\xfe"


def test_answer_stored_by_another_client_replays_as_json():
    again = http.replayed(200, {"paid": 5})
    assert json.loads(again.body) == {"paid": 5}
    assert ("content-type", "application/json") in again.headers


def test_no_scope_is_401_and_touches_nothing():
    steps = http.exchange(http.Policy(), http.Request("POST", "/", b"", "", "k", None))
    try:
        next(steps)
        raise AssertionError("a step was asked for")
    except StopIteration as stop:
        assert stop.value.status == 401


def test_fingerprint_parses_json_only():
    text = http.default_fingerprint(http.Request("POST", "/a", b"x=1", "text/plain", "k", ""))
    assert text == {"method": "POST", "path": "/a", "body": "x=1"}
    broken = http.default_fingerprint(http.Request("POST", "/a", b"{", "application/json", "k", ""))
    assert broken["body"] == "{"


def test_a_bad_policy_is_not_blamed_on_the_client(conn):
    # 22023 for a ttl shorter than the lease is the server's configuration,
    # not a 400 for the client
    import psycopg
    import pytest
    steps = http.exchange(http.Policy(ttl="1 second", lease="1 minute"),
                          http.Request("POST", "/", b"", "", "k-policy", ""))
    with pytest.raises(psycopg.Error) as e:
        http.drive(steps, conn, lambda h: http.Answer(200, [], b""))
    assert e.value.sqlstate == "22023"


def test_answer_too_large_to_store_is_a_retryable_500(limited, key):
    # the role's max_response_bytes is 100
    from pg_idempotency import client
    steps = http.exchange(http.Policy(), http.Request("POST", "/", b"", "", key, ""))
    answer = http.drive(steps, limited, lambda h: http.Answer(200, [], b"x" * 500))
    assert answer.status == 500
    row = client.lookup(limited, key)
    assert (row["status"], row["retryable"]) == ("failed", True)


def test_response_ttl_is_sent_by_name_only_when_given():
    # without it the calls are those of 1.3 to 1.5, which have no response_ttl
    for query in (q.complete("k", 1, {}), q.fail("k", 1, retryable=False), q.execute("k", None, "SELECT 1")):
        assert "response_ttl" not in query.sql
        assert query.sql.count("%s") == len(query.params)
    given = (q.complete("k", 1, {}, response_ttl="1 hour"),
             q.fail("k", 1, None, 402, False, response_ttl=timedelta(minutes=5)),
             q.execute("k", None, "SELECT 1", response_ttl="2 hours"))
    for query, value in zip(given, ("1 hour", "300.000000 seconds", "2 hours")):
        assert query.sql.endswith(", response_ttl => %s::interval)")
        assert query.sql.count("%s") == len(query.params) and query.params[-1] == value


def test_gone_is_410_and_runs_nothing():
    gone = q.ClaimResult("gone", None, "completed", 201, None, "started", 1, None)
    assert not gone.holds
    answer = http.answer_for(gone)
    assert answer.status == 410
    assert ("content-type", "application/problem+json") in answer.headers
    assert json.loads(answer.body)["status"] == 410


def test_wait_is_sent_by_name_only_when_given():
    # without it claim and execute are the calls of 1.3 to 1.5
    for query in (q.claim("k", None, "", "1 day", "1 minute"), q.execute("k", None, "SELECT 1")):
        assert "wait" not in query.sql
        assert query.sql.count("%s") == len(query.params)
    claim = q.claim("k", wait=timedelta(seconds=2))
    assert claim.sql.endswith(", %s::interval, wait => %s::interval)")
    assert claim.params[-1] == "2.000000 seconds" and claim.sql.count("%s") == len(claim.params)
    both = q.execute("k", None, "SELECT 1", response_ttl="1 hour", wait="3 seconds")
    assert both.sql.endswith(", response_ttl => %s::interval, wait => %s::interval)")
    assert both.params[-2:] == ("1 hour", "3 seconds") and both.sql.count("%s") == len(both.params)


def test_http_date_is_an_imf_fixdate_in_gmt():
    at = datetime(2031, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    assert http.http_date(at) == "Mon, 03 Feb 2031 02:05:06 GMT"


def test_expiry_headers_off_read_nothing():
    policy = http.Policy(key_expires_header=None, replay_expires_header=None)
    with pytest.raises(StopIteration) as stop:
        next(http.expiry_headers(policy, "k", ""))
    assert stop.value.value == []


def test_expiry_headers_named_by_the_policy():
    expiry = q.KeyExpiry(datetime(2031, 2, 3, 4, 5, 6, tzinfo=timezone.utc),
                         datetime(2031, 2, 3, 1, 0, 0, tzinfo=timezone.utc))

    def headers(policy, found):
        steps = http.expiry_headers(policy, "k", "tenant")
        query = next(steps)
        assert query.params == ("k", "tenant")
        with pytest.raises(StopIteration) as stop:
            steps.send(found)
        return stop.value.value

    key = ("idempotency-key-expires", "Mon, 03 Feb 2031 04:05:06 GMT")
    replay = ("idempotency-replay-expires", "Mon, 03 Feb 2031 01:00:00 GMT")
    assert headers(http.Policy(), expiry) == [key, replay]
    assert headers(http.Policy(), q.KeyExpiry(expiry.expires_at, None)) == [key]
    assert headers(http.Policy(), None) == []
    assert headers(http.Policy(key_expires_header="X-Key-Until", replay_expires_header=None), expiry) == \
        [("x-key-until", key[1])]


def test_expiry_read_that_fails_leaves_the_headers_out():
    import psycopg
    steps = http.expiry_headers(http.Policy(), "k", "")
    next(steps)
    assert steps.throw(psycopg.OperationalError("gone away")) == http.ROLLBACK
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == []


def test_server_connections_bound_the_sleeping_claims():
    # behind a transaction pooler a sleeping claim keeps one of its server
    # connections: at most server_connections minus one sleep, whatever the
    # pool's max_size (which bounds them alone without it)
    class Pool:
        max_size = 10

    pools = []                      # alive: the places are counted by the pool's id
    for servers, sleepers in ((2, 1), (4, 3), (None, 9), (20, 9)):
        pool, policy = Pool(), http.Policy(wait="1 second", server_connections=servers)
        pools.append(pool)
        places = [http._waiting_policy(policy, pool) for _ in range(12)]
        assert [sleeping for _, sleeping in places].count(True) == sleepers, servers
        assert all(p.wait == ("1 second" if sleeping else None) for p, sleeping in places)
    unbounded = http.Connect()      # a connection per request: only server_connections bounds it
    assert [http._waiting_policy(http.Policy(wait="1 second", server_connections=3), unbounded)[1]
            for _ in range(4)] == [True, True, False, False]
