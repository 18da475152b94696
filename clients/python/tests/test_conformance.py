"""test/conformance/http.json, the cases every package runs (doc/clients.md's
behaviour table), on every framework, through the same runner that checks
the README quick start over real HTTP (test/conformance/http_check.py).
The fixture's app is apps.py's: POST /pay for its /payments, the caller
in X-User (none: the scope is None, 401)."""
import json
import os
import sys

import pytest

from pg_idempotency import http

from apps import FRAMEWORKS

_TOP = os.environ.get("IDEM_TOP") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(_TOP, "test", "conformance"))
import http_check  # noqa: E402

CALLER = {
    "starlette": lambda scope: dict(scope["headers"]).get(b"x-user", b"").decode() or None,
    "flask": lambda environ: environ.get("HTTP_X_USER") or None,
    "django": lambda request: request.headers.get("x-user") or None,
}


class Headers(dict):
    """The reply's headers (lower-cased by apps.py), read whatever the case."""

    def get(self, name, default=None):
        return super().get(name.lower(), default)


@pytest.mark.parametrize("number", range(len(http_check.load()["cases"])))
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_conformance(framework, number):
    post = FRAMEWORKS[framework](http.Policy(scope=CALLER[framework]))

    def send(method, path, headers, body):
        assert path == http_check.PATH
        status, reply_headers, reply = post("/pay", json.loads(body) if body else {}, headers, method=method)
        return status, Headers(reply_headers), reply

    http_check.run_case(send, number, http_check.load()["cases"][number])
