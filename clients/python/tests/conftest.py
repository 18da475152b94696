"""Shared fixtures: connections to the test database named by the libpq
environment (PGHOST, PGPORT, PGUSER, PGDATABASE; test/integration/
python_package.sh sets them), and fresh keys."""
import uuid

import psycopg
import pytest
import pytest_asyncio

CONNINFO = ""


@pytest.fixture
def conn():
    with psycopg.connect(CONNINFO) as c:
        yield c
        c.rollback()


@pytest_asyncio.fixture
async def aconn():
    c = await psycopg.AsyncConnection.connect(CONNINFO)
    try:
        yield c
        await c.rollback()
    finally:
        await c.close()


@pytest.fixture
def key():
    return "k-" + uuid.uuid4().hex
