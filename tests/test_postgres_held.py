"""Writes to sessions whose rows other transactions hold (a psql session's ``SELECT … FOR
UPDATE``, a replica stuck mid-transaction), on a PostgreSQL cluster of the test's own: they
take a bounded part of the server's worker threads, whoever writes (a tool, a run), and each
wait is bounded, ending in a refusal that wrote nothing."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import TextContent
from mcp_support import call
from narrow import narrow
from test_postgres import held_session_server, psycopg_connect, stored_texts, user_message
from test_server import user

from mcp_agent.blocking import WorkerThreads
from mcp_agent.runtime.write_turns import WriteTurns
from mcp_agent.sessions import SessionError

pytestmark = pytest.mark.anyio

# The servers' worker threads (db_threads' default); a quarter of them may wait for held rows.
THREADS = 8
ROW_WAITS = THREADS // 4


@contextmanager
def rows_held(postgres_url: str, session_ids: list[str]) -> Iterator[None]:
    """Each session's row held by a transaction of its own (as a psql session would), let go
    on leaving."""
    with ExitStack() as stack:
        for session_id in session_ids:
            holder = stack.enter_context(psycopg_connect(postgres_url))
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [session_id])
            stack.callback(holder.rollback)
        yield


def lock_waiters(look: Any) -> int:
    [(waiting,)] = look.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'"
    ).fetchall()
    return int(waiting)


async def other_session_answers(client: Client, other: str, look: Any, seen: list[int]) -> None:
    """An append to, a read of and the listing of a session nobody holds, while recording in
    ``seen`` how many backends wait for a lock meanwhile."""
    seen.append(lock_waiters(look))
    await call(client, "session_append", session_id=other, entry=user("other"))
    seen.append(lock_waiters(look))
    await call(client, "session_get", session_id=other)
    await call(client, "session_list")
    seen.append(lock_waiters(look))


async def until_waiting(look: Any, at_least: int) -> None:
    for _ in range(2000):  # bounded
        if lock_waiters(look) >= at_least:
            return
        await anyio.sleep(0.01)
    raise AssertionError(f"never {at_least} writes waited for a held row")


async def test_writes_to_several_held_sessions_leave_threads_for_the_others(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each held session kept up to three worker threads (its write waiting for the row, two
    more for its turn on their threads): three sessions held at once took every thread, and
    every other session's reads and writes waited up to the lock timeout. The held sessions
    together now take a quarter of the threads (their other writes wait without one): the
    others are answered meanwhile, and every held write is stored once the rows go."""
    held_count, per_session = 4, 3
    with held_session_server(tmp_path, postgres_url, monkeypatch, lock_timeout=30) as (
        server,
        managers,
    ):
        async with Client(server) as client:
            held = [(await call(client, "session_create"))["id"] for _ in range(held_count)]
            other = (await call(client, "session_create"))["id"]
            [runs] = managers
            errors: list[str] = []
            answered: list[str] = []

            async def append_held(session_id: str, n: int) -> None:
                result = await client.call_tool(
                    "session_append", {"session_id": session_id, "entry": user(f"held {n}")}
                )
                if result.is_error:
                    errors.append(narrow(result.content[0], TextContent).text)
                answered.append(session_id)

            seen: list[int] = []
            answered_before: list[int] = []
            with psycopg_connect(postgres_url, autocommit=True) as look:
                async with anyio.create_task_group() as group:
                    with rows_held(postgres_url, held):  # then the rows go, and all is written
                        for session_id in held:
                            for n in range(per_session):
                                group.start_soon(append_held, session_id, n)
                        for _ in range(2000):  # bounded: until every write is under way
                            if sum(runs._writing.values()) == held_count * per_session:
                                break
                            await anyio.sleep(0.01)
                        await until_waiting(look, ROW_WAITS)
                        with anyio.move_on_after(15):  # well within the lock timeout
                            await other_session_answers(client, other, look, seen)
                            answered_before.append(len(answered))
            assert answered_before == [0], (
                "the other session's reads and writes waited for the held sessions' writes"
            )
            assert max(seen) <= ROW_WAITS, seen
            assert not errors, errors
            for session_id in held:
                stored = stored_texts(postgres_url, session_id)
                assert sorted(stored) == [f"held {n}" for n in range(per_session)]
            assert stored_texts(postgres_url, other) == ["other"]
            assert not runs._writing and not runs._write_turns._turns


async def test_runs_in_held_sessions_leave_threads_for_the_others(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's writes (its prompt, its answer, its settings) did not take the session's write
    turns: runs in held sessions each kept a worker thread waiting for the row, and as many
    runs as threads stalled every other session. They take turns now, as a tool's writes do:
    the other session is answered meanwhile, and each run ends with its answer stored once
    the rows go."""
    with held_session_server(tmp_path, postgres_url, monkeypatch, lock_timeout=30) as (
        server,
        managers,
    ):
        async with Client(server) as client:
            held = [(await call(client, "session_create"))["id"] for _ in range(THREADS)]
            other = (await call(client, "session_create"))["id"]
            [runs] = managers
            run_ids: list[str] = []

            async def run_in(session_id: str) -> None:
                started = await call(
                    client, "agent_run", prompt="hello", session_id=session_id, wait=False
                )
                run_ids.append(started["runId"])

            seen: list[int] = []
            answered_first: list[int] = []
            with psycopg_connect(postgres_url, autocommit=True) as look:
                async with anyio.create_task_group() as group:
                    with rows_held(postgres_url, held):  # then the rows go, and all is written
                        for session_id in held:
                            group.start_soon(run_in, session_id)
                        await until_waiting(look, ROW_WAITS)
                        await anyio.sleep(0.5)  # the other runs' writes pile up meanwhile
                        with anyio.move_on_after(15):  # well within the lock timeout
                            await other_session_answers(client, other, look, seen)
                            answered_first.append(len(seen))
            assert answered_first, "the other session waited for the runs in held sessions"
            assert max(seen) <= ROW_WAITS, seen
            assert len(run_ids) == len(held)
            for run_id in run_ids:
                with anyio.fail_after(60):
                    status = await call(client, "agent_status", run_id=run_id, wait_seconds=30)
                assert status["status"] == "completed", status
            for session_id in held:
                assert stored_texts(postgres_url, session_id) == ["hello", "echo: hello"]
            assert not runs._write_turns._turns  # nothing kept for the writes gone


def test_a_write_that_waited_for_a_worker_thread_past_its_bound_writes_nothing(
    postgres_url: str,
) -> None:
    """A write waited for its turn and then the storage's lock within the lock wait, but its
    wait for a worker thread (every one busy) was not counted: it went on to write after as
    long as the threads stayed busy. That wait counts now: past the bound, the write is
    refused when a thread takes it, nothing written."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    repo = PostgresSessionRepo(postgres_url, lock_timeout=30)
    try:
        session_id = repo.create().id
        threads = WorkerThreads(1)
        busy, free = threading.Event(), threading.Event()

        def occupy() -> None:  # a long read of another session, say
            busy.set()
            free.wait(10)  # bounded

        said: list[str] = []

        async def main() -> None:
            turns = WriteTurns(0.5, threads)
            async with anyio.create_task_group() as group:
                group.start_soon(threads, occupy)
                await anyio.to_thread.run_sync(busy.wait, 10)
                write_began = time.monotonic()

                async def free_once_the_wait_is_over() -> None:
                    while time.monotonic() - write_began < 1.0:
                        await anyio.sleep(0.05)
                    free.set()

                group.start_soon(free_once_the_wait_is_over)
                try:
                    await turns.write(
                        session_id,
                        lambda: repo.open(session_id).append_custom("late", 1),
                    )
                except SessionError as error:
                    said.append(str(error))

        try:
            anyio.run(main)
        finally:
            free.set()
            threads.close()
        assert len(said) == 1 and "waited 0.5 s for its turn and a worker thread" in said[0], said
        assert "nothing was written" in said[0]
        assert repo.open(session_id).get_entries() == []
    finally:
        repo.close()


async def test_imports_of_a_file_another_transaction_inserts_leave_threads_for_the_others(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import whose session row another transaction is inserting and has not committed
    (another replica's import of the same file, the command line's of a slow pipe) waits for
    that transaction, up to the lock timeout. That wait was not among the server's bounded
    waits for held rows: imports of one file took as many worker threads as they were. It
    is now: no more than a quarter of the threads wait, the others are told the session is
    busy (nothing written), and another session is answered meanwhile."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as repo:
        made = repo.create(name="shared")
        made.append_message(user_message("hello"))
        text = repo.export_jsonl(made.id)
        repo.delete(made.id)
    file_id = made.id
    imports = 6
    with held_session_server(tmp_path, postgres_url, monkeypatch, lock_timeout=30) as (
        server,
        _managers,
    ):
        async with Client(server) as client:
            other = (await call(client, "session_create"))["id"]
            results: list[Any] = []

            async def import_once() -> None:
                result = await client.call_tool("session_import", {"jsonl": text})
                results.append(result)

            seen: list[int] = []
            answered_first: list[int] = []
            with (
                psycopg_connect(postgres_url, autocommit=True) as look,
                psycopg_connect(postgres_url) as holder,
            ):
                # Another importer's row, inserted and not committed.
                holder.execute(
                    "INSERT INTO sessions (id, header, created, modified)"
                    " VALUES (%s, %s, '2026-01-01', '2026-01-01')",
                    [file_id, text.split("\n", 1)[0]],
                )
                try:
                    async with anyio.create_task_group() as group:
                        for _ in range(imports):
                            group.start_soon(import_once)
                        await until_waiting(look, ROW_WAITS)
                        await anyio.sleep(0.5)  # the other imports pile up meanwhile
                        with anyio.move_on_after(15):  # well within the lock timeout
                            await other_session_answers(client, other, look, seen)
                            answered_first.append(len(seen))
                        holder.rollback()  # that import failed: the id is free again
                finally:
                    holder.rollback()
            assert answered_first, "the other session waited for the imports"
            assert max(seen) <= ROW_WAITS, seen
            assert len(results) == imports
            ids = []
            for result in results:
                if result.is_error:
                    said = narrow(result.content[0], TextContent).text
                    assert "is busy" in said and "nothing was written" in said, said
                else:
                    ids.append(result.structured_content["session"]["id"])
            assert ids.count(file_id) == 1, ids
            for session_id in ids:
                assert stored_texts(postgres_url, session_id) == ["hello"]


async def test_a_start_left_without_its_session_deletes_it_in_its_turn(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run refused or cancelled after its start made a new session deletes that session
    again. The delete went to a worker thread outside the session's write turns: its row held
    by another transaction while the server's waits for held rows were all taken, it was
    refused as busy at once and the empty session left behind. It takes the write turns now:
    it waits without a thread, and deletes the session once the row is free."""
    from types import SimpleNamespace

    from mcp_agent.runtime.start import discard_if_empty
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with held_session_server(tmp_path, postgres_url, monkeypatch, lock_timeout=30) as (
        server,
        managers,
    ):
        async with Client(server) as client:
            held = [(await call(client, "session_create"))["id"] for _ in range(ROW_WAITS)]
            made = (await call(client, "session_create"))["id"]  # the start's, left empty
            [runs] = managers
            repo = PostgresSessionRepo(postgres_url, lock_timeout=30)
            repo.database.row_waits = runs._write_turns.row_waits  # the server's bound
            deleted: list[str] = []
            state: Any = SimpleNamespace(  # the parts of AppState the start's cleanup uses
                runs=runs, repo=repo, offload=runs.offload, session_deleted=deleted.append
            )
            try:
                with psycopg_connect(postgres_url, autocommit=True) as look:
                    async with anyio.create_task_group() as group:
                        with rows_held(postgres_url, held):
                            for session_id in held:  # every wait for a held row taken
                                group.start_soon(
                                    functools.partial(
                                        call,
                                        client,
                                        "session_append",
                                        session_id=session_id,
                                        entry=user("held"),
                                    )
                                )
                            await until_waiting(look, ROW_WAITS)
                            with rows_held(postgres_url, [made]):
                                group.start_soon(discard_if_empty, state, made)
                                await anyio.sleep(1)  # the delete meets the held row
                            with anyio.fail_after(20):  # its row free, well within its bound
                                while not deleted:
                                    await anyio.sleep(0.05)
            finally:
                repo.close()
            assert deleted == [made]
            listed = await call(client, "session_list")
            assert made not in {info["id"] for info in listed["sessions"]}


def test_a_lock_wait_as_long_as_the_statement_timeout_is_said_as_a_lock_wait(
    postgres_url: str,
) -> None:
    """With the statement timeout at or under the lock timeout (MCP_AGENT_DB_STATEMENT_TIMEOUT
    of a few seconds), the lock wait was given the statement timeout's length, and the
    statement's timer, started first, ended it first: a write behind a program's LOCK TABLE
    was told that a statement 'was cancelled after running up to 1 s', as if the database
    were slow, not that a lock was held. The lock wait now ends first, and is said as such."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url, statement_timeout=1) as repo:
        session = repo.create()
        with psycopg_connect(postgres_url) as holder:
            holder.execute("LOCK TABLE sessions IN EXCLUSIVE MODE")
            try:
                with pytest.raises(SessionError) as refused:
                    session.append_message(user_message("behind the lock"))
            finally:
                holder.rollback()
        said = str(refused.value)
        assert "stayed locked by another transaction" in said, said
        assert "nothing was written" in said
        assert session.get_entries() == []
