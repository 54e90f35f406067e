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

Those three places are one session's: a few sessions held at once took every thread again.
Over PostgreSQL the server also bounds how many of its writes wait for held rows on worker
threads (``sessions.row_waits``); a write past that bound, or queued on its thread behind one
of its session's that waits for the row, gives its thread back (``RowHeld``, nothing written)
and waits here without one, trying again. The wait for a worker thread counts in the write's
wait too (``_on_time``): a write is never started after its bound.

Every writer of a session in this process takes these turns: a tool's write (``write``), and
a run, a compaction or a branch summary, which have the session to themselves here, through
``RunManager.session_offload``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio

from mcp_agent.blocking import Offload, inline
from mcp_agent.sessions import SessionError
from mcp_agent.sessions.row_waits import RowHeld, RowWaits
from mcp_agent.sessions.session import TURN_DEADLINE, turn_refused

T = TypeVar("T")

ON_THREADS = 3
# Turns kept for reuse once their session's writes are done: making one (its semaphore) cost
# about as much as the rest of the turn's work for a lone append (15 us, measured), and a
# server mostly writes one or a few sessions at a time. Bounded: the rest are dropped.
SPARE_TURNS = 8
# A write given back its thread (``RowHeld``) tries again after this pause, doubled each time
# up to the last: a row held a moment (another replica's append) is taken on the next try.
RETRY_FIRST_S = 0.01
RETRY_LAST_S = 0.25


def _on_time(
    work: Callable[[], T], session_id: str, deadline: float | None, wait: float, turned: float
) -> T:
    """``work``, on its worker thread, unless the write's wait is over already: the wait for
    a thread counts in it too, else a write waited for its turn, then for a thread (all busy),
    then for the lock, longer than the lock wait it promises. ``turned``: when it had its
    turn, to say which wait took most of the time."""
    now = time.monotonic()
    if deadline is not None and now >= deadline:
        if now - turned < wait / 2:  # mostly for its turn, behind a write waiting for its row
            raise turn_refused(session_id, wait)
        raise SessionError(
            "busy",
            f"session {session_id} is busy: this write waited {wait:g} s for its turn and a"
            " worker thread (every one busy); nothing was written, try again",
        )
    return work()


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

    def __init__(
        self,
        wait: float | None = None,
        offload: Offload = inline,
        row_waits: RowWaits | None = None,
    ) -> None:
        if wait is not None and not wait > 0:
            raise ValueError(f"a write's wait for its turn must be more than 0 s, not {wait}")
        self.wait = wait
        self.offload = offload
        self.row_waits = row_waits  # the storage's bound on writes waiting for held rows
        # Sessions with writes holding or waiting for a place: bounded by the requests in
        # flight, each gone with its last write.
        self._turns: dict[str, _Turn] = {}
        self._spare: list[_Turn] = []  # unused turns, every place free (SPARE_TURNS at most)

    @asynccontextmanager
    async def turn(self, session_id: str) -> AsyncIterator[None]:
        """Hold a place among ``session_id``'s writes for the block (which offloads the
        write): waited for up to ``wait`` seconds, then ``SessionError("busy")``, nothing
        written."""
        turn = self._turns.get(session_id)
        if turn is None:
            turn = self._turns[session_id] = self._spare.pop() if self._spare else _Turn()
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
                # No write holds a place (each gave it back above) or waits for one; a turn
                # short of a place, however that came about, is not passed on.
                if len(self._spare) < SPARE_TURNS and turn.places.value == ON_THREADS:
                    self._spare.append(turn)

    async def write(self, session_id: str, work: Callable[[], T]) -> T:
        """``work``, a write to ``session_id`` (or a read of a run's), offloaded in its turn,
        the whole bounded by ``wait`` (the turn, the worker thread, the storage's lock), then
        ``SessionError("busy")``, nothing written. Given back its thread because the row is
        held (``RowHeld``), it waits here without one, and tries again."""
        async with self.turn(session_id):
            deadline = TURN_DEADLINE.get()
            wait = self.wait or 0.0
            on_time = functools.partial(
                _on_time, work, session_id, deadline, wait, time.monotonic()
            )
            pause = RETRY_FIRST_S
            while True:
                try:
                    return await self.offload(on_time)
                except RowHeld as held:
                    while True:
                        if deadline is None or time.monotonic() + pause >= deadline:
                            if self.row_waits is not None and self.row_waits.waiting(session_id):
                                raise turn_refused(session_id, self.wait) from None
                            raise held from None
                        await anyio.sleep(pause)
                        pause = min(pause * 2, RETRY_LAST_S)
                        # Behind a write of its own session waiting for the row: until it ends.
                        if self.row_waits is None or not self.row_waits.waiting(session_id):
                            break
