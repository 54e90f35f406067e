"""Writes to one session in this process take turns, and wait for theirs on the event loop.

A write that waits for the database (the session's row held by another transaction: a psql
session's ``SELECT … FOR UPDATE``, a replica stuck mid-transaction) holds its worker thread
as long, up to the lock timeout. Writes to the same session queued behind it used to wait
for the storage's lock on worker threads of their own: eight such writers took every thread
the server had, and every read and write of every other session waited with them. Here they
wait holding no thread (and no turn in their client's line, ``blocking.WorkerThreads``), so
only the held session's writes wait.

``ON_THREADS`` writes of a session are let onto worker threads at once: the one writing and
the next two, which wait on their threads for the storage's lock, so that one starts the
moment the write before it is done. Let on one at a time, each write waited for its
predecessor's answer to come back through the event loop first: eight clients appending to
one session went at half the rate or less (measured on a busy machine, SQLite); two at a time
still lost a third of it when the event loop's round trip outlasted a write, three kept it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from mcp_agent.sessions.session import TURN_DEADLINE, turn_refused

ON_THREADS = 3


class _Turn:
    """One session's places on worker threads, and how many writes hold or wait for one."""

    __slots__ = ("places", "users")

    def __init__(self) -> None:
        self.places = anyio.Semaphore(ON_THREADS)
        self.users = 0


class WriteTurns:
    """Each session's turns at writing. ``wait`` bounds how long a write waits for its turn,
    here and then for the storage's lock (``TURN_DEADLINE``): the write before it may wait as
    long for the session's row, so a write is told within two such waits. None: as long as
    it takes."""

    def __init__(self, wait: float | None = None) -> None:
        if wait is not None and not wait > 0:
            raise ValueError(f"a write's wait for its turn must be more than 0 s, not {wait}")
        self.wait = wait
        # Sessions with writes holding or waiting for a place: bounded by the requests in
        # flight, each gone with its last write.
        self._turns: dict[str, _Turn] = {}

    @asynccontextmanager
    async def turn(self, session_id: str) -> AsyncIterator[None]:
        """Hold a place among ``session_id``'s writes for the block (which offloads the
        write): waited for up to ``wait`` seconds, then ``SessionError("busy")``, nothing
        written."""
        turn = self._turns.get(session_id)
        if turn is None:
            turn = self._turns[session_id] = _Turn()
        turn.users += 1
        deadline = None if self.wait is None else time.monotonic() + self.wait
        try:
            try:
                turn.places.acquire_nowait()  # free: no timer to set and cancel
            except anyio.WouldBlock:
                taken = False
                with anyio.move_on_after(self.wait):
                    await turn.places.acquire()
                    taken = True
                if not taken:
                    raise turn_refused(session_id, self.wait) from None
            token = TURN_DEADLINE.set(deadline)
            try:
                yield
            finally:
                TURN_DEADLINE.reset(token)
                turn.places.release()
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[session_id]
