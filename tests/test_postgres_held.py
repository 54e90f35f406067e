"""Writes to sessions whose rows other transactions hold (a psql session's ``SELECT … FOR
UPDATE``, a replica stuck mid-transaction), on a PostgreSQL cluster of the test's own: they
take a bounded part of the server's worker threads, whoever writes (a tool, a run), and each
wait is bounded, ending in a refusal that wrote nothing."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from mcp_agent.blocking import WorkerThreads
from mcp_agent.runtime.write_turns import WriteTurns
from mcp_agent.sessions import SessionError

pytestmark = pytest.mark.anyio


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
