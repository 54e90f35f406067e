"""A replica's presence in the shared PostgreSQL database (runtime.presence): what others may
judge from it, and what they must not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from mcp_support import poll
from pg_support import Cluster
from pooler_support import fake_pooler

from mcp_agent.runtime.leases import PostgresLeases
from mcp_agent.runtime.presence import presence_key
from mcp_agent.runtime.run_board import RunBoard
from mcp_agent.sessions import SessionError
from mcp_agent.sessions.postgres.database import PostgresDatabase

# A replica elsewhere (another machine: its pid means nothing here) that holds session s1 for
# run r1 and goes on living; it prints its owner once it is ready.
_LIVE_ELSEWHERE = """
import sys, time
from mcp_agent.runtime.leases import PostgresLeases
from mcp_agent.runtime.run_board import RunBoard, RunRecord
from mcp_agent.sessions.postgres.database import PostgresDatabase
database = PostgresDatabase(sys.argv[1])
leases = PostgresLeases(database, presence=True)
leases.host = "another-machine"
assert leases.presence is not None
leases.presence.grace = 0
assert leases.presence.wait_held(60)
assert leases.acquire("s1", "run r1") is None
RunBoard(database, leases.owner, leases).publish([RunRecord("r1", "s1", "default", "m")])
print(leases.owner, flush=True)
time.sleep(3600)
"""


@contextmanager
def replica_elsewhere(url: str) -> Iterator[str]:
    """A live replica in a process of its own; yields its owner."""
    process = subprocess.Popen(
        [sys.executable, "-c", _LIVE_ELSEWHERE, url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert process.stdout is not None
        owner = process.stdout.readline().strip()
        assert owner.startswith("live-"), owner
        yield owner
    finally:
        process.kill()
        process.wait(10)


def lock_holders(database: PostgresDatabase, owner: str) -> list[int]:
    """The backends that hold ``owner``'s presence lock (its own connection's)."""
    rows = database.read(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND (classid::bigint << 32 | objid::bigint) = %s",
        (presence_key(owner),),
    )
    return [pid for (pid,) in rows]


def test_a_live_replica_whose_presence_connection_alone_is_cut_is_not_taken_for_gone(
    postgres_url: str,
) -> None:
    """A DBA's pg_terminate_backend of the one backend that held a live replica's presence
    lock (or a pooler's idle timeout) made every other replica take it for gone: its run read
    as ended ("the server running it stopped") and its session free, while it was still
    running it. A replica is present while any connection of its own is open (each holds its
    key), and it takes its presence lock again as soon as it finds it cut."""
    database = PostgresDatabase(postgres_url)
    judge = PostgresLeases(database, presence=True)
    assert judge.presence is not None
    judge.presence.grace = 0.1
    board = RunBoard(database, judge.owner, judge)
    try:
        with replica_elsewhere(postgres_url) as owner:
            # Its lease and run bind for a day: only its presence can say it is gone.
            database.write(lambda conn: conn.execute("UPDATE session_leases SET expires = 1e10"))
            database.write(lambda conn: conn.execute("UPDATE runs SET expires = 1e10"))
            assert judge.presence.wait_held(30)
            [cut] = lock_holders(database, owner)
            database.read("SELECT pg_terminate_backend(%s)", (cut,))
            seen: list[tuple[str, bool]] = []
            for _ in range(2000):  # a hang guard: until it holds its lock again, and then some
                found = board.get("r1")
                assert found is not None
                seen.append((found.status, judge.held_elsewhere("s1") is not None))
                holders = lock_holders(database, owner)
                if holders and cut not in holders and len(seen) > 20:
                    break
            assert holders and cut not in holders, "it took its presence lock again"
            assert set(seen) == {("running", True)}, seen
    finally:
        judge.close()
        database.close()


def test_runs_that_lapsed_in_an_outage_of_the_database_are_not_ended_before_a_renewal_turn(
    postgres_url: str,
) -> None:
    """The database away for longer than the lease (a failover, a restart that took long):
    no renewal could land, so every lease and run had lapsed when it came back, and the
    first replica whose renewal landed (or that answered agent_status) ended the runs of
    every other, alive and renewing a moment later: "the server running it stopped". Expiry
    is judged once a replica's presence has been held for a renewal turn."""
    from mcp_agent.runtime.run_board import STOPPED, RunRecord

    databases = [PostgresDatabase(postgres_url) for _ in range(2)]
    runner, judge = (PostgresLeases(database, presence=True) for database in databases)
    assert runner.presence is not None and judge.presence is not None
    runner.host = "another-machine"  # its pid means nothing here
    # The judge's renewal turn lasts until the runner's renewal has landed (a turn of a second
    # ran out, on a loaded machine, before the test's next steps were taken: the run read as
    # ended); the judge may judge presence once its lock is held again.
    judge.presence.grace, judge.expiry_grace = 0.5, 3600.0
    boards = [
        RunBoard(database, leases.owner, leases)
        for database, leases in zip(databases, (runner, judge), strict=True)
    ]
    try:
        assert runner.acquire("s1", "run r1") is None
        boards[0].publish([RunRecord("r1", "s1", "default", "m")])
        # The outage: every connection dropped, and no renewal landed for longer than the lease.
        name = postgres_url.rsplit("/", 1)[1]
        database = databases[1]
        database.write(lambda conn: conn.execute("UPDATE session_leases SET expires = 0"))
        database.write(lambda conn: conn.execute("UPDATE runs SET expires = 0"))
        cut = set(lock_holders(database, runner.owner))
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        # back, the runner present again (it takes its lock again at once, as a live replica
        # does), and the judge judging presence
        poll(
            lambda: (held := set(lock_holders(database, runner.owner))) and not held & cut,
            "the runner did not take its presence lock again",
        )
        assert judge.presence.wait_held(30)
        boards[1].renew([])  # the judge's renewal, the first to land
        found = boards[1].get("r1")
        assert found is not None and found.status == "running", found
        assert judge.held_elsewhere("s1") is not None
        assert judge.acquire("s1", "run r2") is not None
        # The runner's renewal lands within its turn: it runs on, in every replica's eyes.
        assert runner.renew() == {"s1"}
        boards[0].renew(["r1"])
        judge.expiry_grace = 0.5  # its turn over, as it would be now
        while not judge.judges_expiry():
            time.sleep(0.05)
        boards[1].renew([])
        found = boards[1].get("r1")
        assert found is not None and found.status == "running", found
        # One that renews no more (cut off from the database alone) is judged as before.
        database.write(lambda conn: conn.execute("UPDATE runs SET expires = 0"))
        found = boards[1].get("r1")
        assert found is not None and found.status == "error" and found.error == STOPPED
    finally:
        for leases in (runner, judge):
            leases.close()
        for database in databases:
            database.close()


@pytest.mark.anyio
async def test_a_dbas_idle_session_timeout_cuts_neither_the_change_feed_nor_the_presence(
    pg_cluster: Cluster, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A DBA's idle_session_timeout (PostgreSQL 14+) ended the connections that wait by
    nature: the change feed's (every timeout the others' notifications were lost for a
    moment, and the log said the feed cut and back) and the pool's, which hold a replica's
    presence key while its presence connection is cut. They are exempt now."""
    import anyio

    from mcp_agent.server.pg_bus import PostgresBus

    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET idle_session_timeout = '1s'")
    database = PostgresDatabase(postgres_url)
    leases = PostgresLeases(database, presence=True)
    bus = PostgresBus(postgres_url)

    def feed_and_key() -> tuple[set[int], set[int]]:
        feed = database.read(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN%%'",
            (name,),
        )
        key = database.read(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2"
            " AND (classid::bigint << 32 | objid::bigint) = %s",
            (presence_key(leases.owner),),
        )
        return {pid for (pid,) in feed}, {pid for (pid,) in key}

    try:
        assert leases.acquire("s1", "run r1") is None  # a pool connection holds the key
        async with anyio.create_task_group() as group:
            group.start_soon(bus.run)
            await bus.listening_since.wait()
            before = feed_and_key()
            assert all(before), before
            await anyio.sleep(2.5)  # idle for longer than the DBA allows
            after = feed_and_key()
            group.cancel_scope.cancel()
        assert before[0] == after[0], "the feed's connection was not ended"
        assert before[1] <= after[1], "the pool's connections that held the key stayed"
        assert "change feed" not in caplog.text, caplog.text
    finally:
        leases.close()
        database.close()


def test_behind_a_pooler_a_server_judges_no_replica_by_presence_and_says_so(
    pg_cluster: Cluster, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Through PgBouncer in transaction mode the presence lock is taken on whichever server
    connection the pooler lends, and stays with it: a live replica was taken for gone when
    the pooler closed that connection (its idle or life timeout), and a killed one never.
    Nothing said so. A pooler is known by the cancel key it hands out (its own, not the
    backend's): then the server judges by leases alone, and says why in one line."""
    with fake_pooler(pg_cluster.port) as pooler:
        database = PostgresDatabase(pooler.url(postgres_url))
        try:
            assert database.pooled
            leases = PostgresLeases(database, presence=True)
            assert leases.presence is None and leases.gone_sql("owner") == "false"
            assert "connection pooler" in caplog.text and "LISTEN" in caplog.text
            assert leases.acquire("s1", "run r1") is None  # leases work as they did
            leases.close()
        finally:
            database.close()
    direct = PostgresDatabase(postgres_url)
    try:
        assert not direct.pooled
    finally:
        direct.close()


def test_a_pooler_that_refuses_the_connection_settings_is_said_at_the_start(
    pg_cluster: Cluster, postgres_url: str
) -> None:
    """PgBouncer refuses a startup packet whose ``options`` it cannot track, which each
    connection of the pool sends (its timeouts, its planning): the first connection, made
    without them, opened the database, and every call then waited the pool's 30 s and was
    told that every connection "stayed busy". Now every connection carries them, and the
    start says what refused them and what to do."""
    with fake_pooler(pg_cluster.port, refuse_options=True) as pooler:
        with pytest.raises(SessionError) as refused:
            PostgresDatabase(pooler.url(postgres_url)).close()
    message = str(refused.value)
    assert "unsupported startup parameter: options" in message, message
    assert "connection pooler" in message and "connect to PostgreSQL itself" in message, message


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
