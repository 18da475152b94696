"""The sync and async clients against the extension: every outcome of
claim, the holder functions, execute, tokens, transition, the inbox and
the version check (doc/reference.md)."""
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pg_idempotency import ExtensionVersionError, _queries, aio, client


def test_claim_complete_replay(conn, key):
    r = client.claim(conn, key, {"amount": 5}, "shop")
    assert (r.outcome, r.recovery_point, r.attempts) == ("claimed", "started", 1)
    assert client.claim(conn, key, {"amount": 5}, "shop").outcome == "in_progress"
    assert client.claim(conn, key, {"amount": 6}, "shop").outcome == "mismatch"
    client.complete(conn, key, r.fence, {"paid": 5}, 201, "shop")
    again = client.claim(conn, key, {"amount": 5}, "shop")
    assert (again.outcome, again.response_code, again.response_body, again.fence) == \
        ("replay", 201, {"paid": 5}, None)
    assert client.lookup(conn, key, "shop")["status"] == "completed"
    assert client.lookup(conn, key, "other") is None


def test_in_progress_retry_after(conn, key):
    client.claim(conn, key, None, lease=timedelta(seconds=30))
    busy = client.claim(conn, key)
    assert busy.outcome == "in_progress"
    assert 29 <= busy.retry_after_seconds() <= 30


def test_fail_retryable_resumes_from_checkpoint(conn, key):
    r = client.claim(conn, key, {"x": 1})
    client.checkpoint(conn, key, r.fence, "charged")
    client.fail(conn, key, r.fence, {"error": "timeout"}, 503, True)
    again = client.claim(conn, key, {"x": 1})
    assert (again.outcome, again.recovery_point, again.attempts) == ("resumed", "charged", 2)
    assert again.fence > r.fence
    with pytest.raises(psycopg.Error) as lost:        # the old fence no longer holds it
        client.complete(conn, key, r.fence, {})
    assert lost.value.sqlstate == "55000"


def test_fail_final_and_release(conn, key):
    r = client.claim(conn, key)
    client.fail(conn, key, r.fence, {"error": "card declined"}, 402, False)
    final = client.claim(conn, key)
    assert (final.outcome, final.response_code) == ("replay", 402)
    other = key + "-r"
    r2 = client.claim(conn, other)
    client.release(conn, other, r2.fence)
    assert client.claim(conn, other).outcome == "claimed"


def test_gone_after_response_ttl(conn, key):
    # extension 1.6: the answer is kept for response_ttl; then a claim gets
    # the status and code, no body, and nothing runs again
    r = client.claim(conn, key, {"a": 1})
    client.complete(conn, key, r.fence, {"paid": 1}, 201, response_ttl="1 hour")
    row = client.lookup(conn, key)
    assert row["response_expires_at"] is not None
    assert client.claim(conn, key, {"a": 1}).outcome == "replay"
    conn.execute("UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second' "
                 "WHERE key_hash = idempotency.key_hash('', %s)", (key,))
    gone = client.claim(conn, key, {"a": 1})
    assert (gone.outcome, gone.fence, gone.status, gone.response_code, gone.response_body) == \
        ("gone", None, "completed", 201, None)
    assert client.claim(conn, key, {"a": 2}).outcome == "mismatch"


def test_response_ttl_final_fail_and_execute(conn, key):
    r = client.claim(conn, key)
    with pytest.raises(psycopg.Error) as e:             # a retryable failure keeps no answer
        client.fail(conn, key, r.fence, None, 503, True, response_ttl="1 hour")
    assert e.value.sqlstate == "22023"
    conn.rollback()
    r = client.claim(conn, key)
    client.fail(conn, key, r.fence, {"error": "declined"}, 402, False, response_ttl=timedelta(hours=1))
    assert client.lookup(conn, key)["response_expires_at"] is not None
    other = key + "-x"
    first = client.execute(conn, other, None, "SELECT 7", response_ttl="1 hour")
    assert (first.outcome, first.response_body) == ("claimed", 7)
    assert client.lookup(conn, other)["response_expires_at"] is not None


def test_invalid_key_is_22023(conn):
    with pytest.raises(psycopg.Error) as e:
        client.claim(conn, "")
    assert e.value.sqlstate == "22023"


def test_execute_runs_once(conn, key):
    conn.execute("CREATE TEMP TABLE py_payments (id serial, amount int)")
    stmt = "INSERT INTO py_payments (amount) VALUES ($1::int) RETURNING amount"
    first = client.execute(conn, key, {"a": 7}, stmt, ["7"])
    second = client.execute(conn, key, {"a": 7}, stmt, ["7"])
    assert (first.outcome, first.response_body) == ("claimed", 7)
    assert (second.outcome, second.response_body) == ("replay", 7)
    assert conn.execute("SELECT count(*) FROM py_payments").fetchone()[0] == 1


def test_tokens(conn):
    token = client.issue_token(conn, "s")
    assert client.consume_token(conn, token, "other") is False
    assert client.consume_token(conn, token, "s") is True
    assert client.consume_token(conn, token, "s") is False


def test_transition(conn, key):
    conn.execute("CREATE TEMP TABLE py_orders (id text PRIMARY KEY, state text, note text)")
    conn.execute("INSERT INTO py_orders VALUES (%s, 'PENDING', NULL)", (key,))
    r = client.transition(conn, "py_orders", "id", key, "state", "PENDING", "PAID", {"note": "ok"})
    assert (r.outcome, r.current_state) == ("applied", "PAID")
    assert client.transition(conn, "py_orders", "id", key, "state", "PENDING", "PAID").outcome == "already"
    r = client.transition(conn, "py_orders", "id", key, "state", "PENDING", "CANCELLED")
    assert (r.outcome, r.current_state) == ("rejected", "PAID")
    assert client.transition(conn, "py_orders", "id", "none", "state", "A", "B").outcome == "not_found"
    assert conn.execute("SELECT note FROM py_orders").fetchone()[0] == "ok"


def test_inbox(conn, key):
    assert client.process_once(conn, "billing", key) is True
    assert client.process_once(conn, "billing", key) is False
    assert client.process_once_batch(conn, "billing", [key, "b" + key, "b" + key, "c" + key]) == \
        ["b" + key, "c" + key]


def test_version(conn):
    assert client.check_version(conn) >= "1.3"


def test_old_version_is_a_clear_error():
    with pytest.raises(ExtensionVersionError, match="version 1.2; pg_idempotency needs 1.3"):
        _queries._version([("1.2",)])
    with pytest.raises(ExtensionVersionError, match="not installed"):
        _queries._version([(None,)])


def test_plain_edition_version_is_read(conn):
    # the plain edition has no pg_extension row: its version is in a table
    # (rolled back by the fixture)
    conn.execute("DROP EXTENSION idempotency CASCADE")
    conn.execute("CREATE SCHEMA IF NOT EXISTS idempotency")
    conn.execute("CREATE TABLE idempotency.plain_version (version text)")
    conn.execute("INSERT INTO idempotency.plain_version VALUES ('1.3')")
    assert client.check_version(conn) == "1.3"
    conn.execute("UPDATE idempotency.plain_version SET version = '1.1'")
    with pytest.raises(ExtensionVersionError, match="version 1.1"):
        client.check_version(conn)


def test_no_sql_from_arguments(conn):
    evil = "x'); DROP TABLE idempotency.idempotency_keys; --"
    assert client.claim(conn, evil).outcome == "claimed"
    assert client.lookup(conn, evil)["idempotency_key"] == evil


async def test_async_client(aconn, key):
    assert await aio.check_version(aconn) >= "1.3"
    r = await aio.claim(aconn, key, {"a": 1})
    assert r.outcome == "claimed"
    await aio.complete(aconn, key, r.fence, {"ok": True})
    assert (await aio.claim(aconn, key, {"a": 1})).outcome == "replay"
    assert await aio.process_once_batch(aconn, "c", [key, key]) == [key]
    token = await aio.issue_token(aconn)
    assert await aio.consume_token(aconn, token) is True


def _later(seconds, fn):
    """fn() on another thread after seconds; join() the returned thread."""
    import threading
    import time

    def run():
        time.sleep(seconds)
        fn()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_claim_wait(conn, key):
    # extension 1.6: a duplicate waits for the holder and answers as a claim after it
    import time
    with psycopg.connect() as holder:
        r = client.claim(holder, key, {"a": 1}, lease="30 seconds")
        holder.commit()
        t = _later(0.3, lambda: (client.complete(holder, key, r.fence, {"paid": 1}, 201), holder.commit()))
        start = time.monotonic()
        waited = client.claim(conn, key, {"a": 1}, wait="10 seconds")
        t.join()
        assert time.monotonic() - start >= 0.3
        assert (waited.outcome, waited.response_code, waited.response_body) == ("replay", 201, {"paid": 1})
        conn.commit()
        # the holder releases: the waiter claims
        other = key + "-r"
        h = client.claim(holder, other, lease="30 seconds")
        holder.commit()
        t = _later(0.2, lambda: (client.release(holder, other, h.fence), holder.commit()))
        claimed = client.claim(conn, other, wait=timedelta(seconds=10))
        t.join()
        assert claimed.outcome == "claimed" and claimed.fence > h.fence
        conn.commit()
        # the holder works on: in_progress when the wait runs out
        busy_key = key + "-b"
        client.claim(holder, busy_key, lease="30 seconds")
        holder.commit()
        start = time.monotonic()
        busy = client.claim(conn, busy_key, wait="300 milliseconds")
        assert time.monotonic() - start >= 0.3
        assert busy.outcome == "in_progress" and 29 <= busy.retry_after_seconds() <= 30
        conn.commit()
        # execute waits too
        ex_key = key + "-x"
        h = client.claim(holder, ex_key, lease="30 seconds")
        holder.commit()
        t = _later(0.2, lambda: (client.complete(holder, ex_key, h.fence, {"done": True}), holder.commit()))
        ex = client.execute(conn, ex_key, None, "SELECT 1", wait="10 seconds")
        t.join()
        assert (ex.outcome, ex.response_body) == ("replay", {"done": True})


def _expires_at(conn, key, scope=""):
    """The key's expires_at and response_expires_at, from the table."""
    return conn.execute("SELECT expires_at, response_expires_at FROM idempotency.idempotency_keys "
                        "WHERE key_hash = idempotency.key_hash(%s, %s)", (scope, key)).fetchone()


def _rounded_up(at):
    return at if at.microsecond == 0 else at.replace(microsecond=0) + timedelta(seconds=1)


def test_key_expiry(conn, key):
    assert client.key_expiry(conn, key) is None
    r = client.claim(conn, key, None, "s", "2 hours")
    held = client.key_expiry(conn, key, "s")
    assert (held.expires_at, held.response_expires_at) == (_rounded_up(_expires_at(conn, key, "s")[0]), None)
    client.complete(conn, key, r.fence, {}, 200, "s", "3 hours", response_ttl="1 hour")
    row = _expires_at(conn, key, "s")
    done = client.key_expiry(conn, key, "s")
    assert (done.expires_at, done.response_expires_at) == (_rounded_up(row[0]), _rounded_up(row[1]))
    now = datetime.now(timezone.utc)
    assert abs((done.expires_at - now) - timedelta(hours=3)) < timedelta(seconds=5)
    assert abs((done.response_expires_at - now) - timedelta(hours=1)) < timedelta(seconds=5)
    assert client.key_expiry(conn, key, "other") is None
    # the answer gone: no response_expires_at, the key's time stays
    conn.execute("UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second' "
                 "WHERE key_hash = idempotency.key_hash('s', %s)", (key,))
    assert client.key_expiry(conn, key, "s") == _queries.KeyExpiry(done.expires_at, None)


def test_extension_1_5_without_the_1_6_arguments(conn, key):
    # a database with extension 1.5: the calls without response_ttl and
    # wait work, key_expiry has no response_expires_at, and the middleware
    # answers with the key's expiry
    from pg_idempotency import http
    name = conn.execute("SELECT current_database() || '_v1_5'").fetchone()[0]
    conn.rollback()
    conn.autocommit = True
    # WITH (FORCE): a pooler keeps server connections to it after "old" closes
    conn.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
    conn.execute('CREATE DATABASE "%s"' % name)
    try:
        with psycopg.connect(dbname=name) as old:
            old.execute("CREATE EXTENSION idempotency VERSION '1.5'")
            assert client.check_version(old) == "1.5"
            r = client.claim(old, key, {"a": 1}, ttl="1 hour")
            client.complete(old, key, r.fence, {"ok": 1}, 201, ttl="1 hour")
            assert client.claim(old, key, {"a": 1}).outcome == "replay"
            assert client.execute(old, key + "-x", None, "SELECT 2").outcome == "claimed"
            expiry = client.key_expiry(old, key)
            assert expiry.response_expires_at is None
            assert abs(expiry.expires_at - datetime.now(timezone.utc) - timedelta(hours=1)) < timedelta(seconds=5)
            old.commit()
            with pytest.raises(psycopg.Error) as e:     # wait is 1.6's
                client.claim(old, key + "-w", wait="1 second")
            assert e.value.sqlstate == "42883"
            old.rollback()
            req = http.Request("POST", "/p", b"{}", "application/json", key + "-h", "")
            answers = [http.drive(http.exchange(http.Policy(ttl="1 hour"), req), old,
                                  lambda h: http.Answer(201, [], b"{}")) for _ in range(2)]
            assert [a.status for a in answers] == [201, 201]
            headers = [dict(a.headers) for a in answers]
            assert headers[1]["idempotent-replayed"] == "true"
            assert headers[0]["idempotency-key-expires"] == headers[1]["idempotency-key-expires"]
            assert "idempotency-replay-expires" not in headers[0]
    finally:
        conn.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)


async def test_async_claim_wait(aconn, key):
    import asyncio
    holder = await psycopg.AsyncConnection.connect()
    try:
        r = await aio.claim(holder, key, {"a": 1}, lease="30 seconds")
        await holder.commit()

        async def complete_later():
            await asyncio.sleep(0.3)
            await aio.complete(holder, key, r.fence, {"paid": 2})
            await holder.commit()
        task = asyncio.ensure_future(complete_later())
        waited = await aio.claim(aconn, key, {"a": 1}, wait="10 seconds")
        await task
        assert (waited.outcome, waited.response_body) == ("replay", {"paid": 2})
        expiry = await aio.key_expiry(aconn, key)
        assert expiry is not None and expiry.response_expires_at is None
    finally:
        await holder.close()


def test_calls_are_never_prepared(key):
    # psycopg prepares a statement run 5 times on a connection (its
    # prepare_threshold) under a name that only that server session knows;
    # behind a transaction pooler the next transaction may run on another.
    # The package's statements are never prepared, on a connection left at
    # psycopg's defaults.
    import asyncio
    with psycopg.connect() as plain:
        for i in range(8):
            client.claim(plain, "%s-%d" % (key, i))
            client.lookup(plain, key)
            plain.commit()
        assert plain.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0

    async def run():
        async with await psycopg.AsyncConnection.connect() as plain:
            for i in range(8):
                await aio.claim(plain, "%s-a%d" % (key, i))
                await plain.commit()
            cur = await plain.execute("SELECT count(*) FROM pg_prepared_statements")
            assert (await cur.fetchone())[0] == 0
    asyncio.run(run())
