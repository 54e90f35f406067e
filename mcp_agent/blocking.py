"""Blocking work (a database call, a file read, a lock wait) kept off the event loop.

An ``Offload`` runs a plain function somewhere it may block and awaits its result. The server
passes worker threads with a bound on how many run at once, so a slow query delays only the
request that asked for it; a library user who calls from sync code can run it inline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import anyio

T = TypeVar("T")


class Offload(Protocol):
    async def __call__(self, work: Callable[[], T], /) -> T: ...


async def inline(work: Callable[[], T], /) -> T:
    """Run ``work`` right here (on the event loop): for tests and single-user tools."""
    return work()


def worker_threads(limit: int) -> Offload:
    """Run each piece of work on a worker thread, at most ``limit`` at once; the rest wait
    their turn without holding the event loop."""
    limiter = anyio.CapacityLimiter(limit)

    async def offload(work: Callable[[], T], /) -> T:
        return await anyio.to_thread.run_sync(work, limiter=limiter)

    return offload
