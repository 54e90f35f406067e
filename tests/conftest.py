from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_support import Cluster, running_cluster, why_no_postgres


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
