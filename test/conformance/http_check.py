#!/usr/bin/env python3
"""test/conformance/http_check.py BASE_URL: every case of http.json against
the application at BASE_URL (http://127.0.0.1:PORT: a README quick start
serving POST /payments as http.json's "app" says), over real HTTP.  Prints
one line per case and exits 1 at the first answer that differs.

As a module, run(send) does the same through any transport: send(method,
path, headers, body) returns (status, headers, body bytes), headers with a
get(name) that ignores case (the Python package's suite passes its own)."""
import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "http.json")
PATH = "/payments"


def load():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def key_of(template, fresh):
    """The Idempotency-Key a step sends: {key} the case's fresh key, {k*N} N k's."""
    if template is None:
        return None
    return re.sub(r"\{k\*(\d+)\}", lambda m: "k" * int(m.group(1)), template.replace("{key}", fresh))


def exchange(send, request, fresh):
    headers = {"Content-Type": "application/json"}
    key = key_of(request.get("key"), fresh)
    if key is not None:
        headers["Idempotency-Key"] = key
    user = request.get("user", "alice")
    if user is not None:
        headers["X-User"] = user
    method = request.get("method", "POST")
    if "body_text" in request:
        body = request["body_text"].encode()
    elif method == "GET":
        body = None
    else:
        body = json.dumps(request.get("body", {})).encode()
    return send(method, PATH, headers, body)


def check(answer, expect, earlier, where):
    """Raises AssertionError naming `where` when `answer` is not what `expect` says."""
    status, headers, body = answer

    def fail(what):
        raise AssertionError(f"{where}: {what}; got {status} {dict(headers.items())} {body[:300]!r}")

    if "status" in expect and status != expect["status"]:
        fail(f"status {expect['status']}")
    problem = (headers.get("Content-Type") or "").split(";")[0].strip() == "application/problem+json"
    if expect.get("problem") is True:
        if not problem:
            fail("a problem+json answer")
        doc = json.loads(body)
        if doc.get("type") != "about:blank" or doc.get("status") != status or not doc.get("title") or "detail" not in doc:
            fail("type about:blank, title, status and detail")
    if expect.get("problem") is False and problem:
        fail("no problem+json answer")
    if "paid" in expect and json.loads(body).get("paid") != expect["paid"]:
        fail(f"paid {expect['paid']}")
    for name, value in expect.get("headers", {}).items():
        if headers.get(name) != value:
            fail(f"{name}: {value}")
    if "same_body_as" in expect and body != earlier[expect["same_body_as"]][2]:
        fail(f"the bytes of step {expect['same_body_as']}")
    if "same_headers_as" in expect:
        step, names = expect["same_headers_as"]
        for name in names:
            if headers.get(name) != earlier[step][1].get(name):
                fail(f"{name} of step {step}: {earlier[step][1].get(name)}")
    if "expires" in expect:
        name, seconds = expect["expires"]
        try:
            ahead = (parsedate_to_datetime(headers.get(name)) - datetime.now(timezone.utc)).total_seconds()
        except (TypeError, ValueError):
            fail(f"{name}, an HTTP date")
        if abs(ahead - seconds) > 10:
            fail(f"{name} {seconds} s ahead, not {ahead:.0f}")


def concurrently(send, step, n, distinct, fresh):
    keys = [f"{fresh}-{i}" if distinct else fresh for i in range(n)]
    answers = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        answers[i] = exchange(send, step["request"], keys[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def run_case(send, number, case):
    fresh = f"conformance-{number}-{uuid.uuid4().hex}"
    where = f"case {number} ({case['row']})"
    together = case.get("concurrent")
    if together:
        step = case["steps"][0]
        answers = concurrently(send, step, together["n"], together["distinct"], fresh)
        if together["distinct"]:
            for i, answer in enumerate(answers):
                check(answer, step["expect"], [], f"{where}, copy {i}")
            return f"{together['n']} at once, each under its own key"
        ran = [a for a in answers if a[0] != 409 and a[1].get("Idempotent-Replayed") is None]
        if len(ran) != 1:
            raise AssertionError(f"{where}: one run of {together['n']} duplicates, got {[(a[0], a[2][:80]) for a in answers]}")
        check(ran[0], step["expect"], [], where)
        busy = replayed = 0
        for answer in answers:
            if answer is ran[0]:
                continue
            if answer[0] == 409:
                check(answer, {"status": 409, "problem": True}, [], f"{where}, a duplicate")
                if int(answer[1].get("Retry-After") or 0) < 1:
                    raise AssertionError(f"{where}: Retry-After {answer[1].get('Retry-After')!r}")
                busy += 1
            else:
                check(answer, {"status": ran[0][0], "headers": {"Idempotent-Replayed": "true"}, "same_body_as": 0},
                      [ran[0]], f"{where}, a duplicate")
                replayed += 1
        return f"{together['n']} duplicates at once: 1 run, {busy} 409, {replayed} replays"
    earlier = []
    for i, step in enumerate(case["steps"]):
        answer = exchange(send, step["request"], fresh)
        check(answer, step["expect"], earlier, f"{where}, step {i}")
        earlier.append(answer)
    return " ".join(str(a[0]) for a in earlier)


def run(send, log=print):
    """Every case of http.json through send; returns the number of cases."""
    cases = load()["cases"]
    for number, case in enumerate(cases):
        log(f"  {case['row']}: {run_case(send, number, case)}")
    return len(cases)


def urllib_send(base):
    def send(method, path, headers, body):
        request = urllib.request.Request(base + path, body, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()
    return send


if __name__ == "__main__":
    try:
        n = run(urllib_send(sys.argv[1].rstrip("/")))
    except AssertionError as e:
        print(f"FAIL: http.json: {e}")
        sys.exit(1)
    print(f"http.json: {n} cases as doc/clients.md's table says")
