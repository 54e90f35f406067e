from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from pg_support import Cluster, running_cluster, why_no_postgres
from pi_support import stop_pi_scripts


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _pi_scripts() -> Iterator[None]:
    """The pi scripts the run's tests asked (pi_support.pi_script) stop with the run."""
    yield
    stop_pi_scripts()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster of the test run's own (tests/pg_support.py), started once."""
    reason = why_no_postgres()
    if reason is not None:
        pytest.skip(reason)
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def postgres_url(pg_cluster: Cluster) -> Iterator[str]:
    """An empty database of its own for one test, dropped after it."""
    url = pg_cluster.new_database()
    yield url
    pg_cluster.drop_database(url)


@pytest.fixture
def sqlite_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement run on the connections SQLite stores open from here on, in order."""
    from mcp_agent.sessions.sqlite import database

    statements: list[str] = []
    connect = database.SqliteDatabase._connect

    def traced(
        self: database.SqliteDatabase, factory: type[sqlite3.Connection] = sqlite3.Connection
    ) -> sqlite3.Connection:
        conn = connect(self, factory)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(database.SqliteDatabase, "_connect", traced)
    return statements
