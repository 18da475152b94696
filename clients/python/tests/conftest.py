"""Shared fixtures: connections to the test database named by the libpq
environment (PGHOST, PGPORT, PGUSER, PGDATABASE; test/integration/
python_package.sh sets them), and fresh keys.

test/pooler/python.sh runs the suite through a transaction pooler: the
PG* variables name PgBouncer, and IDEM_DIRECT_URL the database itself
(where a relay LISTENs, as the README's "Behind a transaction pooler"
says).  Nothing here may depend on an earlier transaction's server
session: settings are the role's (limits_conninfo), never a session SET.
"""
import os
import uuid

import psycopg
import pytest
import pytest_asyncio

CONNINFO = ""
#: True when the suite runs through a transaction pooler
POOLED = "IDEM_DIRECT_URL" in os.environ
#: the database's own address (a pooler's clients LISTEN there)
DIRECT_DSN = os.environ.get("IDEM_DIRECT_URL", "")
#: a relay's listen_dsn as the README configures it
LISTEN_DSN = DIRECT_DSN if POOLED else None
LIMITS_ROLE = "regress_idem_limits"
#: psycopg prepares a query run 5 times on a connection; behind a
#: transaction pooler the next run may find another server connection
#: (the README's "Behind a transaction pooler")
NO_PREPARE = {"prepare_threshold": None}


@pytest.fixture
def conn():
    with psycopg.connect(CONNINFO, **NO_PREPARE) as c:
        yield c
        c.rollback()


@pytest_asyncio.fixture
async def aconn():
    c = await psycopg.AsyncConnection.connect(CONNINFO, **NO_PREPARE)
    try:
        yield c
        await c.rollback()
    finally:
        await c.close()


@pytest.fixture
def key():
    return "k-" + uuid.uuid4().hex


@pytest.fixture(scope="session")
def limits_conninfo():
    """A role whose idempotency.max_key_length is 40 and
    max_response_bytes 100 (ALTER ROLE ... SET: every session of the role
    has them, pooled or not; a session SET would stay on the pooler's
    server connection and reach its next clients)."""
    with psycopg.connect(CONNINFO, autocommit=True) as c:
        c.execute("DO $$ BEGIN CREATE ROLE %s LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
                  % LIMITS_ROLE)
        c.execute("ALTER ROLE %s SET idempotency.max_key_length = 40" % LIMITS_ROLE)
        c.execute("ALTER ROLE %s SET idempotency.max_response_bytes = 100" % LIMITS_ROLE)
        c.execute("SELECT idempotency.grant_usage(%s)", (LIMITS_ROLE,))
    return "user=" + LIMITS_ROLE


@pytest.fixture
def limited(limits_conninfo):
    """A connection as that role."""
    with psycopg.connect(limits_conninfo, **NO_PREPARE) as c:
        yield c
        c.rollback()
