"""The worker threads that keep database work off the event loop (mcp_agent.blocking)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import pytest

from mcp_agent.blocking import WORK_OWNER, WorkerThreads

pytestmark = pytest.mark.anyio

REQUEST = contextvars.ContextVar[str]("request", default="none")
T = TypeVar("T")


def pool_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "mcp-agent-db"]


async def test_results_errors_and_context_reach_the_caller() -> None:
    offload = WorkerThreads(2)
    try:
        REQUEST.set("r1")
        assert await offload(lambda: (REQUEST.get(), threading.current_thread().name)) == (
            "r1",
            "mcp-agent-db",
        )

        def fail() -> None:
            raise KeyError("gone")

        with pytest.raises(KeyError, match="gone"):
            await offload(fail)

        def stop() -> None:
            raise StopIteration

        with pytest.raises(RuntimeError, match="StopIteration"):
            await offload(stop)
    finally:
        offload.close()


async def test_at_most_limit_run_at_once_and_every_piece_runs() -> None:
    limit, pieces = 3, 40
    others = set(pool_threads())  # other tests' pools in this process, idling out
    offload = WorkerThreads(limit)
    lock = threading.Lock()
    running, most, done = 0, 0, []

    def work(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        threading.Event().wait(0.002)  # a short blocking call (a query)
        with lock:
            running -= 1
        return n

    async def call(n: int) -> None:
        done.append(await offload(lambda: work(n)))

    try:
        async with anyio.create_task_group() as group:
            for n in range(pieces):
                group.start_soon(call, n)
        assert sorted(done) == list(range(pieces))
        assert most == limit  # the calls overlapped, up to the bound and never past it
        assert len(set(pool_threads()) - others) <= limit
    finally:
        offload.close()


async def test_a_cancelled_caller_waits_for_its_work() -> None:
    offload = WorkerThreads(1)
    release = threading.Event()
    events: list[str] = []

    def work() -> None:
        release.wait(10)
        events.append("work done")

    scope = anyio.CancelScope()

    async def caller() -> None:
        with scope:
            try:
                await offload(work)
            finally:
                events.append("caller left")

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(caller)
            await anyio.sleep(0.05)
            scope.cancel()
            await anyio.sleep(0.05)
            assert events == []  # still waiting for the work, cancelled or not
            release.set()
        assert events == ["work done", "caller left"]
    finally:
        release.set()
        offload.close()


async def test_close_ends_the_threads_after_queued_work() -> None:
    # This pool's threads, by identity: other tests' pools in this process may end meanwhile.
    before = set(pool_threads())
    offload = WorkerThreads(2)
    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(offload, lambda: threading.Event().wait(0.01))
    started = set(pool_threads()) - before
    assert 1 <= len(started) <= 2
    offload.close()
    for _ in range(200):
        if not any(thread.is_alive() for thread in started):
            break
        await anyio.sleep(0.01)
    assert not any(thread.is_alive() for thread in started)
    with pytest.raises(RuntimeError, match="closed"):
        await offload(lambda: None)


def test_a_pool_has_a_thread_at_least() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WorkerThreads(0)


async def test_one_owners_flood_of_work_leaves_a_thread_to_the_others() -> None:
    """A client that sent many slow calls at once filled the queue, and another client's
    call waited for all of them; now each owner's work beyond all threads but one waits in a
    line of its own."""
    offload = WorkerThreads(3)
    release = threading.Event()

    async def as_owner(owner: str, work: Callable[[], T]) -> T:
        WORK_OWNER.set(owner)
        return await offload(work)

    answers: list[str] = []
    answered = anyio.Event()

    async def other() -> None:
        answers.append(await as_owner("other", lambda: "answered"))
        answered.set()

    try:
        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(as_owner, "flood", lambda: release.wait(30))
            await anyio.wait_all_tasks_blocked()
            group.start_soon(other)
            with anyio.move_on_after(10):  # a waiting offload cannot be cancelled
                await answered.wait()
            answered_meanwhile = list(answers)  # while the flood still held its threads
            release.set()  # before any assertion: the flood's threads wait for it
        assert answered_meanwhile == ["answered"]
        assert not offload._lanes  # an owner is forgotten once its work is done
    finally:
        release.set()
        offload.close()


async def test_a_lane_or_turn_kept_for_reuse_bounds_its_next_owner_as_a_new_one() -> None:
    """Lanes (WorkerThreads) and a session's write turns (WriteTurns) are kept for reuse once
    idle, a few at most: one reused still lets the same number of pieces run at once, and
    owners past the spares are forgotten."""
    from mcp_agent.blocking import SPARE_LANES
    from mcp_agent.runtime.write_turns import ON_THREADS, SPARE_TURNS, WriteTurns

    offload = WorkerThreads(8)
    turns = WriteTurns(offload=offload)
    lock = threading.Lock()
    running = 0
    most: dict[str, int] = {}
    # Each batch of pieces meets at a barrier: as many as may run at once pass it together (a
    # lane or turn short of a place would leave it broken, one with more would show in most).
    barriers = {"turn": threading.Barrier(ON_THREADS), "lane": threading.Barrier(7)}

    def work(key: str) -> None:
        nonlocal running
        with lock:
            running += 1
            most[key] = max(most.get(key, 0), running)
        barriers[key.split()[0]].wait(20)
        with lock:
            running -= 1

    async def write(owner: str, session: str, key: str) -> None:
        WORK_OWNER.set(owner)
        await turns.write(session, lambda: work(key))

    try:
        for rounds in range(3):  # the second and third reuse the first's lane and turn
            async with anyio.create_task_group() as group:
                for _ in range(2 * ON_THREADS):
                    group.start_soon(write, "one", "s", f"turn {rounds}")
            assert most[f"turn {rounds}"] == ON_THREADS
            async with anyio.create_task_group() as group:
                for index in range(14):
                    group.start_soon(write, "one", f"s{index}", f"lane {rounds}")
            assert most[f"lane {rounds}"] == offload.limit - 1 == 7
        async with anyio.create_task_group() as group:
            for index in range(21):  # three batches of the lane's barrier
                group.start_soon(write, f"owner {index}", f"session {index}", "lane many")
        assert not offload._lanes and not turns._turns
        assert 1 <= len(offload._spare_lanes) <= SPARE_LANES
        assert 1 <= len(turns._spare) <= SPARE_TURNS
        assert all(turn.places.value == ON_THREADS for turn in turns._spare)
    finally:
        offload.close()
