"""The server over PostgreSQL: the flows of test_server on a database of the test's own, two
servers on one database (as replicas), leases in the database, migrations that two replicas
start at once."""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.types import TextContent
from mcp_support import (  # noqa: F401  (client_fixture: the client fixture)
    TEST_AGENTS,
    agent_server,
    call,
    call_error,
    client_fixture,
    make_server,
    search_index_marks,
)
from narrow import narrow
from test_server import (  # noqa: F401  (the same flows, on PostgreSQL)
    check_one_run_per_session,
    test_cancel_aborts_and_session_stays_consistent,
    test_detached_run_status_and_one_run_per_session,
    test_fork_import_and_delete_announce_list_changes,
    test_legacy_subscriptions,
    test_modern_notifications,
    test_session_lifecycle,
    user,
)

from mcp_agent.messages import UserMessage, content_text
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import ScriptedResponse, reply
from mcp_agent.sessions import MessageEntry

pytestmark = pytest.mark.anyio


@pytest.fixture
def server(tmp_path: Path, postgres_url: str) -> MCPServer:
    return make_server(tmp_path, db_url=postgres_url)


async def test_one_run_per_session_across_replicas(tmp_path: Path, postgres_url: str) -> None:
    first = make_server(tmp_path / "a", db_url=postgres_url)
    second = make_server(tmp_path / "b", db_url=postgres_url)
    await check_one_run_per_session(first, second)


async def test_a_lease_of_a_dead_process_is_let_go(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    from mcp_agent.runtime.leases import process_space

    async with Client(make_server(tmp_path, db_url=postgres_url)) as client:
        sid = (await call(client, "session_create"))["id"]
        gone = await anyio.run_process([sys.executable, "-c", "import os; print(os.getpid())"])
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(
                "INSERT INTO session_leases VALUES (%s, 'run dead', 'someone', %s, %s,"
                " extract(epoch FROM now()) + 60)",
                (sid, process_space(), int(gone.stdout)),
            )
        done = await call(client, "agent_run", prompt="hello", session_id=sid)
        assert done["answer"] == "echo: hello"


def test_a_lease_whose_release_failed_is_not_renewed_and_lapses(postgres_url: str) -> None:
    """A run ended while the database was out of reach, so its lease stayed in the table: the
    renewals of its replica (alive, with other runs) must not keep that lease, or the session
    stays busy for every other replica for as long as this one lives."""
    import psycopg

    from mcp_agent.runtime.leases import PostgresLeases
    from mcp_agent.sessions.errors import SessionError
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    first, second = PostgresDatabase(postgres_url), PostgresDatabase(postgres_url)
    leases, other = PostgresLeases(first), PostgresLeases(second)
    try:
        assert leases.acquire("s1", "run 1") is None
        assert leases.acquire("s2", "run 2") is None
        write = first.write

        def unreachable(work: Any, within: float | None = None) -> Any:
            raise SessionError("storage", "cannot reach the session database")

        first.write = unreachable  # type: ignore[method-assign]
        with pytest.raises(SessionError):
            leases.release("s1")
        first.write = write  # type: ignore[method-assign]
        assert leases.renew() == {"s2"}
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("UPDATE session_leases SET expires = 0 WHERE session_id = 's1'")
        assert leases.renew() == {"s2"}  # the lapsed one stays lapsed
        assert other.acquire("s1", "run 3") is None
        assert other.acquire("s2", "run 4") is not None  # the one still held is not free
    finally:
        first.close()
        second.close()


async def test_leases_are_renewed_while_every_worker_thread_waits_for_a_lock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica whose worker threads all waited for a lock (clients appending to a session a
    long transaction held, a table a program locked) renewed no lease meanwhile: the renewal
    waited behind them for a worker thread, up to the lock timeout (60 s, twice the lease),
    so its leases and runs lapsed and the other replicas took its live runs for stopped."""
    import psycopg

    from mcp_agent.blocking import worker_threads
    from mcp_agent.runtime import runs as runs_module
    from mcp_agent.runtime.leases import PostgresLeases
    from mcp_agent.runtime.runs import RunManager
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    monkeypatch.setattr(runs_module, "RENEW_EVERY", 0.1)
    database = PostgresDatabase(postgres_url, max_connections=6, lock_timeout=30)
    leases = PostgresLeases(database)
    offload = worker_threads(2)
    waited: list[object] = []

    async def wait_for_the_lock() -> None:
        try:
            await offload(lambda: database.read("SELECT count(*) FROM sessions"))
        finally:
            waited.append(None)

    try:
        assert leases.acquire("s1", "run 1") is None
        with (
            psycopg.connect(postgres_url, autocommit=True) as look,
            psycopg.connect(postgres_url) as holder,
        ):

            def expires() -> float:
                [(value,)] = look.execute("SELECT expires FROM session_leases").fetchall()
                return float(value)

            taken = expires()
            holder.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            async with anyio.create_task_group() as group:
                runs = RunManager(group, leases, offload=offload)
                for _ in range(offload.limit):  # every worker thread
                    group.start_soon(wait_for_the_lock)
                group.start_soon(runs.keep_leases)
                renewed = taken
                for _ in range(500):  # bounded: renewals come every 0.1 s
                    await anyio.sleep(0.02)
                    renewed = expires()
                    if renewed > taken:
                        break
                still_waiting = not waited
                holder.rollback()  # the lock goes: the waiting reads end
                for _ in range(500):
                    if len(waited) == offload.limit:
                        break
                    await anyio.sleep(0.02)
                group.cancel_scope.cancel()
        assert still_waiting, "the reads did not wait for the lock"
        assert renewed > taken, "no lease was renewed while the worker threads waited"
    finally:
        offload.close()
        database.close()


def test_a_renewal_whose_backend_froze_ends_well_within_the_lease(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend frozen during a lease renewal held the renewal (and every one after it, the
    same task) for the statement timeout and its grace, 95 s, three times the lease: the
    leases lapsed and another replica could take a session a run was under way in. The
    renewal is bounded by RENEW_WITHIN, half the pause between two, so the next one still
    comes in time; the board's renewal likewise."""
    import signal

    import psycopg

    from mcp_agent.runtime import leases as leases_module
    from mcp_agent.runtime.leases import PostgresLeases
    from mcp_agent.runtime.run_board import RunBoard
    from mcp_agent.sessions.errors import SessionError
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    monkeypatch.setattr(leases_module, "RENEW_WITHIN", 1.0)
    import mcp_agent.runtime.run_board as board_module

    monkeypatch.setattr(board_module, "RENEW_WITHIN", 1.0)
    database = PostgresDatabase(postgres_url)
    leases = PostgresLeases(database)
    board = RunBoard(database, leases.owner)
    name = postgres_url.rsplit("/", 1)[1]
    try:
        assert leases.acquire("s1", "run 1") is None
        for renew, table in ((leases.renew, "session_leases"), (lambda: board.renew([]), "runs")):
            with (
                psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin,
                psycopg.connect(postgres_url) as holder,
            ):
                holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                failed: list[BaseException] = []

                def renewing(renew: Any = renew, failed: list[BaseException] = failed) -> None:
                    try:
                        renew()
                    except BaseException as raised:
                        failed.append(raised)

                renewal = threading.Thread(target=renewing, daemon=True)
                frozen: list[int] = []
                renewal.start()
                try:
                    while not frozen and renewal.is_alive():
                        frozen = [
                            pid
                            for (pid,) in admin.execute(
                                "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                                " AND wait_event_type = 'Lock'",
                                [name],
                            )
                        ]
                        time.sleep(0.01)
                    for pid in frozen:
                        os.kill(pid, signal.SIGSTOP)
                    renewal.join(30)  # a hang guard: the bound is a second
                    assert not renewal.is_alive(), "the renewal waited for the frozen backend"
                finally:
                    for pid in frozen:
                        os.kill(pid, signal.SIGCONT)
                [error] = failed
                assert isinstance(error, SessionError), error
                said = str(error)
                assert "answered nothing for 1 s" in said or "the bound of this call" in said
                holder.rollback()
        assert leases.renew() == {"s1"}
        board.renew([])
    finally:
        database.close()


def test_connections_give_up_a_database_gone_from_the_network(postgres_url: str) -> None:
    """A partition or a host switched off: without keepalives and tcp_user_timeout a call, and
    the worker thread serving it, waited the kernel's quarter of an hour. A URL's own values
    are kept."""
    from psycopg.conninfo import conninfo_to_dict

    from mcp_agent.sessions.postgres.database import PostgresDatabase

    for url, user_timeout in (
        (postgres_url, "60000"),
        (f"{postgres_url}?tcp_user_timeout=5000", "5000"),
    ):
        database = PostgresDatabase(url)
        try:
            with database.pool.connection() as conn:
                used = conninfo_to_dict(conn.info.dsn)
        finally:
            database.close()
        assert used["keepalives"] == "1" and used["keepalives_idle"] == "30"
        assert used["tcp_user_timeout"] == user_timeout


def test_the_board_keeps_no_more_of_an_answer_than_a_status_shows(postgres_url: str) -> None:
    """An answer may be megabytes long, and agent_runs reads the board's newest thousand runs
    on every call: the board keeps what a status shows of it, and that it was cut."""
    from mcp_agent.runtime.run_board import ANSWER_CHARS, RunBoard, RunRecord
    from mcp_agent.server.agent_tools import run_info
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    database = PostgresDatabase(postgres_url)
    try:
        board = RunBoard(database, "replica-a")
        answer = "word " * 100_000
        record = RunRecord("r1", "s1", "default", "m", status="completed", answer=answer)
        record.finished = time.time()
        record.parent_run_id = "r0"
        board.publish([record])
        [(stored,)] = database.read("SELECT length(answer) FROM runs WHERE id = 'r1'")
        assert stored == ANSWER_CHARS + 1
        found = board.get("r1")
        assert found is not None
        shown, whole = run_info(found), run_info(record)
        assert shown.answer == whole.answer and shown.answer_truncated
        assert shown.parent_run_id == "r0"  # which run started it, on every replica
    finally:
        database.close()


def test_commands_for_a_run_whose_replica_stopped_are_cleared_and_quoted(
    postgres_url: str,
) -> None:
    """Commands left for a run whose replica died stayed in run_commands for good (up to 100 a
    run), and the steering messages among them were said nowhere. Once the run is known
    ended, its commands go, and its warnings quote the messages it never took."""
    from mcp_agent.runtime.run_board import STOPPED, RunBoard, RunRecord
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    database = PostgresDatabase(postgres_url)
    try:
        dead, alive = RunBoard(database, "replica-a"), RunBoard(database, "replica-b")
        dead.publish([RunRecord("r1", "s1", "default", "m"), RunRecord("r2", "s2", "default", "m")])
        alive.send("r1", "steer", "turn left")
        alive.send("r1", "follow_up", "then stop")
        alive.send("r1", "cancel")
        alive.send("r2", "steer", "lost too")
        # replica-a stops renewing: its runs' expiry passes.
        database.write(lambda conn: conn.execute("UPDATE runs SET expires = 0"))
        found = alive.get("r1")
        assert found is not None and found.status == "error" and found.error == STOPPED
        [warning] = found.warnings
        assert '"turn left"' in warning and '"then stop"' in warning, warning
        assert "never reached the run" in warning, warning
        assert database.read("SELECT run_id FROM run_commands") == [("r2",)]
        r2 = alive.get("r2")
        assert r2 is not None and '"lost too"' in r2.warnings[0]
        assert database.read("SELECT run_id FROM run_commands") == []
        # Any left behind for a run not under way go at the next renewal.
        database.write(
            lambda conn: conn.execute(
                "INSERT INTO run_commands (run_id, owner, kind, message)"
                " VALUES ('r1', 'replica-a', 'steer', 'old'), ('gone', 'x', 'cancel', NULL)"
            )
        )
        alive.renew([])
        assert database.read("SELECT run_id FROM run_commands") == []
    finally:
        database.close()


_KILLED_ELSEWHERE = """
import sys, time
from mcp_agent.runtime.leases import PostgresLeases
from mcp_agent.runtime.run_board import RunBoard, RunRecord
from mcp_agent.sessions.postgres.database import PostgresDatabase
database = PostgresDatabase(sys.argv[1])
leases = PostgresLeases(database, presence=True)
leases.host = "another-machine"  # its pid means nothing here
assert leases.presence is not None
leases.presence.grace = 0  # held is enough: it judges no one
assert leases.presence.wait_held(60)
assert leases.acquire("s1", "run r1") is None
RunBoard(database, leases.owner, leases).publish([RunRecord("r1", "s1", "default", "m")])
print("ready", flush=True)
time.sleep(3600)
"""


def test_a_replica_killed_on_another_machine_is_known_gone_before_its_lease_expires(
    postgres_url: str,
) -> None:
    """A replica killed with SIGKILL showed its run "running", and kept its session busy, for
    the whole lease (30 s) on every other machine. Each replica holds a presence lock on a
    connection of its own: once the database has found that connection closed, its runs read
    as ended and its sessions are free, whatever the lease says. A replica judges so only
    when its own lock has been held for a while (a restart of the database drops them all)."""
    import signal
    import subprocess

    from mcp_agent.runtime.leases import PostgresLeases
    from mcp_agent.runtime.run_board import STOPPED, RunBoard
    from mcp_agent.sessions.postgres.database import PostgresDatabase

    database = PostgresDatabase(postgres_url)
    survivor = PostgresLeases(database, presence=True)
    newcomer = PostgresLeases(database, presence=True)  # its own lock not held long enough yet
    assert survivor.presence is not None and newcomer.presence is not None
    survivor.presence.grace, newcomer.presence.grace = 0.1, 3600
    board = RunBoard(database, survivor.owner, survivor)
    doomed = subprocess.Popen(
        [sys.executable, "-c", _KILLED_ELSEWHERE, postgres_url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert doomed.stdout is not None and doomed.stdout.readline() == "ready\n"
        # Its lease and run bind for a day: only its presence can say it is gone.
        database.write(lambda conn: conn.execute("UPDATE session_leases SET expires = 1e10"))
        database.write(lambda conn: conn.execute("UPDATE runs SET expires = 1e10"))
        assert survivor.presence.wait_held(30)
        assert survivor.held_elsewhere("s1") is not None  # alive: it binds
        found = board.get("r1")
        assert found is not None and found.status == "running"
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        for _ in range(200):  # a hang guard: the database finds the socket closed at once
            found = board.get("r1")
            if found is None or found.status != "running":
                break
            time.sleep(0.05)
        assert found is not None and found.status == "error" and found.error == STOPPED
        assert newcomer.held_elsewhere("s1") is not None  # not yet judging: the lease binds
        assert survivor.acquire("s1", "run r2") is None
    finally:
        doomed.kill()
        doomed.wait(10)
        survivor.close()
        newcomer.close()
        database.close()


def test_runs_and_sessions_are_ordered_by_the_database_clock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replicas on machines whose clocks disagree: the one an hour ahead listed what it did
    above everything done later elsewhere (its runs' starts, its sessions' modified times
    were its own clock's). Now both are the database's time when it heard of them."""
    from datetime import UTC, datetime

    from mcp_agent.runtime.run_board import RunBoard, RunRecord
    from mcp_agent.sessions import entries
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    def an_hour_ahead() -> int:
        return time.time_ns() + 3600 * 10**9

    with PostgresSessionRepo(postgres_url) as repo:
        board_ahead, board = RunBoard(repo.database, "ahead"), RunBoard(repo.database, "right")
        early = RunRecord("early", "s1", "default", "m", started=time.time() + 3600)
        board_ahead.publish([early])
        # Put back as it was when the test ends: left an hour ahead, every later time this
        # process writes (strictly increasing) was an hour ahead too, and a session made by a
        # later test's fixture listed above everything its server did.
        monkeypatch.setattr(entries, "_last_write_time", entries._last_write_time)
        with monkeypatch.context() as ahead:
            ahead.setattr(entries, "wall_clock_ns", an_hour_ahead)
            first = repo.create(name="first")
            first.append_message(user_message("on the replica an hour ahead"))
        monkeypatch.setattr(entries, "_last_write_time", "")  # another process's clock
        second = repo.create(name="second")
        second.append_message(user_message("later, elsewhere"))
        late = RunRecord("late", "s2", "default", "m", started=time.time())
        board.publish([late])

        assert [s.name for s in repo.list().items] == ["second", "first"]
        assert [r.id for r in board.newest(10)] == ["early", "late"]  # oldest first
        # The hour-ahead replica's start is the database's, before the later one's.
        assert early.started <= late.started
        stored = [s.modified for s in repo.list().items]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert all(len(m) == len(now) and m <= now for m in stored), stored


def slow_responder(context: LlmContext) -> ScriptedResponse:
    """``slow…`` streams for about five seconds; anything else is echoed."""
    text = content_text(context.messages[-1].content)
    if text.startswith("slow"):
        return reply("word " * 100, delay=0.05, chunk_size=5)
    return reply(f"echo: {text}")


def replica(tmp_path: Path, url: str) -> MCPServer:
    return agent_server(tmp_path, {"scripted": slow_responder}, agents=TEST_AGENTS, db_url=url)


async def test_runs_are_watched_steered_and_cancelled_from_any_replica(
    tmp_path: Path, postgres_url: str
) -> None:
    first, second = replica(tmp_path / "a", postgres_url), replica(tmp_path / "b", postgres_url)
    async with Client(first) as a, Client(second, mode="legacy") as b:
        run = await call(a, "agent_run", prompt="slow please", wait=False)
        seen = await call(b, "agent_status", run_id=run["runId"])
        assert seen["status"] == "running" and seen["sessionId"] == run["sessionId"]
        listed = await call(b, "agent_runs")
        assert [r["runId"] for r in listed["runs"]] == [run["runId"]]
        queued = await call(b, "agent_steer", run_id=run["runId"], message="change course")
        assert queued == {"runId": run["runId"], "queued": "steering", "status": "running"}
        done = await call(b, "agent_status", run_id=run["runId"], wait_seconds=30)
        assert done["status"] == "completed" and done["answer"] == "echo: change course"
        assert (await call(a, "agent_status", run_id=run["runId"]))["answer"] == done["answer"]
        text = await call_error(b, "agent_follow_up", run_id=run["runId"], message="more")
        assert "has ended (completed)" in text

        second_run = await call(a, "agent_run", prompt="slow again", wait=False)
        await call(b, "agent_follow_up", run_id=second_run["runId"], message="then this")
        cancelled = await call(b, "agent_cancel", run_id=second_run["runId"])
        assert cancelled["status"] == "aborted"
        assert "agent_cancel" in cancelled["error"]
        # The follow-up it ended before taking is said on every replica, not only its own.
        for client in (a, b):
            status = await call(client, "agent_status", run_id=second_run["runId"])
            assert ['follow-up "then this"' in w for w in status["warnings"]] == [True]
        assert cancelled["warnings"] == status["warnings"]
        branch = await call(b, "session_get", session_id=second_run["sessionId"], limit=0)
        last = [e for e in branch["entries"] if e["type"] == "message"][-1]["message"]
        assert last["role"] == "assistant" and last["stopReason"] == "aborted"
        # The session is free again, from either replica.
        again = await call(b, "agent_run", prompt="hi", session_id=second_run["sessionId"])
        assert again["answer"] == "echo: hi"
        listed = await call(a, "agent_runs")
        assert len(listed["runs"]) == 3
        assert "no run" in await call_error(b, "agent_status", run_id="nope")


async def test_a_run_whose_lease_lapsed_writes_no_more_once_another_replica_took_it(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease can lapse while its holder lives (the database out of reach past the lease),
    and another replica may then take the session. The first run is fenced: it writes nothing
    more, and ends saying why; the branch is the second run's alone (before: the first run's
    answer landed after the second's, in a branch it never saw)."""
    import psycopg

    from mcp_agent.runtime import leases, runs
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    monkeypatch.setattr(runs, "RENEW_EVERY", 3600)  # no renewal lands in between, by chance
    monkeypatch.setattr(leases, "EXPIRY_GRACE", 0)  # a replica just started judges expiry
    first, second = replica(tmp_path / "a", postgres_url), replica(tmp_path / "b", postgres_url)
    async with Client(first) as a, Client(second) as b:
        run = await call(a, "agent_run", prompt="slow please", wait=False)
        sid = run["sessionId"]
        with PostgresSessionRepo(postgres_url) as repo:  # the run has begun its answer
            while not repo.open(sid).build_context().messages:
                await anyio.sleep(0.05)
        with psycopg.connect(postgres_url, autocommit=True) as db:  # no renewal landed
            db.execute("UPDATE session_leases SET expires = 0 WHERE session_id = %s", (sid,))
        taken = await call(b, "agent_run", prompt="second run", session_id=sid)
        assert taken["answer"] == "echo: second run"
        ended = await call(a, "agent_status", run_id=run["runId"], wait_seconds=30)
        assert ended["status"] in ("error", "aborted"), ended
        assert (
            "lease on it lapsed" in ended["error"]
            or "lease on the session lapsed" in (ended["error"])
        ), ended
        with PostgresSessionRepo(postgres_url) as repo:
            messages = repo.open(sid).build_context().messages
        said = [(m.role, content_text(getattr(m, "content", ""))) for m in messages]
        assert said == [
            ("user", "slow please"),
            ("user", "second run"),
            ("assistant", "echo: second run"),
        ], said
        # The first replica lets go of nothing it no longer holds: the session is free.
        again = await call(a, "agent_run", prompt="third", session_id=sid)
        assert again["answer"] == "echo: third"


async def test_a_run_whose_lease_was_taken_stops_at_the_next_renewal(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renewal finds the lease another's: the run stops there and then, instead of
    calling its model on until its next write is refused."""
    import psycopg

    from mcp_agent.runtime import runs

    monkeypatch.setattr(runs, "RENEW_EVERY", 0.1)
    async with Client(replica(tmp_path, postgres_url)) as client:
        run = await call(client, "agent_run", prompt="slow please", wait=False)
        while (await call(client, "agent_status", run_id=run["runId"]))["events"] < 5:
            await anyio.sleep(0.05)  # its answer is streaming
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(
                "UPDATE session_leases SET owner = 'another', holder = 'run x',"
                " expires = extract(epoch FROM now()) + 60 WHERE session_id = %s",
                (run["sessionId"],),
            )
        ended = await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)
    assert ended["status"] in ("aborted", "error"), ended
    assert "lease" in ended["error"] and "lapsed" in ended["error"], ended
    # Stopped at the renewal, not at the end of the answer's hundred pieces (the write that
    # would then have been refused).
    assert ended["events"] < 50, ended


async def test_a_run_that_ended_while_the_board_was_out_of_reach_is_said_as_it_ended(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database was out of reach as a run ended, so its end did not reach the board; its
    renewals stopped, and another replica presumed it "the server running it stopped". Its
    replica lives and writes the end once the database is back: every replica says it."""
    import psycopg

    from mcp_agent.runtime import leases
    from mcp_agent.runtime.run_board import STOPPED, RunBoard

    publish = RunBoard.publish
    failed: list[str] = []

    def unreachable_at_the_end(board: RunBoard, records: list[Any]) -> list[Any]:
        if not failed and any(r.finished is not None for r in records):
            failed.extend(r.id for r in records)
            raise psycopg.OperationalError("the database is out of reach")
        return publish(board, records)

    monkeypatch.setattr(RunBoard, "publish", unreachable_at_the_end)
    monkeypatch.setattr(leases, "EXPIRY_GRACE", 0)  # a replica just started judges expiry
    first, second = replica(tmp_path / "a", postgres_url), replica(tmp_path / "b", postgres_url)
    async with Client(first) as a, Client(second) as b:
        with anyio.fail_after(30):
            done = await call(a, "agent_run", prompt="hello")
            assert failed == [done["runId"]]
            with psycopg.connect(postgres_url, autocommit=True) as db:  # the lease time passed
                db.execute("UPDATE runs SET expires = 0 WHERE id = %s", (done["runId"],))
            seen = await call(b, "agent_status", run_id=done["runId"])
            # Presumed stopped (or, its presence not held long enough yet to judge expiry,
            # still running) until the run's replica writes its end.
            while seen["error"] == STOPPED or seen["status"] == "running":
                await anyio.sleep(0.05)
                seen = await call(b, "agent_status", run_id=done["runId"])
    assert seen["status"] == "completed" and seen["answer"] == "echo: hello", seen


async def test_an_end_written_late_is_not_undone_by_a_round_under_way_as_the_run_ended(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round of keep_board was writing the run's state (running) as the run ended, and the
    end's own write failed (the database out of reach). The round, back after the end, set
    the run's end time to the round's (none): the end written again said the run completed
    but not when, which another replica that had presumed it stopped kept, saying "the server
    running it stopped" for good (a flake under load of the test above). The end is now
    written with its time, and every replica says it."""
    import psycopg

    from mcp_agent.runtime.run_board import RunBoard

    publish = RunBoard.publish
    round_under_way, end_tried = threading.Event(), threading.Event()

    def a_round_outlives_the_end(board: RunBoard, records: list[Any]) -> list[Any]:
        if any(r.finished is not None for r in records) and not end_tried.is_set():
            end_tried.set()
            raise psycopg.OperationalError("the database is out of reach")
        if (
            any(r.event_count > 0 and r.finished is None for r in records)
            and not end_tried.is_set()
        ):
            round_under_way.set()  # keep_board's round: back once the end was tried
            end_tried.wait(30)
        return publish(board, records)

    monkeypatch.setattr(RunBoard, "publish", a_round_outlives_the_end)
    first, second = replica(tmp_path / "a", postgres_url), replica(tmp_path / "b", postgres_url)
    async with Client(first) as a, Client(second) as b:
        run = await call(a, "agent_run", prompt="slow please", wait=False)
        with anyio.fail_after(30):
            while not round_under_way.is_set():
                await anyio.sleep(0.05)
            await call(a, "agent_cancel", run_id=run["runId"])
            with psycopg.connect(postgres_url, autocommit=True) as db:
                while db.execute(
                    "SELECT status FROM runs WHERE id = %s", (run["runId"],)
                ).fetchone() == ("running",):
                    await anyio.sleep(0.05)
                [(finished,)] = db.execute(
                    "SELECT finished FROM runs WHERE id = %s", (run["runId"],)
                ).fetchall()
        assert finished is not None
        for client in (a, b):
            status = await call(client, "agent_status", run_id=run["runId"])
            assert status["status"] == "aborted" and status["finished"] is not None, status


async def streaming(client: Client, run_id: str) -> None:
    """Until the run's answer streams (it has taken what it was given before)."""
    with anyio.fail_after(30):
        while "text_delta" not in (await call(client, "agent_status", run_id=run_id))["lastEvent"]:
            await anyio.sleep(0.05)


async def test_messages_sent_through_another_replica_that_a_run_never_took_are_said(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through another replica, agent_steer and agent_follow_up say "queued" once the message
    is on the board. One its run then never takes (its queue was full; it ended before its
    replica took the message off the board) is quoted in the run's warnings, on every
    replica, as the messages a run ended before taking are: before, it vanished unsaid."""
    from mcp_agent.runtime import runs

    first, second = replica(tmp_path / "a", postgres_url), replica(tmp_path / "b", postgres_url)
    async with Client(first) as a, Client(second) as b:
        run = await call(a, "agent_run", prompt="slow please", wait=False)
        await streaming(b, run["runId"])
        monkeypatch.setattr(runs, "MAX_QUEUED", 2)
        for n in range(3):
            await call(b, "agent_steer", run_id=run["runId"], message=f"turn {n}")
        cancelled = await call(b, "agent_cancel", run_id=run["runId"])  # taken after those
        for client in (a, b):
            status = await call(client, "agent_status", run_id=run["runId"])
            assert status["warnings"] == cancelled["warnings"]
            said = "\n".join(status["warnings"])
            for n in range(3):
                assert f'steering "turn {n}"' in said, said
            assert "never reached the run" in said and 'steering "turn 2"' in said

        monkeypatch.setattr(runs, "POLL_EVERY", 3600)  # its replica takes nothing now,
        await anyio.sleep(0.5)  # once the round under way (a quarter of a second) is over
        late = await call(a, "agent_run", prompt="slow again", wait=False)
        await streaming(a, late["runId"])
        await call(b, "agent_follow_up", run_id=late["runId"], message="and then")
        ended = await call(a, "agent_cancel", run_id=late["runId"])
        for status in (ended, await call(b, "agent_status", run_id=late["runId"])):
            assert status["status"] == "aborted"
            [warning] = status["warnings"]
            assert "never reached the run" in warning and 'follow-up "and then"' in warning


async def test_changes_reach_subscribers_on_every_replica(
    tmp_path: Path, postgres_url: str
) -> None:
    """A 2026-07-28 listener on one replica and a legacy subscriber on another hear appends
    and new sessions made through a third."""
    import mcp.types as types

    servers = [replica(tmp_path / name, postgres_url) for name in "abc"]
    legacy_seen: list[Any] = []

    async def on_message(message: Any) -> None:
        if not isinstance(message, Exception):
            legacy_seen.append(message)

    async with (
        Client(servers[0]) as a,
        Client(servers[1], mode="legacy", message_handler=on_message) as b,
        Client(servers[2]) as c,
    ):
        sid = (await call(c, "session_create"))["id"]
        await b.session.subscribe_resource(f"session://{sid}")
        async with a.listen(
            resources_list_changed=True, resource_subscriptions=[f"session://{sid}"]
        ) as events:
            heard: list[Any] = []

            async def hear() -> None:
                async for event in events:
                    heard.append(event)

            async with anyio.create_task_group() as group:
                group.start_soon(hear)
                # Each replica's LISTEN starts with its lifespan: append until both have heard
                # one, then check that a later append and a new session arrive too. (A hang
                # guard, said when it runs out: a loaded machine may take many tries.)
                for _ in range(600):
                    await call(c, "session_append", session_id=sid, entry=user("ping"))
                    await anyio.sleep(0.1)
                    updates = [
                        m for m in legacy_seen if isinstance(m, types.ResourceUpdatedNotification)
                    ]
                    if heard and updates:
                        break
                else:
                    raise AssertionError(f"never heard an append: {heard}, {legacy_seen}")
                heard.clear()
                legacy_seen.clear()
                await call(c, "session_append", session_id=sid, entry=user("pong"))
                await call(c, "session_create")
                with anyio.fail_after(60):
                    while not (
                        {type(e).__name__ for e in heard}
                        >= {"ResourceUpdated", "ResourcesListChanged"}
                        and any(
                            isinstance(m, types.ResourceUpdatedNotification) for m in legacy_seen
                        )
                        and any(
                            isinstance(m, types.ResourceListChangedNotification)
                            for m in legacy_seen
                        )
                    ):
                        await anyio.sleep(0.02)
                group.cancel_scope.cancel()
        uris = {
            str(m.params.uri)
            for m in legacy_seen
            if isinstance(m, types.ResourceUpdatedNotification)
        }
        assert uris == {f"session://{sid}"}


async def test_a_replica_whose_publishing_connection_was_dropped_is_heard_again(
    postgres_url: str, pg_cluster: Any
) -> None:
    """Only the connection a replica publishes on is dropped (its listening one is well): the
    event of that moment is lost, as the README says, but the bus connects afresh and the
    next ones reach the other replicas again."""
    import psycopg
    from mcp.server.subscriptions import ResourceUpdated, ServerEvent

    from mcp_agent.server import pg_bus

    speaker, hearer = pg_bus.PostgresBus(postgres_url), pg_bus.PostgresBus(postgres_url)
    heard: list[ServerEvent] = []
    hearer.subscribe(heard.append)

    async def until_heard(uri: str) -> None:
        with anyio.fail_after(10):
            while not any(isinstance(e, ResourceUpdated) and e.uri == uri for e in heard):
                await speaker.publish(ResourceUpdated(uri=uri))
                await anyio.sleep(0.1)

    async with anyio.create_task_group() as group:
        group.start_soon(speaker.run)
        group.start_soon(hearer.run)
        await speaker.listening_since.wait()
        await hearer.listening_since.wait()
        await until_heard("session://before")
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND query LIKE 'SELECT pg_notify%%'",
                [postgres_url.rsplit("/", 1)[1]],
            ).fetchall()
        assert len(dropped) == 1
        await until_heard("session://after")
        group.cancel_scope.cancel()


async def test_a_hung_publishing_connection_holds_up_no_listener(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database stops answering on the connection a replica publishes on, without closing
    it (a frozen backend, a network that drops packets): this replica's own listeners still
    hear every change at once, and after SEND_TIMEOUT the bus connects afresh, so the other
    replicas hear it again. Before, each publish waited on that connection, and the server's
    one notification dispatcher with it: no listener of the replica heard anything more."""
    import signal

    import psycopg
    from mcp.server.subscriptions import ResourceUpdated, ServerEvent

    from mcp_agent.server import pg_bus

    monkeypatch.setattr(pg_bus, "SEND_TIMEOUT", 1.0, raising=False)
    speaker, hearer = pg_bus.PostgresBus(postgres_url), pg_bus.PostgresBus(postgres_url)
    heard: list[ServerEvent] = []
    local: list[ServerEvent] = []
    hearer.subscribe(heard.append)
    speaker.subscribe(local.append)

    async def until_heard(uri: str) -> None:
        with anyio.fail_after(20):
            while not any(isinstance(e, ResourceUpdated) and e.uri == uri for e in heard):
                await speaker.publish(ResourceUpdated(uri=uri))
                await anyio.sleep(0.1)

    frozen: list[int] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(speaker.run)
            group.start_soon(hearer.run)
            await speaker.listening_since.wait()
            await hearer.listening_since.wait()
            await until_heard("session://before")
            with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
                frozen = [
                    pid
                    for (pid,) in admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                        " AND query LIKE 'SELECT pg_notify%%'",
                        [postgres_url.rsplit("/", 1)[1]],
                    )
                ]
            assert len(frozen) == 1
            os.kill(frozen[0], signal.SIGSTOP)
            with anyio.fail_after(5):  # a hang guard: each publish returns at once
                for n in range(3):
                    await speaker.publish(ResourceUpdated(uri=f"session://local{n}"))
            assert [e.uri for e in local[-3:] if isinstance(e, ResourceUpdated)] == [
                f"session://local{n}" for n in range(3)
            ]
            await until_heard("session://after")  # on a new connection
            group.cancel_scope.cancel()
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)


def test_replicas_starting_together_migrate_once(postgres_url: str) -> None:
    import psycopg

    from mcp_agent.sessions.postgres import PostgresSessionRepo
    from mcp_agent.sessions.postgres.database import SCHEMA_VERSION

    repos: list[PostgresSessionRepo] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_one() -> None:
        start.wait()
        try:
            repos.append(PostgresSessionRepo(postgres_url, max_connections=2))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(repos) == 4
    session = repos[0].create(name="made on one")
    session.append_message(user_message("hello"))
    last = narrow(repos[3].open(session.id).get_branch()[-1], MessageEntry)
    assert narrow(last.message, UserMessage).text == "hello"
    for repo in repos:
        repo.close()
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_one_file_imported_on_two_replicas_at_once_gives_the_id_and_a_copy(
    postgres_url: str, tmp_path: Path
) -> None:
    """session_import promises the file's id when free, else a copy under a new id. Two
    replicas importing one file at once both found the id free, and the second to insert its
    row was refused ("session … already exists") instead of getting its copy."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    def activity(state: str) -> bool:
        rows = first.database.read(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND (state = %s OR wait_event_type = %s)",
            (state, state),
        )
        return bool(rows[0][0])

    with PostgresSessionRepo(postgres_url) as first, PostgresSessionRepo(postgres_url) as second:
        made = first.create(name="shared")
        made.append_message(user_message("hello"))
        text = first.export_jsonl(made.id)
        first.delete(made.id)
        header, rest = text.split("\n", 1)
        # The first replica's import reads its file from a pipe: its row is inserted, and not
        # yet committed, while the second replica looks whether the id is free.
        pipe_path = tmp_path / "slow.jsonl"
        os.mkfifo(pipe_path)
        imported: dict[str, Any] = {}

        def run(name: str, repo: PostgresSessionRepo, source: str | Path) -> None:
            try:
                imported[name] = repo.import_session(source, copy_if_taken=True)
            except Exception as error:  # said below
                imported[name] = error

        slow = threading.Thread(target=run, args=("slow", first, pipe_path))
        slow.start()
        quick = threading.Thread(target=run, args=("quick", second, text))
        with open(pipe_path, "w") as pipe:
            pipe.write(header + "\n")
            pipe.flush()
            for _ in range(500):  # bounded: the slow import holds its row, reading the pipe
                if activity("idle in transaction"):
                    break
                time.sleep(0.02)
            quick.start()
            for _ in range(500):  # bounded: the quick import waits for the slow one's row
                if activity("Lock"):
                    break
                time.sleep(0.02)
            pipe.write(rest)
        slow.join(30)
        quick.join(30)
        assert not slow.is_alive() and not quick.is_alive()
        ids = set()
        for name in ("slow", "quick"):
            result = imported[name]
            assert not isinstance(result, Exception), f"{name}: {result}"
            assert result.file_id == made.id
            ids.add(result.session.id)
            texts = [
                content_text(narrow(e.message, UserMessage).content)
                for e in second.open(result.session.id).get_entries()
                if isinstance(e, MessageEntry)
            ]
            assert texts == ["hello"]
        assert made.id in ids and len(ids) == 2


def test_a_session_made_again_on_another_replica_is_read_afresh(
    postgres_url: str, tmp_path: Path
) -> None:
    from test_sessions_sqlite import check_a_session_made_again_is_read_afresh

    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as first, PostgresSessionRepo(postgres_url) as second:
        check_a_session_made_again_is_read_afresh(first, second, tmp_path)


def test_a_database_newer_than_the_server_is_refused(postgres_url: str) -> None:
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    PostgresSessionRepo(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("UPDATE schema_version SET version = version + 1")
    with pytest.raises(SessionError, match="newer than this server"):
        PostgresSessionRepo(postgres_url)


def test_a_database_of_version_4_finds_chinese_and_japanese_words_once_upgraded(
    postgres_url: str,
) -> None:
    """Version 4 stored a run of CJK text as one word (so 天気 missed 東京の天気は晴れ):
    the migration splits each stored text as new ones are."""
    import psycopg

    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as repo:
        weather = repo.create()
        weather.append_message(user_message("東京の天気は晴れ, café"))
        plain = repo.create()
        plain.append_message(user_message("plain words"))
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(
            "UPDATE entries SET text = %s WHERE session_id = %s AND text IS NOT NULL",
            ["東京の天気は晴れ, café", weather.id],
        )
        db.execute("UPDATE schema_version SET version = 4")
    with PostgresSessionRepo(postgres_url) as repo:
        assert [s.id for s in repo.list(query="天気").items] == [weather.id]
        assert [s.id for s in repo.list(query="cafe").items] == [weather.id]
        assert [s.id for s in repo.list(query="plain").items] == [plain.id]
        assert repo.list(query="気天").items == []


def test_a_database_of_another_program_is_refused_before_anything_is_written(
    postgres_url: str,
) -> None:
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE sessions (token TEXT PRIMARY KEY, expires TIMESTAMPTZ)")
    with pytest.raises(SessionError, match="holds a table 'sessions' of another program"):
        PostgresSessionRepo(postgres_url)
    import subprocess

    command = [sys.executable, "-m", "mcp_agent", "sessions", "list", "--db", postgres_url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "another program" in done.stderr
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("DROP TABLE sessions")
        db.execute("CREATE TABLE schema_version (applied TEXT)")  # someone else's, by name
    with pytest.raises(SessionError, match="'schema_version' is another program's"):
        PostgresSessionRepo(postgres_url)
    with psycopg.connect(postgres_url) as db:
        tables = db.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace ="
            " 'public'::regnamespace"
        ).fetchall()
    assert tables == [("schema_version",)]  # nothing of ours was added


def test_a_command_that_only_reads_leaves_an_empty_database_as_it_found_it(
    postgres_url: str, tmp_path: Path
) -> None:
    """A database named by mistake (the server's `postgres` database, say) is not given our
    tables by `sessions list` and the like, as a SQLite file that does not exist is not
    created; a command that stores sessions makes them."""
    import subprocess

    import psycopg

    def tables() -> list[Any]:
        with psycopg.connect(postgres_url) as db:
            return db.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace ="
                " 'public'::regnamespace ORDER BY relname"
            ).fetchall()

    def sessions(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "mcp_agent", "sessions", *args, "--db", postgres_url]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    for args in (["list"], ["show", "x"], ["tree", "x"], ["export", "x"], ["delete", "x"]):
        done = sessions(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "holds no sessions" in done.stderr and "nothing was created" in done.stderr
    assert tables() == []
    pi_file = tmp_path / "one.jsonl"
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00Z"}
    pi_file.write_text(json.dumps(header) + "\n")
    assert sessions("import", str(pi_file)).returncode == 0
    assert ("sessions",) in tables()
    assert sessions("list").returncode == 0


def login_role(pg_cluster: Any, postgres_url: str, *grants: str) -> str:
    """A new login role granted each of ``grants`` ("SELECT ON ALL TABLES") in the public
    schema of the test database; the database's URL as that role."""
    import uuid

    import psycopg

    role = "r_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    with psycopg.connect(postgres_url, autocommit=True) as db:
        for grant in grants:
            what, _, on = grant.partition(" ON ")
            db.execute(f"GRANT {what} ON {on} IN SCHEMA public TO {role}")
    return postgres_url.replace("postgres@", f"{role}@")


def test_a_role_that_may_not_create_tables_opens_a_prepared_database(
    postgres_url: str, pg_cluster: Any
) -> None:
    """Opening only reads a current schema: a role without CREATE on the schema (PostgreSQL
    15's default for a new role) works in a database made by another, and is told what to do
    in one that has no session tables yet."""

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    empty = pg_cluster.new_database()
    with PostgresSessionRepo(postgres_url) as repo:
        made = repo.create(name="made by the owner").id
    as_role = login_role(
        pg_cluster,
        postgres_url,
        "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES",
        "USAGE ON ALL SEQUENCES",
    )
    role = as_role.split("://")[1].split("@")[0]
    with PostgresSessionRepo(as_role) as repo:
        assert repo.open(made).name == "made by the owner"
    with pytest.raises(SessionError, match="this role may not make them") as raised:
        PostgresSessionRepo(empty.replace("postgres@", f"{role}@"))
    assert "\n" not in str(raised.value)


def test_a_role_that_may_only_read_is_refused_by_what_writes(
    postgres_url: str, pg_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role granted SELECT alone reads the sessions; a run, a chat and the server refuse it
    up front, in one line naming the role (the server started, failed every write and logged
    a traceback at each lease renewal), as they refuse a read-only database."""

    import typer

    from mcp_agent.cli.common import check_database
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as repo:
        made = repo.create(name="kept").id
    as_role = login_role(pg_cluster, postgres_url, "SELECT ON ALL TABLES")
    role = as_role.split("://")[1].split("@")[0]
    with PostgresSessionRepo(as_role) as repo:
        assert repo.open(made).name == "kept"
    with pytest.raises(typer.Exit):
        check_database(as_role)
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and f"is read-only (the role {role} may not write to" in said
    check_database(postgres_url)  # the owner may


def test_a_read_only_database_with_session_tables_is_read(
    postgres_url: str, pg_cluster: Any
) -> None:
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as repo:
        made = repo.create(name="kept").id
    empty = pg_cluster.new_database()
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        for url in (postgres_url, empty):
            name = url.rsplit("/", 1)[1]
            admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    with PostgresSessionRepo(postgres_url) as repo:
        assert repo.open(made).name == "kept"
    with pytest.raises(SessionError, match="is read-only and has no session tables"):
        PostgresSessionRepo(empty)
    # What writes (a run, a chat, the server) refuses it up front, in one line.
    import subprocess

    for args in (["run", "hi", "--model", "scripted:echo"], ["serve"]):
        command = [sys.executable, "-m", "mcp_agent", *args, "--db", postgres_url]
        done = subprocess.run(
            command, input="", capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "is read-only" in done.stderr, done.stderr


def test_an_unreachable_database_is_a_clear_error() -> None:
    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    url = f"postgresql://someone:secret@127.0.0.1:{port}/nothing?connect_timeout=2"
    with pytest.raises(SessionError, match="cannot reach the session database") as raised:
        PostgresSessionRepo(url)
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("sslmode=bogus", 'invalid sslmode value: "bogus"'),
        ("sslmod=require", 'invalid URI query parameter: "sslmod"'),
        ("target_session_attrs=primary-ish", "invalid target_session_attrs value"),
    ],
)
def test_a_setting_the_client_does_not_take_blames_the_url_not_the_network(
    setting: str, said: str
) -> None:
    """libpq refuses a URL's own setting before it tries to connect: the message said the
    database could not be reached (or "could not be opened"), sending the user to look at the
    network or the server, where the URL was wrong."""
    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    url = f"postgresql://someone:secret@127.0.0.1:9/db?{setting}"
    with pytest.raises(SessionError) as raised:
        PostgresSessionRepo(url)
    message = str(raised.value)
    assert "holds a setting PostgreSQL's client does not take" in message, message
    assert said in message and "correct it in --db or MCP_AGENT_DB" in message, message
    assert "cannot reach" not in message and "secret" not in message, message


def test_a_password_in_the_urls_query_is_not_shown(pg_cluster: Any) -> None:
    """libpq takes the password as a parameter of the URL too (``?password=…``, as tools that
    build URLs from settings write it): a message that names the database keeps it out."""
    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    url = (
        f"postgresql://postgres@127.0.0.1:{pg_cluster.port}/no_such_db"
        "?sslmode=disable&password=hunter2-secret&sslpassword=other-secret"
    )
    with pytest.raises(SessionError, match="cannot reach the session database") as raised:
        PostgresSessionRepo(url)
    said = str(raised.value)
    assert "no_such_db" in said and "does not exist" in said, said
    assert "hunter2" not in said and "other-secret" not in said, said
    assert "password=***" in said and "sslmode=disable" in said, said


@contextmanager
def altered(admin: Any, name: str, change: str, undo: str) -> Iterator[None]:
    """``ALTER DATABASE name change`` for the block, its connections dropped so that new ones
    meet the change (and again after ``undo``)."""

    def drop() -> None:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )

    admin.execute(f"ALTER DATABASE {name} {change}")
    drop()
    try:
        yield
    finally:
        admin.execute(f"ALTER DATABASE {name} {undo}")
        drop()


def test_a_database_gone_after_the_start_is_said_to_be_unreachable(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool only retries when the database is down: what the caller waited for is a
    database it cannot reach, not connections that "stayed busy"."""
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(database, "POOL_TIMEOUT_S", 2.0)
    name = postgres_url.rsplit("/", 1)[1]
    with PostgresSessionRepo(postgres_url) as repo:
        session_id = repo.create(name="kept").id
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            with altered(admin, name, "ALLOW_CONNECTIONS false", "ALLOW_CONNECTIONS true"):
                with pytest.raises(SessionError) as raised:
                    repo.open(session_id).append_message(user_message("lost?"))
                assert raised.value.code == "storage", raised.value
                said = str(raised.value)
                assert "cannot reach the session database" in said, said
                assert "nothing was written" in said and "busy" not in said
                # Known down: the next call says so without waiting for the pool again.
                waits: list[float | None] = []
                pool_connection = repo.database.pool.connection

                def counted(timeout: float | None = None) -> Any:
                    waits.append(timeout)
                    return pool_connection(timeout)

                monkeypatch.setattr(repo.database.pool, "connection", counted)
                with pytest.raises(SessionError, match="cannot reach the session database"):
                    repo.open(session_id).append_message(user_message("lost again?"))
                assert waits == []
        # Back: the pool reconnects, and the session is as it was.
        session = repo.open(session_id)
        assert session.name == "kept" and session.get_entries()[-1].type == "session_info"


async def test_an_outage_is_said_once_when_it_starts_and_once_when_it_ends(
    postgres_url: str,
    pg_cluster: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the database was down, every replica logged a traceback each second (the change
    feed reconnecting), the pool a warning at each try, and the lease renewal one at each
    round. Now each part says it once, in one line, when it starts and when it is over."""
    import logging

    import psycopg

    from mcp_agent.blocking import worker_threads
    from mcp_agent.runtime import runs
    from mcp_agent.runtime.leases import PostgresLeases
    from mcp_agent.server import pg_bus
    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(database, "POOL_TIMEOUT_S", 0.3)
    monkeypatch.setattr(pg_bus, "RETRY_SECONDS", 0.05)
    monkeypatch.setattr(runs, "RENEW_EVERY", 0.05)
    caplog.set_level(logging.INFO)
    name = postgres_url.rsplit("/", 1)[1]
    bus = pg_bus.PostgresBus(postgres_url)
    with PostgresSessionRepo(postgres_url) as repo:
        offload = worker_threads(2)
        async with anyio.create_task_group() as group:
            manager = runs.RunManager(group, PostgresLeases(repo.database), offload=offload)
            group.start_soon(bus.run)
            group.start_soon(manager.keep_leases)
            await bus.listening_since.wait()
            with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
                with altered(admin, name, "ALLOW_CONNECTIONS false", "ALLOW_CONNECTIONS true"):
                    for _ in range(10):
                        with pytest.raises(SessionError, match="cannot reach"):
                            await offload(lambda: repo.database.read("SELECT 1"))
                        await anyio.sleep(0.1)

            def over() -> list[str]:
                return [r.getMessage() for r in caplog.records if "over, after" in r.getMessage()]

            for _ in range(100):  # bounded: back within a round or two
                try:
                    await offload(lambda: repo.database.read("SELECT 1"))
                except SessionError:
                    pass
                if len(over()) >= 2:
                    break
                await anyio.sleep(0.1)
            await anyio.sleep(0.3)  # a few renewals after it
            group.cancel_scope.cancel()
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in said if r.exc_info], [r.getMessage() for r in said]
    assert not [r for r in said if r.name == "psycopg.pool" and "connecting" in r.msg]
    for what in ("the session database", "the change feed from other replicas"):
        mine = [r.getMessage() for r in said if r.getMessage().startswith(what)]
        assert len(mine) == 2 and "over, after" in mine[1], mine
    assert len(said) <= 6, [r.getMessage() for r in said]  # and the renewal's own, once


def test_a_call_made_while_the_database_is_down_is_told_so_without_the_pools_whole_wait(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that came while the database was down waited the pool's whole timeout (30 s):
    the pool tries to connect only when a caller joins its line, so one already waiting when
    its last try gave up was not served even once the database was back, and was then told
    that every connection "stayed busy". It waits in turns now, looking between them."""
    import psycopg

    from mcp_agent.sessions import SessionError, Unreachable
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(database, "POOL_TURN_S", 0.2)
    monkeypatch.setattr(database, "RECONNECT_S", 0.25)
    name = postgres_url.rsplit("/", 1)[1]
    with PostgresSessionRepo(postgres_url) as repo:
        session_id = repo.create(name="kept").id
        failed: list[SessionError] = []

        def call() -> None:
            try:
                repo.open(session_id)
            except SessionError as error:
                failed.append(error)

        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            with altered(admin, name, "ALLOW_CONNECTIONS false", "ALLOW_CONNECTIONS true"):
                caller = threading.Thread(target=call, daemon=True)
                caller.start()
                caller.join(10)  # a hang guard: the pool's timeout is 30 s
                assert not caller.is_alive(), "the call waited out the pool's timeout"
        [error] = failed
        assert isinstance(error, Unreachable), error
        assert repo.open(session_id).name == "kept"  # and once it is back, at once


def test_a_database_back_after_a_while_away_is_used_at_once(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's pause between tries to reconnect doubles while the database is away; once
    it is back, the next call is answered, not told the pool "stayed busy" while the pool
    waits for its next try. (Time runs twenty times faster here: pauses from 0.05 s.)"""
    import psycopg
    from psycopg_pool.base import AttemptWithBackoff

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.05)
    monkeypatch.setattr(database, "POOL_TIMEOUT_S", 0.5)
    monkeypatch.setattr(database, "RECONNECT_S", 0.25)
    name = postgres_url.rsplit("/", 1)[1]
    with PostgresSessionRepo(postgres_url) as repo:
        session_id = repo.create(name="kept").id
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            with altered(admin, name, "ALLOW_CONNECTIONS false", "ALLOW_CONNECTIONS true"):
                with pytest.raises(SessionError, match="cannot reach the session database"):
                    repo.open(session_id)
                # Away long enough for the pool's next try to be more than its timeout away
                # (tries at 0.05, 0.15, 0.35, 0.75, 1.55, 3.15 s).
                time.sleep(1.8)
        assert repo.open(session_id).name == "kept"


def test_connections_the_database_dropped_are_replaced_at_once(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the database dropped every connection (a restart, a failover), the next call is
    answered at once: the pool's dead idle connections are not tried one by one, with a
    growing pause between, until the caller is told the pool "stayed busy"."""
    import psycopg
    from psycopg_pool import ConnectionPool

    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(database, "POOL_TIMEOUT_S", 5.0)  # the pauses alone: 1 + 2 + 4 s
    found_dead: list[object] = []
    check = ConnectionPool.check_connection

    def counted(conn: Any) -> None:
        try:
            check(conn)
        except psycopg.Error:
            found_dead.append(conn)
            raise

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    with PostgresSessionRepo(postgres_url) as repo:
        session_id = repo.create(name="kept").id
        pool = repo.database.pool
        held = [pool.getconn() for _ in range(6)]  # six idle connections once given back
        for conn in held:
            pool.putconn(conn)
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [postgres_url.rsplit("/", 1)[1]],
            )
        assert repo.open(session_id).name == "kept"
        # The first dead one found drops the others: none is tried after a pause.
        assert len(found_dead) == 1


def test_a_table_another_program_keeps_locked_is_a_clear_error_in_bounded_time(
    postgres_url: str,
) -> None:
    """A lock another program holds (LOCK TABLE, a transaction left open) is waited for up to
    the lock timeout, as SQLite's busy timeout: then the call says so, and nothing was
    written; it did not hang, holding a worker thread, for as long as the lock was held."""
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url, lock_timeout=0.3) as repo:
        session = repo.create(name="kept")
        before = len(session.get_entries())
        with psycopg.connect(postgres_url) as locker:
            locker.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            # The lock is let go after 30 s at the latest: a call that waited for it would
            # then go through, and not raise what the lock timeout raises.
            let_go = threading.Timer(30, locker.rollback)
            let_go.start()
            for attempt in (
                lambda: session.append_message(user_message("lost?")),
                lambda: repo.open(session.id),
            ):
                with pytest.raises(SessionError) as raised:
                    attempt()
                said = str(raised.value)
                assert raised.value.code == "busy", said
                assert "stayed locked by another transaction for 0.3 s" in said, said
                assert said.endswith("nothing was written, try again"), said
            let_go.cancel()
            locker.rollback()
        assert len(repo.open(session.id).get_entries()) == before
        session.append_message(user_message("kept"))


def test_writes_queued_in_one_server_for_a_held_session_wait_one_lock_timeout(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes to one session in one server take turns (its storage's lock), and the one whose
    turn it is waits for the session's row up to the lock timeout: with the row held by a long
    transaction, the writers queued behind waited one lock timeout after another, the fourth
    four minutes where 60 s is said, each on a worker thread (measured: two replicas, four
    clients appending to a session whose row a transaction held for 150 s). A writer waits
    for its turn as long as for the row, then is told why."""
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, row_lock

    monkeypatch.setattr(row_lock, "LOCK_TURN_S", 60.0)  # the holder is not taken for stuck
    with PostgresSessionRepo(postgres_url, lock_timeout=2) as repo:
        session_id = repo.create(name="held").id
        said: list[str] = []

        def append(text: str) -> None:
            try:
                repo.open(session_id).append_message(user_message(text))
                said.append("stored")
            except SessionError as error:
                said.append(str(error))

        def waiting_for_the_row() -> bool:
            [(count,)] = repo.database.read(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            return bool(count)

        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [session_id])
            first = threading.Thread(target=append, args=("first",))
            first.start()
            for _ in range(500):  # bounded: the first write waits for the row
                if waiting_for_the_row():
                    break
                time.sleep(0.01)
            queued = [threading.Thread(target=append, args=(t,)) for t in ("second", "third")]
            for thread in queued:
                thread.start()
            for thread in [first, *queued]:
                thread.join(60)
            assert not any(t.is_alive() for t in [first, *queued])
        # The first waited for the row. The two queued behind it waited for their turn as
        # long, and were told so; or one had its turn (the first's wait over before theirs)
        # and waited for the row in turn. None waited behind two waits for the row.
        row_waits = [s for s in said if "stayed locked by another transaction" in s]
        turn_waits = [s for s in said if "another write to it here has waited 2 s" in s]
        assert len(row_waits) in (1, 2) and len(row_waits) + len(turn_waits) == 3, said
        assert all(s.endswith("nothing was written, try again") for s in turn_waits)
        assert repo.open(session_id).get_entries()[-1].type == "session_info"


# As many as the server has worker threads (db_threads): eight clients took them all; one
# client, as here, the line of its own it has (all but one).
HELD_WRITERS = 8


@contextmanager
def held_session_server(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, lock_timeout: float
) -> Iterator[tuple[MCPServer, list[Any]]]:
    """A server over ``postgres_url`` whose database waits ``lock_timeout`` s for a lock, and
    the RunManager it makes (in the list, once a client has started it); a holder that does
    nothing is not taken for stuck (row_lock), as a long statement would not be."""
    import functools

    from mcp_agent.runtime import application
    from mcp_agent.sessions import postgres
    from mcp_agent.sessions.postgres import row_lock

    managers: list[Any] = []

    class Seen(application.RunManager):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            managers.append(self)

    monkeypatch.setattr(row_lock, "LOCK_TURN_S", 600.0)
    monkeypatch.setattr(
        postgres,
        "PostgresSessionRepo",
        functools.partial(postgres.PostgresSessionRepo, lock_timeout=lock_timeout),
    )
    monkeypatch.setattr(application, "RunManager", Seen)
    yield make_server(tmp_path, db_url=postgres_url), managers


def stored_texts(postgres_url: str, session_id: str) -> list[str]:
    with psycopg_connect(postgres_url) as db:
        rows = db.execute(
            "SELECT data FROM entries WHERE session_id = %s AND type = 'message' ORDER BY seq",
            [session_id],
        ).fetchall()
    texts = []
    for (data,) in rows:
        content = json.loads(data)["message"]["content"]
        parts = [content] if isinstance(content, str) else [part["text"] for part in content]
        texts.append("".join(parts))
    return texts


def psycopg_connect(url: str, **options: Any) -> Any:
    import psycopg

    return psycopg.connect(url, **options)


async def appends_queued(runs: Any, session_id: str, postgres_url: str) -> None:
    """Until every held writer's call is under way in the server and one waits for the row."""
    with psycopg_connect(postgres_url, autocommit=True) as look:
        for _ in range(2000):  # bounded
            [(waiting,)] = look.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchall()
            if waiting and runs._writing.get(session_id) == HELD_WRITERS:
                return
            await anyio.sleep(0.01)
    raise AssertionError("the appends never all waited")


async def test_writes_waiting_for_a_held_session_hold_up_no_other_session(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a session's row held by another transaction (a psql session's SELECT … FOR UPDATE,
    a replica stuck mid-transaction), eight appends to it through one server took every worker
    thread the server had (or all of their clients' lines): the first waiting for the row,
    the others for their turn behind it. Every read and write of every other session through
    that server then waited too, up to the lock timeout (a minute). Queued writes now wait for their turn on the event loop:
    only the held session's writes wait, and each that is answered as stored is stored."""
    with held_session_server(tmp_path, postgres_url, monkeypatch, lock_timeout=30) as (
        server,
        managers,
    ):
        async with Client(server) as client:
            held = (await call(client, "session_create"))["id"]
            other = (await call(client, "session_create"))["id"]
            [runs] = managers
            answers: dict[int, str] = {}

            async def append_held(n: int) -> None:
                result = await client.call_tool(
                    "session_append", {"session_id": held, "entry": user(f"held {n}")}
                )
                answers[n] = narrow(result.content[0], TextContent).text if result.is_error else ""

            answered_first: list[int] = []
            other_done = anyio.Event()

            async def use_other() -> None:
                await call(client, "session_append", session_id=other, entry=user("other"))
                await call(client, "session_get", session_id=other)
                await call(client, "session_list")
                answered_first.append(len(answers))
                other_done.set()

            with psycopg_connect(postgres_url) as holder:
                holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [held])
                async with anyio.create_task_group() as group:
                    for n in range(HELD_WRITERS):
                        group.start_soon(append_held, n)
                    await appends_queued(runs, held, postgres_url)
                    group.start_soon(use_other)
                    # Bounded, well within the lock timeout: then the row goes, and every
                    # write goes through.
                    with anyio.move_on_after(15):
                        await other_done.wait()
                    holder.rollback()
            assert answered_first == [0], (
                "the other session's reads and writes waited for the held session's"
                f" writers ({answered_first} of them answered first)"
            )
            assert all(not error for error in answers.values()), answers
            stored = stored_texts(postgres_url, held)
            assert sorted(stored) == sorted(f"held {n}" for n in range(HELD_WRITERS))
            assert stored_texts(postgres_url, other) == ["other"]
            assert not runs._writing  # nothing kept for the writes gone


async def test_writes_queued_for_a_held_session_are_refused_after_a_lock_timeout(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes queued for a held session wait for their turn as long as the database waits for
    the row (the lock timeout), then are told so; the one whose turn it is waits for the row
    as long, then is told that. Nothing refused is written, and the session takes writes once
    the row is free."""
    with held_session_server(tmp_path, postgres_url, monkeypatch, lock_timeout=2) as (
        server,
        managers,
    ):
        async with Client(server) as client:
            held = (await call(client, "session_create"))["id"]
            [runs] = managers
            said: list[str] = []

            async def append_held(n: int) -> None:
                said.append(
                    await call_error(
                        client, "session_append", session_id=held, entry=user(f"held {n}")
                    )
                )

            with psycopg_connect(postgres_url) as holder:
                holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [held])
                async with anyio.create_task_group() as group:
                    for n in range(HELD_WRITERS):
                        group.start_soon(append_held, n)
                    await appends_queued(runs, held, postgres_url)
                holder.rollback()
            row_waits = [s for s in said if "stayed locked by another transaction for 2 s" in s]
            turn_waits = [s for s in said if "another write to it here has waited 2 s" in s]
            assert row_waits and len(row_waits) + len(turn_waits) == HELD_WRITERS, said
            assert all("nothing was written, try again" in s for s in said), said
            assert stored_texts(postgres_url, held) == []
            await call(client, "session_append", session_id=held, entry=user("free"))
            assert stored_texts(postgres_url, held) == ["free"]


def test_a_frozen_holder_of_a_session_is_said_within_a_turn_of_the_wait(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend frozen (SIGSTOP) while its transaction held a session's row kept every append
    there waiting the whole lock timeout (60 s, a worker thread each), and those queued behind
    the first up to the statement timeout. A holder that has run nothing for a whole turn of
    the wait is said at once; one that works (a statement running) is waited for, and the
    append then stored once."""
    import signal

    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, row_lock

    monkeypatch.setattr(row_lock, "LOCK_TURN_S", 0.3)
    with PostgresSessionRepo(postgres_url, lock_timeout=30) as repo:
        session = repo.create(name="kept")
        before = [e.id for e in session.get_entries()]
        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [session.id])
            pid = holder.info.backend_pid
            os.kill(pid, signal.SIGSTOP)
            try:
                with pytest.raises(SessionError) as raised:
                    session.append_message(user_message("lost?"))
            finally:
                os.kill(pid, signal.SIGCONT)
            said = str(raised.value)
            assert raised.value.code == "busy", said
            assert f"held by a transaction on the session database {repo.database.where}" in said
            assert f"(PostgreSQL backend {pid}, idle in transaction: frozen" in said, said
            assert said.endswith("nothing was written, try again"), said
            assert [e.id for e in repo.open(session.id).get_entries()] == before

            # A holder at work (running a statement) is waited for, past a turn.
            def work() -> None:
                holder.execute("SELECT pg_sleep(1)")
                holder.commit()

            working = threading.Thread(target=work)
            working.start()
            kept = session.append_message(user_message("kept"))
            working.join()
        entries = [e.id for e in repo.open(session.id).get_entries()]
        assert entries == [*before, kept]


def test_a_transaction_whose_client_stopped_lets_its_session_go(postgres_url: str) -> None:
    """A replica frozen (SIGSTOP, its machine paused) while its transaction held a session's
    row kept that session from every other replica for as long as it stayed frozen. The
    database ends a transaction idle that long (the statement timeout): the session is free
    again, and the frozen one, back, finds its connection gone, its change not written. An
    import reading its file slowly is not cut."""
    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.entries import new_entry_id
    from mcp_agent.sessions.pi import SessionStream
    from mcp_agent.sessions.postgres import PostgresSessionRepo, PostgresSessionStorage

    with (
        PostgresSessionRepo(postgres_url, statement_timeout=1) as frozen,
        PostgresSessionRepo(postgres_url) as other,
    ):
        session = frozen.create(name="kept")

        def stops(conn: Any) -> None:
            conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [session.id])
            time.sleep(2.5)  # frozen between two statements
            conn.execute("UPDATE sessions SET name = 'lost' WHERE id = %s", [session.id])

        with pytest.raises(SessionError):
            frozen.database.write(stops)
        kept = other.open(session.id).append_message(user_message("kept"))
        entries = other.open(session.id)
        assert entries.name == "kept" and entries.get_entries()[-1].id == kept

        header = {
            "type": "session",
            "version": 3,
            "id": "0193a8f6-aaaa-7000-8000-000000000001",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/",
        }
        entry = {
            "type": "message",
            "id": "a1",
            "parentId": None,
            "timestamp": "2026-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": "slow", "timestamp": 1},
        }

        def slowly() -> Iterator[tuple[int, dict[str, Any]]]:
            yield 1, header
            time.sleep(2.5)  # a pipe that takes its time
            yield 2, entry

        stream = SessionStream(slowly(), "<pipe>", "invalid_import", new_entry_id)
        imported = PostgresSessionStorage.import_stream(frozen.database, stream)
        assert len(frozen.open(imported.session_id).get_entries()) == 1


def test_a_frozen_backend_holds_no_call_for_good(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend that stops answering on a live connection (SIGSTOP: its kernel still answers
    keepalives) held the call on it, and the worker thread serving it, for as long as it was
    frozen. Every wait for the database is bounded: a statement that runs too long is
    cancelled by the database (``statement_timeout``), one whose backend answers nothing is
    given up here a little later, each with a clear error; nothing acknowledged is lost, and
    an idle connection found frozen is dropped for another."""
    import signal

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(database, "STATEMENT_GRACE_S", 0.5)
    frozen: list[int] = []

    def freeze(conn: Any, _session_id: str) -> None:
        if not frozen:  # the append's own backend, in its transaction
            frozen.append(conn.info.backend_pid)
            os.kill(frozen[0], signal.SIGSTOP)

    failed: list[BaseException] = []
    with PostgresSessionRepo(postgres_url, statement_timeout=0.5, max_connections=2) as repo:
        session = repo.create(name="kept")
        acknowledged = session.append_message(user_message("kept"))
        with pytest.raises(SessionError) as raised:
            repo.database.read("SELECT pg_sleep(30)")
        said = str(raised.value)
        assert "cancelled after running up to 0.5 s (the statement timeout" in said, said
        assert said.endswith("nothing was written, try again"), said

        def append() -> None:
            try:
                session.append_message(user_message("lost?"))
            except BaseException as error:
                failed.append(error)

        repo.database.session_guard = freeze
        appender = threading.Thread(target=append, daemon=True)
        try:
            appender.start()
            appender.join(30)  # a hang guard: the bound is about a second
            assert not appender.is_alive(), "the append waited for the frozen backend"
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        repo.database.session_guard = None
        [error] = failed
        assert isinstance(error, SessionError), error
        assert "answered nothing for 1 s" in str(error), error
        entries = repo.open(session.id).get_entries()
        assert [e.id for e in entries if isinstance(e, MessageEntry)] == [acknowledged]

        # An idle connection frozen in the pool: its check gives it up, another is lent.
        [(pid,)] = repo.database.read("SELECT pg_backend_pid()")
        os.kill(pid, signal.SIGSTOP)
        read: list[Any] = []
        try:
            reader = threading.Thread(
                target=lambda: read.extend(repo.database.read("SELECT 1")), daemon=True
            )
            reader.start()
            reader.join(30)
            assert not reader.is_alive(), "the read waited for the frozen backend"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert read == [(1,)]
        session.append_message(user_message("after"))


def test_a_migration_longer_than_the_statement_timeout_is_not_cut(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration of a large database may take longer than any statement a request runs:
    the first connection, which migrates, is not bounded (a replica starting meanwhile waits
    for it under the migrations' lock)."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    steps = [*database.MIGRATIONS, "SELECT pg_sleep(1.5)"]
    monkeypatch.setattr(database, "MIGRATIONS", steps)
    monkeypatch.setattr(database, "SCHEMA_VERSION", len(steps))
    monkeypatch.setattr(database, "STATEMENT_GRACE_S", 0.2)
    with PostgresSessionRepo(postgres_url, statement_timeout=0.5) as repo:
        assert repo.database.read("SELECT version FROM schema_version") == [(len(steps),)]


def test_options_the_url_gives_are_kept(postgres_url: str) -> None:
    """``?options=-c …`` in the URL (a search_path, a setting of the site's) was replaced by
    the server's own options on every pooled connection."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(f"{postgres_url}?options=-c%20work_mem%3D1234kB") as repo:
        [(work_mem, timeout)] = repo.database.read(
            "SELECT current_setting('work_mem'), current_setting('statement_timeout')"
        )
    assert (work_mem, timeout) == ("1234kB", "90s")


def test_a_read_only_database_is_said_so_and_nothing_is_written(
    postgres_url: str, pg_cluster: Any
) -> None:
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    name = postgres_url.rsplit("/", 1)[1]
    with PostgresSessionRepo(postgres_url) as repo:
        session = repo.create(name="kept")
        before = len(session.get_entries())
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            on, off = (
                "SET default_transaction_read_only = on",
                "RESET default_transaction_read_only",
            )
            with altered(admin, name, on, off):
                with pytest.raises(SessionError) as raised:
                    session.append_message(user_message("lost?"))
                said = str(raised.value)
                assert "is read-only" in said and "nothing was written" in said, said
        assert len(repo.open(session.id).get_entries()) == before


def test_a_full_disk_is_said_as_such_and_nothing_is_written(postgres_url: str) -> None:
    """A database whose disk was full ("could not extend file …: No space left on device",
    SQLSTATE 53100, psycopg's OperationalError as a lost connection is) was said to have
    "broken the connection": an append was read back and made again on a new connection
    before it said so, and a run's start was told "a write under way is either whole or
    absent, read before writing it again". The statement failed and its transaction was
    rolled back: that is said, and that nothing was written. (The database raises the error
    from a trigger here: a disk of the test's own to fill would need a mount.)"""
    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    full = (
        "RAISE EXCEPTION USING ERRCODE = 'disk_full', MESSAGE = 'could not extend file"
        " base/1/2: No space left on device', HINT = 'Check free disk space.';"
    )
    with PostgresSessionRepo(postgres_url) as repo:
        session = repo.create(name="kept")
        before = len(session.get_entries())
        repo.database.write(
            lambda conn: conn.execute(
                "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql"
                f" AS $$ BEGIN {full} END $$"
            )
        )
        repo.database.write(
            lambda conn: conn.execute(
                "CREATE TRIGGER disk_is_full BEFORE INSERT ON entries"
                " FOR EACH ROW EXECUTE FUNCTION disk_full()"
            )
        )
        with pytest.raises(SessionError) as raised:
            session.append_message(user_message("lost?"))
        said = str(raised.value)
        assert "the disk holding the session database" in said and "is full" in said, said
        assert "No space left on device" in said and "nothing was written" in said, said
        assert "broke" not in said, said
        with pytest.raises(SessionError) as raised:
            repo.database.write(lambda conn: conn.execute(f"DO $$ BEGIN {full} END $$"))
        said = str(raised.value)
        assert "No space left on device" in said and "nothing was written" in said, said
        assert "broke" not in said and "whole or absent" not in said, said
        repo.database.write(lambda conn: conn.execute("DROP TRIGGER disk_is_full ON entries"))
        session.append_message(user_message("kept"))
        assert len(repo.open(session.id).get_entries()) == before + 1


def test_an_append_whose_connection_broke_is_read_back_and_made_again_if_absent(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that breaks during an append, perhaps during its commit, leaves it whole or
    absent: another connection reads which (once the session's row is free), so the append
    either stands or, absent, is made once more on a new connection: a connection dropped
    under it (a restart or failover of the database, pg_terminate_backend) failed the append,
    and a run saving its message ended in error. Broken twice, it says nothing was written."""
    import psycopg

    from mcp_agent.sessions import SessionError
    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    def waiting_on_the_row(admin: Any) -> list[int]:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            [postgres_url.rsplit("/", 1)[1]],
        ).fetchall()
        return [row[0] for row in rows]

    with PostgresSessionRepo(postgres_url) as repo:
        session = repo.create(name="kept")
        before = len(session.get_entries())
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
            # Absent: the append's backend is killed while it waits for the session's row.
            holder = psycopg.connect(postgres_url)
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [session.id])
            failed: list[SessionError] = []

            def append() -> None:
                try:
                    session.append_message(user_message("lost"))
                except SessionError as error:
                    failed.append(error)

            appender = threading.Thread(target=append)
            appender.start()
            while not (blocked := waiting_on_the_row(admin)):
                time.sleep(0.02)
            admin.execute("SELECT pg_terminate_backend(%s)", [blocked[0]])
            # The check waits for the row too (an append that did not check ends here).
            while appender.is_alive() and waiting_on_the_row(admin) in ([], blocked):
                time.sleep(0.02)
            holder.rollback()
            holder.close()
            appender.join()
        assert failed == []
        entries = repo.open(session.id).get_entries()
        assert len(entries) == before + 1 and "lost" in entries[-1].model_dump_json()
        before += 1

        # Broken again on the new connection: said, and nothing is written.
        write = repo.database.write
        calls: list[int] = []

        def appends_break(work: Any) -> Any:
            calls.append(1)
            if len(calls) % 2:  # each append's own transaction; the read back goes through
                raise database.BrokenConnection(repo.database.where, "terminated")
            return write(work)

        monkeypatch.setattr(repo.database, "write", appends_break)
        with pytest.raises(SessionError) as raised:
            session.append_message(user_message("twice broken"))
        assert str(raised.value).endswith("nothing was written, try again"), raised.value
        assert len(calls) == 4
        monkeypatch.setattr(repo.database, "write", write)
        assert len(repo.open(session.id).get_entries()) == before

        # Whole: the connection breaks after the commit, before the answer came back.
        broke: list[bool] = []

        def commit_then_break(work: Any) -> Any:
            result = write(work)
            if not broke:
                broke.append(True)
                raise database.BrokenConnection(repo.database.where, "server closed the connection")
            return result

        monkeypatch.setattr(repo.database, "write", commit_then_break)
        kept = session.append_message(user_message("kept"))
        entries = repo.open(session.id).get_entries()
        assert [e.id for e in entries].count(kept) == 1 and len(entries) == before + 1


def test_an_append_whose_connection_broke_in_an_outage_is_read_back_once_the_database_is_back(
    postgres_url: str, pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append whose connection broke as the database went away was read back at once,
    found the database still down and said its fate unknown ("either whole or absent, read
    before writing it again"), though it had been written: the client, told to check, could
    not. It is read again once the database is back: written, it stands (once); absent, it
    is made then."""
    import psycopg
    from psycopg_pool.base import AttemptWithBackoff

    from mcp_agent.sessions.postgres import PostgresSessionRepo, database

    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.05)
    monkeypatch.setattr(database, "RECONNECT_S", 0.25)
    name = postgres_url.rsplit("/", 1)[1]
    with (
        PostgresSessionRepo(postgres_url) as repo,
        psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin,
    ):
        session = repo.create(name="kept")
        write = repo.database.write
        for committed in (True, False):
            before = [e.id for e in repo.open(session.id).get_entries()]
            calls: list[int] = []

            def goes_away(
                work: Any,
                within: float | None = None,
                calls: list[int] = calls,
                put: bool = committed,
            ) -> Any:
                calls.append(1)
                if len(calls) > 1:
                    return write(work, within)
                if put:
                    write(work)
                # The database goes away for a while as the answer comes back.
                admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    [name],
                )
                threading.Timer(
                    2.5, lambda: admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
                ).start()
                raise database.BrokenConnection(repo.database.where, "terminated")

            monkeypatch.setattr(repo.database, "write", goes_away)
            kept = session.append_message(user_message(f"kept {committed}"))
            monkeypatch.setattr(repo.database, "write", write)
            assert len(calls) > 2  # read back while down, then once back
            entries = [e.id for e in repo.open(session.id).get_entries()]
            assert entries == [*before, kept]


def user_message(text: str) -> UserMessage:
    return UserMessage(content=text)


def test_the_command_line_reads_a_postgresql_url(postgres_url: str) -> None:
    import subprocess

    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as repo:
        made = repo.create(name="in postgres")
        made.append_message(user_message("searchable words"))
    for args in (["--db", postgres_url], []):
        done = subprocess.run(
            [sys.executable, "-m", "mcp_agent", "sessions", "list", "--json", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "MCP_AGENT_DB": postgres_url},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert [s["id"] for s in json.loads(done.stdout)["sessions"]] == [made.id]


# --- sessions copy ----------------------------------------------------------------------------


def _fill(repo: Any, sessions: int) -> dict[str, str]:
    """Sessions with branches, labels, a rename and leaf moves; their pi JSONL by id."""
    from mcp_agent.messages import AssistantMessage, TextContent

    for n in range(sessions):
        session = repo.create(name=f"session {n}")
        first = session.append_message(user_message(f"question {n}"))
        session.append_message(
            AssistantMessage(content=[TextContent(text=f"answer {n}")], timestamp=2)
        )
        session.append_label(first, "start")
        session.move_to(first, summary={"summary": "went back"})
        for i in range(n):
            session.append_message(user_message(f"more {n}.{i}"))
    return {s.id: repo.export_jsonl(s.id) for s in repo.list(limit=1000).items}


def _copy(*args: str) -> Any:
    from typer.testing import CliRunner

    from mcp_agent.cli import app

    return CliRunner().invoke(app, ["sessions", "copy", *args, "--json"])


def test_copy_moves_every_session_between_all_stores(tmp_path: Path, postgres_url: str) -> None:
    from mcp_agent.sessions import JsonlSessionRepo, SqliteSessionRepo
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with SqliteSessionRepo(tmp_path / "a.db") as repo:
        expected = _fill(repo, 7)
    folder = tmp_path / "jsonl"
    folder.mkdir()
    hops = [str(tmp_path / "a.db"), postgres_url, str(folder), str(tmp_path / "b.db")]
    for source, target in itertools.pairwise(hops):
        done = _copy("--from", source, "--to", target)
        assert done.exit_code == 0, done.output
        assert sorted(json.loads(done.stdout)["copied"]) == sorted(expected)
    for store in (
        PostgresSessionRepo(postgres_url),
        JsonlSessionRepo(folder),
        SqliteSessionRepo(tmp_path / "b.db"),
    ):
        with store:
            assert {sid: store.export_jsonl(sid) for sid in expected} == expected
            assert store.summary(next(iter(expected))).message_count > 0
    upto, newest = search_index_marks(tmp_path / "b.db")  # the copy indexed it for search
    assert upto == newest > 0
    again = _copy("--from", str(tmp_path / "a.db"), "--to", postgres_url)
    assert again.exit_code == 0 and json.loads(again.stdout)["copied"] == []
    assert sorted(json.loads(again.stdout)["present"]) == sorted(expected)


def test_copy_stores_each_session_whole_or_not_at_all(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    from mcp_agent.sessions import SqliteSessionRepo
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with SqliteSessionRepo(tmp_path / "a.db") as repo:
        expected = _fill(repo, 4)
        doomed = next(s.id for s in repo.list().items if s.name == "session 3")
    PostgresSessionRepo(postgres_url).close()  # the schema
    with psycopg.connect(postgres_url, autocommit=True) as db:
        # The database itself fails the fifth entry of one session, mid-way through its copy.
        db.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.session_id = '" + doomed + "' AND NEW.seq = 4 THEN"
            " RAISE EXCEPTION 'disk on fire'; END IF; RETURN NEW; END $$"
        )
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON entries FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    done = _copy("--from", str(tmp_path / "a.db"), "--to", postgres_url)
    assert done.exit_code == 1, (done.output, done.exception)
    answer = json.loads(done.stdout)
    assert [f["sessionId"] for f in answer["failed"]] == [doomed]
    assert "disk on fire" in answer["failed"][0]["error"] and doomed in done.stderr
    with PostgresSessionRepo(postgres_url) as target, psycopg.connect(postgres_url) as db:
        assert not target.exists(doomed)
        assert db.execute(
            "SELECT count(*) FROM entries WHERE session_id = %s", (doomed,)
        ).fetchone() == (0,)
        for sid in set(expected) - {doomed}:
            assert target.export_jsonl(sid) == expected[sid]


def test_copy_refuses_the_same_store_and_a_store_it_cannot_open(tmp_path: Path) -> None:
    same = _copy("--from", str(tmp_path / "a.db"), "--to", str(tmp_path / "a.db"))
    assert same.exit_code == 2 and "same store" in same.stderr
    from mcp_agent.sessions import SqliteSessionRepo

    SqliteSessionRepo(tmp_path / "a.db").close()
    (tmp_path / "link.db").symlink_to(tmp_path / "a.db")
    for spelled in (f"{tmp_path}/./a.db", str(tmp_path / "link.db")):
        same = _copy("--from", str(tmp_path / "a.db"), "--to", spelled)
        assert same.exit_code == 2 and "same store" in same.stderr, spelled
    bad = _copy("--from", "postgresql://nobody@127.0.0.1:1/none", "--to", str(tmp_path / "b.db"))
    assert bad.exit_code == 2 and "--from" in bad.stderr and "cannot" in bad.stderr


def test_every_statement_is_planned_for_its_own_values(postgres_url: str) -> None:
    # psycopg prepares a statement after a few runs; a generic plan made from a young table's
    # statistics scanned the whole session on every append (5 to 60 ms over 400 entries).
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    for durability in ("full", "normal"):
        repo = PostgresSessionRepo(postgres_url, durability=durability, max_connections=2)
        try:
            assert repo.database.read("SHOW plan_cache_mode") == [("force_custom_plan",)]
            if durability == "normal":  # (the test cluster's own default may be off too)
                assert repo.database.read("SHOW synchronous_commit") == [("off",)]
        finally:
            repo.close()


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def _sessions_in_bulk(repo: Any, count: int) -> list[str]:
    """``count`` sessions of a thousand entries, each one a chain holding the word apple,
    written in bulk, the table analysed."""
    ids = [repo.create().id for _ in range(count)]
    stamp = "2026-01-01T00:00:00.000Z"

    def bulk(conn: Any) -> None:
        conn.execute(
            "INSERT INTO entries (session_id, id, parent_id, type, timestamp, seq, data, text)"
            " SELECT s, 'e' || n, CASE WHEN n > 1 THEN 'e' || (n - 1) END, 'message', %s, n,"
            " json_build_object('type', 'message', 'id', 'e' || n, 'parentId',"
            " CASE WHEN n > 1 THEN 'e' || (n - 1) END, 'timestamp', %s::text, 'message',"
            " json_build_object('role', 'user', 'content', 'apple ' || n, 'timestamp', 1)),"
            " 'apple ' || (n %% 10) FROM unnest(%s::text[]) s, generate_series(1, 1000) n",
            (stamp, stamp, ids),
        )
        conn.execute(
            "UPDATE sessions SET leaf = 'e1000', leaf_count = 1, entry_count = 1000"
            " WHERE id = ANY(%s)",
            (ids,),
        )

    repo.database.write(bulk)
    with repo.database.connection() as conn:
        conn.execute("ANALYZE entries")
    return ids


def test_a_listings_hits_look_up_each_sessions_branch_not_every_entry(postgres_url: str) -> None:
    # Whether a session's branch is whole (so each hit is on it) was asked per hit of the
    # listing's query: PostgreSQL, guessing thousands of hits, answered it from a hash of
    # every entry of every session, the whole table read (0.3 s a listing of 260,000 entries).
    # It is asked once per listed session, a look-up in the parent index.
    from mcp_agent.sessions.hits import SESSIONS_PER_SEARCH
    from mcp_agent.sessions.postgres import PostgresSessionRepo
    from mcp_agent.sessions.repo import listed_hits

    repo = PostgresSessionRepo(postgres_url, max_connections=2)
    try:
        ids = _sessions_in_bulk(repo, SESSIONS_PER_SEARCH)
        statements: list[tuple[str, Any]] = []
        read = repo.database.read

        def traced(sql: str, params: Any = ()) -> list[Any]:
            statements.append((sql, params))
            return read(sql, params)

        repo.database.read = traced  # type: ignore[method-assign]
        found = listed_hits(repo, ids, "apple")
        repo.database.read = read  # type: ignore[method-assign]
        for session_id in ids:
            page = found[session_id]
            assert page.total == 1000 and [hit.on_branch for hit in page.hits] == [True] * 3
        [(sql, params)] = [(s, p) for s, p in statements if "row_number()" in s]
        [(plan,)] = read(f"EXPLAIN (FORMAT JSON) {sql}", params)
        nodes = [node for top in plan for node in _plan_nodes(top["Plan"])]
        branch_reads = [node for node in nodes if node.get("Alias") == "c"]
        assert branch_reads and all("Index Cond" in node for node in branch_reads), branch_reads
    finally:
        repo.close()


def test_a_listing_finds_the_sessions_of_a_word_in_the_text_index(postgres_url: str) -> None:
    # A listing with a word read each session's entries in turn for a first match (the
    # planner guessing a prefix common): every entry of the database for a word in none (0.4 s
    # over 200,000 entries). The sessions holding it are found in one search of the entries
    # (in the text index, where the table is large).
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    repo = PostgresSessionRepo(postgres_url, max_connections=2)
    try:
        ids = _sessions_in_bulk(repo, 16)
        statements: list[tuple[str, Any]] = []
        read = repo.database.read

        def traced(sql: str, params: Any = ()) -> list[Any]:
            statements.append((sql, params))
            return read(sql, params)

        repo.database.read = traced  # type: ignore[method-assign]
        assert repo.list(query="zzznothing").items == []
        assert sorted(item.id for item in repo.list(query="appl").items) == sorted(ids)
        repo.database.read = read  # type: ignore[method-assign]
        sql, params = statements[0]  # the word in none
        [(plan,)] = read(f"EXPLAIN (FORMAT JSON) {sql}", params)
        nodes = [node for top in plan for node in _plan_nodes(top["Plan"])]
        # Not an entry at a time of each session in turn (a scan of entries by the session's
        # id, the word as its filter): one search of the entries for the word.
        by_session = [
            node
            for node in nodes
            if "sessions.id" in node.get("Index Cond", "") and "@@" in node.get("Filter", "")
        ]
        assert not by_session, by_session
    finally:
        repo.close()


def test_counting_a_session_stored_in_bulk_reads_each_entry_a_few_times(
    postgres_url: str,
) -> None:
    # A session just imported is unknown to the table's statistics: PostgreSQL guessed it one
    # entry and joined each entry to its parent by reading every entry of the session, the
    # count quadratic (17 s for 5,000 entries; an import of 10,000 passed the statement
    # timeout and failed).
    from mcp_agent.sessions.postgres import PostgresSessionRepo
    from mcp_agent.sessions.postgres.storage import _recount

    repo = PostgresSessionRepo(postgres_url, max_connections=2)
    try:
        _sessions_in_bulk(repo, 2)  # others, in the statistics
        session_id = repo.create().id
        entries = 2000

        def work(conn: Any) -> tuple[int, int]:
            conn.execute(
                "INSERT INTO entries (session_id, id, parent_id, type, timestamp, seq, data)"
                " SELECT %s, 'n' || n, CASE WHEN n > 1 THEN 'n' || (n - 1) END, 'message', '',"
                " n, '{}' FROM generate_series(1, %s) n",
                (session_id, entries),
            )
            conn.execute(
                "UPDATE sessions SET entry_count = %s WHERE id = %s", (entries, session_id)
            )
            fetched = (  # what this transaction read through the table's indexes
                "SELECT sum(pg_stat_get_xact_tuples_fetched(indexrelid)) FROM pg_index"
                " WHERE indrelid = 'entries'::regclass"
            )
            [(before,)] = conn.execute(fetched).fetchall()
            _recount(conn, session_id)
            [(after,)] = conn.execute(fetched).fetchall()
            [(leaves,)] = conn.execute(
                "SELECT leaf_count FROM sessions WHERE id = %s", (session_id,)
            ).fetchall()
            return after - before, leaves

        read, leaves = repo.database.write(work)
        assert leaves == 1
        assert read < 10 * entries, read
    finally:
        repo.close()
