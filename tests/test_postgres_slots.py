"""A PostgreSQL server (or role, or database) with no connection slot left for a pool that
would grow: on a cluster of the test's own."""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
import pytest
from test_postgres import login_role


def test_a_pool_refused_more_connections_says_so_once_and_its_calls_wait_for_those_it_has(
    pg_cluster: Any, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Calls beyond the connections a pool had, when the database refused it more (its role's
    CONNECTION LIMIT here; the server's max_connections alike), were refused as if the
    database were out of reach ('cannot reach the session database … too many connections'),
    and the outage was logged, while the pool's own connections worked all along. Now the
    calls wait for those connections, and the log says once that the database refuses more."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    caplog.set_level(logging.INFO)
    with PostgresSessionRepo(postgres_url):
        pass  # the tables
    url = login_role(pg_cluster, postgres_url, "ALL ON ALL TABLES")
    role = url.split("://", 1)[1].split("@", 1)[0]
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT 2")
    database = PostgresDatabase(url, max_connections=6)
    said: list[str] = []

    def read(n: int) -> None:
        try:
            database.read("SELECT pg_sleep(0.3)")
            said.append("read")
        except Exception as error:
            said.append(f"{type(error).__name__}: {error}")

    try:
        threads = [threading.Thread(target=read, args=(n,)) for n in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)  # bounded
        assert not any(thread.is_alive() for thread in threads)
    finally:
        database.close()
    assert said == ["read"] * 5, said
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    refusing = [
        m for m in logged if "refuses this server more connections" in m and "said once" in m
    ]
    assert len(refusing) == 1 and "too many connections for role" in refusing[0], logged
    assert not [m for m in logged if "out of reach" in m], logged
