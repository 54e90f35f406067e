"""Blocking work (a database call, a file read, a lock wait) kept off the event loop.

An ``Offload`` runs a plain function somewhere it may block and awaits its result. The server
passes worker threads with a bound on how many run at once, so a slow query delays only the
request that asked for it; a library user who calls from sync code can run it inline."""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

# Whose work it is: the server sets it for each request (to its client), and what a request
# starts (a run) inherits it. None: nobody's in particular (a library caller, a test).
WORK_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "mcp_agent_work_owner", default=None
)


class Offload(Protocol):
    async def __call__(self, work: Callable[[], T], /) -> T: ...


async def inline(work: Callable[[], T], /) -> T:
    """Run ``work`` right here (on the event loop): for tests and single-user tools."""
    return work()


SPARE_LANES = 8


class WorkerThreads:
    """Runs each piece of work on one of at most ``limit`` worker threads, which all take work
    from one queue; the rest wait their turn without holding the event loop.

    Why not ``anyio.to_thread.run_sync``: it hands each call to an idle thread of its own, so
    every call wakes a sleeping thread and then the loop (about 80 µs of CPU a call, measured,
    while our reads cost well under a millisecond). Here a thread that finishes a piece of work
    takes the next one without sleeping, and uvloop folds the wake-ups of results that arrive
    together into one: under load most calls wake nobody. The queue holds one item per
    awaiting caller, so the requests and runs in flight bound it.

    One owner (``WORK_OWNER``) has at most ``limit - 1`` pieces (1 at least) in the queue or
    running; the rest of its work waits in a line of its own. Otherwise a client that sent
    forty forks of a long session at once filled the queue, and another client's one-row read
    waited for all of them (a minute, measured; forks wait for each other's write lock on
    their threads): now one thread is left for the others, and owners take turns.

    As with anyio's, a waiting caller is not cancelled until its work is done (the work cannot
    be stopped, and a write must not go on after its caller has been told it ended). On an
    event loop that is not asyncio's, work goes through anyio's worker threads.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a worker pool needs at least 1 thread, not {limit}")
        self.limit = limit
        self._limiter: anyio.CapacityLimiter | None = None  # for a loop other than asyncio's
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # Counters only (never held while waiting): threads started, idle and queued items.
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._queued = 0
        self._closed = False
        self._lanes: dict[object, _Lane] = {}  # owners with work waiting or under way
        # Lanes kept for reuse, every turn free: making one (its semaphore) cost 15 us, as
        # much as the rest of a hand-off (measured); most owners have one piece at a time.
        self._spare_lanes: list[_Lane] = []

    async def __call__(self, work: Callable[[], T], /) -> T:
        owner = WORK_OWNER.get()
        if owner is None:
            return await self._run(work)
        lane = self._lanes.get(owner)
        if lane is None:
            spare = self._spare_lanes
            lane = spare.pop() if spare else _Lane(max(1, self.limit - 1))
            self._lanes[owner] = lane
        lane.users += 1
        try:
            try:
                lane.turns.acquire_nowait()  # no trip through the event loop when free
            except anyio.WouldBlock:
                await lane.turns.acquire()
            try:
                return await self._run(work)
            finally:
                lane.turns.release()
        finally:
            lane.users -= 1
            if not lane.users:
                del self._lanes[owner]
                # Its last user gave its turn back above: nobody holds or waits for one (a lane
                # short of a turn, however that came about, is not passed on).
                full = lane.turns.value == max(1, self.limit - 1)
                if full and len(self._spare_lanes) < SPARE_LANES:
                    self._spare_lanes.append(lane)

    async def _run(self, work: Callable[[], T]) -> T:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(self.limit)
            return await anyio.to_thread.run_sync(work, limiter=self._limiter)
        if self._closed:
            raise RuntimeError("the worker threads are closed")
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queued += 1
            start = self._idle < self._queued and self._threads < self.limit
            if start:
                self._threads += 1
        self._queue.put(_Job(work, contextvars.copy_context(), loop, future))
        if start:
            threading.Thread(target=self._serve, name="mcp-agent-db", daemon=True).start()
        with anyio.CancelScope(shield=True):
            result = await future
        return result

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._queue.get()
            with self._lock:
                self._idle -= 1
                if job is None:
                    self._threads -= 1
                    return
                self._queued -= 1
            job.run()

    def close(self) -> None:
        """Let every thread end once the work queued before this is done."""
        with self._lock:
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._queue.put(None)


class _Lane:
    """One owner's turns at the queue, and how many of its callers hold or wait for one."""

    __slots__ = ("turns", "users")

    def __init__(self, limit: int) -> None:
        self.turns = anyio.Semaphore(limit)
        self.users = 0


class _Job:
    __slots__ = ("context", "future", "loop", "work")

    def __init__(
        self,
        work: Callable[[], Any],
        context: contextvars.Context,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.work = work
        self.context = context
        self.loop = loop
        self.future = future

    def run(self) -> None:
        try:
            result = self.context.run(self.work)
        except BaseException as error:  # handed to the caller, whatever it is
            self._deliver(None, error)
        else:
            self._deliver(result, None)

    def _deliver(self, result: Any, error: BaseException | None) -> None:
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, result, error)
        except RuntimeError:  # the loop is closed: no one is waiting any more
            pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled by a plain asyncio cancel, outside anyio's shield
        return
    if isinstance(error, StopIteration):  # a future refuses it (it would end a generator)
        error = RuntimeError(f"offloaded work raised StopIteration: {error}")
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def worker_threads(limit: int) -> WorkerThreads:
    """Run each piece of work on a worker thread, at most ``limit`` at once (see
    ``WorkerThreads``); close it when done."""
    return WorkerThreads(limit)
