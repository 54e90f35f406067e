"""Leases on sessions, kept in the session database: several servers share one database (every
IDE window starts its own), and still only one of them runs an agent in a session at a time.

A lease names its holder (a run, or a tool such as session_compact) and the process that took
it. It expires unless renewed, so a killed process frees its sessions; a holder in a process
that is gone on this machine is let go at once.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from mcp_agent.sessions import SessionError

LEASE_SECONDS = 30.0
RENEW_EVERY = 10.0
BUSY_TIMEOUT_S = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_leases (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Lease:
    session_id: str
    holder: str
    owner: str
    host: str
    pid: int
    expires: float

    def describe(self) -> str:
        return f"{self.holder} (in another server process, pid {self.pid} on {self.host})"

    def busy_message(self) -> str:
        return (
            f"session {self.session_id} is busy: {self.describe()} is working on it. Wait for "
            "it to finish, or continue in a fork (session_fork)."
        )


class SessionLeases:
    def __init__(self, db_path: str | Path) -> None:
        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._conn = sqlite3.connect(
            str(db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        self._conn.execute(_SCHEMA)

    def close(self) -> None:
        self._conn.execute("DELETE FROM session_leases WHERE owner = ?", (self.owner,))
        self._conn.close()

    def held_elsewhere(
        self, session_id: str, conn: sqlite3.Connection | None = None
    ) -> Lease | None:
        """The live lease another process holds on ``session_id``, if any (read through
        ``conn`` when given: a session database's connection, inside its transaction)."""
        row = (
            (conn or self._conn)
            .execute(
                "SELECT session_id, holder, owner, host, pid, expires FROM session_leases "
                "WHERE session_id = ?",
                (session_id,),
            )
            .fetchone()
        )
        lease = Lease(*row) if row else None
        return lease if lease is not None and self._alive(lease) else None

    def guard(self, conn: sqlite3.Connection, session_id: str) -> None:
        """Refuse a change to a session another process runs an agent in (a
        ``SqliteDatabase.session_guard``: checked in the same transaction as the change)."""
        other = self.held_elsewhere(session_id, conn)
        if other is not None:
            raise SessionError("busy", other.busy_message())

    def acquire(self, session_id: str, holder: str) -> Lease | None:
        """Take ``session_id`` for ``holder``; returns the other process's lease instead when
        one holds it."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            other = self.held_elsewhere(session_id)
            if other is None:
                self._conn.execute(
                    "INSERT OR REPLACE INTO session_leases VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        session_id,
                        holder,
                        self.owner,
                        self.host,
                        self.pid,
                        time.time() + LEASE_SECONDS,
                    ),
                )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return other

    def release(self, session_id: str) -> None:
        self._conn.execute(
            "DELETE FROM session_leases WHERE session_id = ? AND owner = ?",
            (session_id, self.owner),
        )

    def renew(self) -> None:
        self._conn.execute(
            "UPDATE session_leases SET expires = ? WHERE owner = ?",
            (time.time() + LEASE_SECONDS, self.owner),
        )

    def _alive(self, lease: Lease) -> bool:
        if lease.owner == self.owner:
            return False  # ours: this process keeps its own books
        if lease.expires < time.time():
            return False
        if lease.host == self.host:
            try:
                os.kill(lease.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        return True
