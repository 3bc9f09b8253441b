"""Fixtures of the tuning-database tests: a fresh database of every kind (in memory, SQLite in
a temp dir, PostgreSQL when a server is there), so each test runs against all of them.

PostgreSQL: `$AKG_TEST_POSTGRES_URL` names the server (`.ci/run` starts one and sets it); with
it set, an unreachable server fails the tests. Without it, a server on localhost that lets
`postgres` in without a password is used when there is one, else those cases are skipped.
"""

from __future__ import annotations

import functools
import os
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from akg.db import InMemoryDatabase, Record, SqlDatabase
from akg.db.sql import with_default_driver

POSTGRES_ENV = "AKG_TEST_POSTGRES_URL"
LOCAL_POSTGRES = "postgresql+psycopg://postgres@localhost/postgres"
SQL_KINDS = ["sqlite", "postgres"]


@functools.lru_cache(maxsize=None)
def postgres_server() -> str | None:
    """The PostgreSQL URL to test against, or None when there is none to use."""
    url = os.environ.get(POSTGRES_ENV)
    if url:
        return url
    engine = create_engine(LOCAL_POSTGRES, connect_args={"connect_timeout": 2})
    try:
        with engine.connect():
            return LOCAL_POSTGRES
    except Exception:
        return None
    finally:
        engine.dispose()


def fresh_url(kind: str, tmp_path, request) -> str:
    """The URL of an empty database of `kind`: an SQLite file under tmp_path, or a new
    PostgreSQL schema (dropped after the test) selected through the search path."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'tuning.db'}"
    server = postgres_server()
    if server is None:
        pytest.skip(f"no PostgreSQL server (set {POSTGRES_ENV} to test against one)")
    schema = f"akg_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(with_default_driver(make_url(server)))
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as e:  # a server named by the env var must be there: fail, not skip
        pytest.fail(f"{POSTGRES_ENV}={server} is set but unusable: {e}", pytrace=False)

    def drop():
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    request.addfinalizer(drop)
    url = with_default_driver(make_url(server)).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture(params=SQL_KINDS)
def sql_url(request, tmp_path) -> str:
    """A URL of an empty SQL database, once per SQL backend."""
    return fresh_url(request.param, tmp_path, request)


@pytest.fixture(params=["memory", *SQL_KINDS])
def db(request, tmp_path):
    """An empty Database, once per implementation."""
    if request.param == "memory":
        yield InMemoryDatabase()
        return
    database = SqlDatabase(fresh_url(request.param, tmp_path, request))
    yield database
    database.close()


@pytest.fixture
def make_db(request, tmp_path):
    """`make_db(kind)`: a further empty Database of a kind ('memory', 'sqlite', 'postgres')."""
    opened = []

    def make(kind: str):
        if kind == "memory":
            return InMemoryDatabase()
        sub = tmp_path / f"extra{len(opened)}"
        sub.mkdir()
        database = SqlDatabase(fresh_url(kind, sub, request))
        opened.append(database)
        return database

    yield make
    for database in opened:
        database.close()


T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def make_record(n: int, cost: float | None = 1.0, status: str = "ok", *, workload: str = "w1",
                target: str = "cpu-test", at: float | None = None, **kw) -> Record:
    """Record of config {"tile": n}, measured `at` seconds after T0 (default: n)."""
    return Record(workload, target, {"tile": n}, status, cost,
                  timestamp=T0 + timedelta(seconds=n if at is None else at), **kw)


@pytest.fixture(name="rec")
def rec_fixture():
    """`rec(n, cost, status, ...)`: a record of config {"tile": n} (see `make_record`)."""
    return make_record
