"""Blocking work (a database call, a file read, a lock wait) kept off the event loop.

An ``Offload`` runs a plain function somewhere it may block and awaits its result. The server
passes worker threads with a bound on how many run at once, so a slow query delays only the
request that asked for it; a library user who calls from sync code can run it inline.

The server's worker threads are a small pool of ours rather than ``anyio.to_thread.run_sync``:
every session read and write takes this hop, and anyio's costs about twice as much CPU (two
checkpoints, a capacity limiter and a cancel scope per call: about 165 against 80 µs measured),
which shows most when the cores are busy.
"""

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

# A worker thread idle this long ends (a busy server keeps its threads, an idle one frees them).
IDLE_SECONDS = 10.0


class Offload(Protocol):
    async def __call__(self, work: Callable[[], T], /) -> T: ...


async def inline(work: Callable[[], T], /) -> T:
    """Run ``work`` right here (on the event loop): for tests and single-user tools."""
    return work()


# One piece of work: the loop to answer on, the future that waits there, the work, its context.
_Job = tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any], contextvars.Context]


class WorkerThreads:
    """Runs each piece of work on a worker thread, at most ``limit`` at once; the rest wait
    their turn in a queue without holding the event loop. Threads start as work needs them and
    end after ``idle_seconds`` without any.

    Like anyio's ``run_sync``, a caller cancelled meanwhile waits for its work to finish (a
    thread cannot be interrupted), then is cancelled: what it holds around the work (a
    session's write slot) is not let go while the work still runs."""

    def __init__(self, limit: int, idle_seconds: float = IDLE_SECONDS) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self.idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # Guarded by _lock: threads alive, those of them not running work, work not yet taken.
        self._threads = 0
        self._idle = 0
        self._pending = 0
        self._limiter: anyio.CapacityLimiter | None = None

    def threads(self) -> int:
        """Worker threads alive now."""
        with self._lock:
            return self._threads

    async def __call__(self, work: Callable[[], T], /) -> T:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (anyio on trio): anyio's threads, the same bound
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(self.limit)
            return await anyio.to_thread.run_sync(work, limiter=self._limiter)
        done: asyncio.Future[T] = loop.create_future()
        self._submit((loop, done, work, contextvars.copy_context()))
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if not done.done():
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([done])
            if not done.cancelled():
                done.exception()  # the caller is gone: its error goes nowhere
            raise

    def _submit(self, job: _Job) -> None:
        with self._lock:
            self._pending += 1
            start = self._pending > self._idle and self._threads < self.limit
            if start:
                self._threads += 1
                self._idle += 1
        if start:
            try:
                threading.Thread(target=self._work, name="mcp-agent worker", daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                    self._idle -= 1
                    self._pending -= 1
                raise
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            try:
                loop, done, work, context = self._jobs.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._pending < self._idle:  # the others left idle cover what waits
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._pending -= 1
                self._idle -= 1
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(work)
            except BaseException as caught:
                error = caught
            with self._lock:
                self._idle += 1
            try:
                loop.call_soon_threadsafe(_deliver, done, result, error)
            except RuntimeError:  # the loop has closed: nobody waits for this answer
                pass
            del loop, done, work, context, result, error  # hold nothing while idle


def _deliver(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)


def worker_threads(limit: int) -> Offload:
    """Run each piece of work on a worker thread, at most ``limit`` at once (see
    :class:`WorkerThreads`)."""
    return WorkerThreads(limit)
