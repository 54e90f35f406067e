"""How many writes of this process wait on worker threads for a session row another
transaction holds (a psql session's ``SELECT … FOR UPDATE``, a replica stuck mid-transaction).

Each such write holds its worker thread as long as the row is held, up to the lock timeout,
and so does each write queued behind it for the storage's lock. A few sessions held at once
took every thread the server had, and every read and write of every other session waited with
them. A server bounds them here: past ``limit`` sessions waiting, a write that finds its row
held, or queued behind one that waits, gives its thread back at once (``RowHeld``: nothing
written) and waits for its turn without one (runtime.write_turns), trying again; so the held
sessions together take at most ``limit`` threads and the others always find some.
"""

from __future__ import annotations

import threading

from mcp_agent.sessions.errors import SessionError


class RowHeld(SessionError):
    """A write that found its session's row held by another transaction while this process's
    waits for held rows were all taken, or that was queued behind a write of its session
    waiting for its row: given up before anything was written, its thread given back. A
    caller that takes write turns (runtime.write_turns) waits without a thread and tries
    again; any other is told the session is busy."""

    def __init__(self, session_id: str, limit: int | None = None) -> None:
        """``limit``: the waits for held rows, all taken; None: queued behind a write of the
        session that waits for its row."""
        if limit is None:
            why = "another write to it here waits for its row, held by another transaction"
        else:
            why = (
                "its row is held by another transaction, and this server's writes that wait"
                f" for held rows ({limit} at most) wait already"
            )
        super().__init__(
            "busy", f"session {session_id} is busy: {why}; nothing was written, try again"
        )
        self.session_id = session_id


class RowWaits:
    """The sessions whose writes wait for their held row on a worker thread, at most ``limit``
    at once. Thread-safe: entered and left on worker threads, looked at from the event loop."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"at least 1 write must be let wait for a held row, not {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._waiting: dict[str, int] = {}  # session id: writes waiting for its row
        self._count = 0

    def enter(self, session_id: str) -> None:
        """Before waiting for ``session_id``'s held row; ``RowHeld`` when ``limit`` writes
        wait already. Leave it once the wait is over, however it ended."""
        with self._lock:
            if self._count >= self.limit:
                raise RowHeld(session_id, self.limit)
            self._count += 1
            self._waiting[session_id] = self._waiting.get(session_id, 0) + 1

    def leave(self, session_id: str) -> None:
        with self._lock:
            self._count -= 1
            left = self._waiting[session_id] - 1
            if left:
                self._waiting[session_id] = left
            else:
                del self._waiting[session_id]

    def waiting(self, session_id: str) -> bool:
        """Whether a write of ``session_id`` waits for its held row now."""
        return session_id in self._waiting

    def full(self) -> bool:
        return self._count >= self.limit
