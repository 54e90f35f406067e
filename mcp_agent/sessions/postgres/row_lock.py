"""A session's row, locked for a change: a transaction that holds it and does nothing (its
backend frozen, a program's transaction left open) is said after a turn of the wait, not
after the whole lock timeout.

The row is taken at once when it is free (``SKIP LOCKED``). Held by another, it is waited for
as before (one ``FOR UPDATE``, the connection's lock timeout), while a watcher thread looks,
every ``LOCK_TURN_S``, on a connection of its own, at the transactions the wait is blocked by
(``pg_blocking_pids``). One that has run nothing for a whole turn ('idle in transaction') is
taken for stuck: a change of a session is a few statements sent back to back, so one that
waits that long between two is frozen, or a program's left open, and waiting on would only
end with the lock timeout. The watcher then cancels the wait, which is said as stuck. A
holder running a statement is waited for up to the lock timeout: a long statement is no sign
of a stuck one. The waiting transaction runs no statement more than before while it holds
the row, so appends queued on one session go through as fast as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from psycopg import errors as pg_errors

from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.row_waits import RowHeld, RowWaits

LOCK_TURN_S = 5.0
_LOCK = "SELECT leaf, next_seq FROM sessions WHERE id = %s FOR UPDATE"
# The transactions a backend's lock wait is blocked by, what each does and for how long.
_HOLDERS = """
SELECT pid, state, extract(epoch FROM clock_timestamp() - state_change)::float8
FROM pg_stat_activity WHERE pid = ANY(pg_blocking_pids(%s))
"""
_IDLE = ("idle in transaction", "idle in transaction (aborted)")


class _Watcher:
    """Looks at the holders of the lock ``conn`` waits for, every turn, until stopped; cancels
    the wait when one is stuck (``stuck`` then says which)."""

    def __init__(self, conn: Any, connect: Callable[[], Any]) -> None:
        self.conn, self.connect = conn, connect
        self.pid: int = conn.info.backend_pid
        self.stuck: tuple[int, str, float] | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="row-lock-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()

    def _watch(self) -> None:
        watching: Any = None
        try:
            while not self._stopped.wait(LOCK_TURN_S):
                if watching is None:
                    watching = self.connect()
                for pid, state, idle_s in watching.execute(_HOLDERS, (self.pid,)).fetchall():
                    if state in _IDLE and idle_s >= LOCK_TURN_S:
                        with self._lock:
                            if self._stopped.is_set():
                                return
                            self.stuck = (pid, state, idle_s)
                            self.conn.cancel_safe(timeout=5)
                        return
        except Exception:  # unseen: the wait goes on to the lock timeout, as before
            return
        finally:
            if watching is not None:
                watching.close()


def lock_session_row(
    conn: Any,
    session_id: str,
    connect: Callable[[], Any],
    where: str,
    row_waits: RowWaits | None = None,
) -> tuple[Any, ...] | None:
    """The session's leaf and next sequence number, its row locked until the commit (None:
    there is no such row). Held by a stuck transaction, ``SessionError("busy")`` after a turn
    or two; else the wait ends as every lock wait does (``connect`` opens the watcher's
    connection). Held while ``row_waits`` has no room for another wait: ``RowHeld`` at once,
    the thread given back."""
    row: tuple[Any, ...] | None = conn.execute(_LOCK + " SKIP LOCKED", (session_id,)).fetchone()
    if row is not None:
        return row
    if row_waits is None:
        return _wait_for_row(conn, session_id, connect, where)
    try:
        row_waits.enter(session_id)
    except RowHeld:
        if conn.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,)).fetchone() is None:
            return None  # not held: gone
        raise
    try:
        return _wait_for_row(conn, session_id, connect, where)
    finally:
        row_waits.leave(session_id)


def _wait_for_row(
    conn: Any, session_id: str, connect: Callable[[], Any], where: str
) -> tuple[Any, ...] | None:
    watcher = _Watcher(conn, connect)
    watcher.start()
    row: tuple[Any, ...] | None = None
    try:
        row = conn.execute(_LOCK, (session_id,)).fetchone()
    except pg_errors.QueryCanceled:
        watcher.stop()
        if watcher.stuck is None:
            raise
    watcher.stop()
    if watcher.stuck is None:
        return row
    # Cancelled (perhaps as the lock came: the cancel may yet reach a later statement, so
    # the transaction is given up all the same; nothing of it was written).
    pid, state, idle_s = watcher.stuck
    raise SessionError(
        "busy",
        f"session {session_id} is held by a transaction on the session database {where}"
        f" that has done nothing for {idle_s:.0f} s (PostgreSQL backend {pid}, {state}:"
        " frozen, or left open by a program); nothing was written, try again",
    )
