"""The worker threads that keep blocking work (every session read and write) off the event
loop: answers and errors come back, the bound holds, a cancelled caller waits for its work,
idle threads end."""

from __future__ import annotations

import contextvars
import threading

import anyio
import anyio.lowlevel
import pytest

from mcp_agent.blocking import WorkerThreads

pytestmark = pytest.mark.anyio

LIMIT_S = 30  # a bound for waits that end at once when things work


class Boom(Exception):
    pass


async def test_answers_and_errors_come_back() -> None:
    offload = WorkerThreads(2)
    assert await offload(lambda: threading.get_ident()) != threading.get_ident()

    def fail() -> None:
        raise Boom("the work's own error")

    with pytest.raises(Boom, match="the work's own error"):
        await offload(fail)
    assert await offload(lambda: 7) == 7  # a thread that saw an error goes on working


async def test_at_most_limit_run_at_once_and_the_rest_wait_without_holding_the_loop() -> None:
    limit = 3
    offload = WorkerThreads(limit)
    lock = threading.Lock()
    running = most = 0
    release = threading.Event()

    def work() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(LIMIT_S)
        with lock:
            running -= 1

    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as group:
            for _ in range(limit * 3):
                group.start_soon(offload, work)
            while True:  # the loop runs meanwhile: this very wait proves it
                with lock:
                    if running == limit:
                        break
                await anyio.sleep(0.01)
            release.set()
    assert most == limit
    assert offload.threads() <= limit


async def test_a_cancelled_caller_waits_for_its_work() -> None:
    offload = WorkerThreads(1)
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def work() -> None:
        started.set()
        release.wait(LIMIT_S)
        finished.append("work")

    async def caller(scope: anyio.CancelScope) -> None:
        with scope:
            await offload(work)
        finished.append("caller")

    scope = anyio.CancelScope()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as group:
            group.start_soon(caller, scope)
            await anyio.to_thread.run_sync(started.wait)
            scope.cancel()
            for _ in range(20):  # the caller has had every chance to leave early
                await anyio.lowlevel.checkpoint()
            assert finished == []
            release.set()
    assert finished == ["work", "caller"]
    assert scope.cancelled_caught


async def test_the_work_runs_in_the_callers_context() -> None:
    request: contextvars.ContextVar[str] = contextvars.ContextVar("request")
    request.set("r1")
    assert await WorkerThreads(1)(request.get) == "r1"


async def test_idle_threads_end() -> None:
    offload = WorkerThreads(4, idle_seconds=0.05)
    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(offload, lambda: None)
    assert 1 <= offload.threads() <= 4
    with anyio.fail_after(LIMIT_S):
        while offload.threads():
            await anyio.sleep(0.02)
    assert await offload(lambda: "again") == "again"  # a new thread starts for new work
