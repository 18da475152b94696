"""Not a test module: mypy --strict reads it (test/integration/
python_package.sh) to check that the client's signatures reach users."""
from datetime import timedelta
from typing import Optional

import psycopg

from pg_idempotency import ClaimResult, KeyExpiry, client


def typed(conn: "psycopg.Connection[object]") -> int:
    r: ClaimResult = client.claim(conn, "k", {"a": 1}, scope="s", wait=timedelta(seconds=2))
    e: Optional[KeyExpiry] = client.key_expiry(conn, "k", "s")
    assert e is None or e.expires_at.tzinfo is not None
    client.complete(conn, "k", r.fence or 0, {"ok": True}, 201, scope="s")
    return client.mark_published(conn, [1, 2], 7)
