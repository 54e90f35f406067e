"""Leases on sessions, kept in the session database: several servers share one database (every
IDE window starts its own; replicas share one PostgreSQL), and still only one of them runs an
agent in a session at a time.

A lease names its holder (a run, or a tool such as session_compact) and the process that took
it. It expires unless renewed, so a killed process frees its sessions; a holder in a process
that is gone on this machine is let go at once.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_agent.runtime.settings import lease_seconds_from_env
from mcp_agent.sessions import SessionError
from mcp_agent.sessions.sqlite.database import (
    SqliteDatabase,
    damage_error,
    is_busy,
    is_damage,
    refuse_foreign,
    stops_with_the_process,
    storage_error,
)

if TYPE_CHECKING:
    from mcp_agent.runtime.presence import Presence

log = logging.getLogger(__name__)

# How long a lease (and, with replicas, a run on the board) outlives its process. A server
# renews its leases every third of it; a killed one frees its sessions within it.
LEASE_SECONDS = lease_seconds_from_env()
RENEW_EVERY = LEASE_SECONDS / 3
# A renewal (the board's too) that takes longer is given up, so that the next, a turn later,
# still comes before the lease lapses: over PostgreSQL a backend frozen mid-renewal otherwise
# held it for the statement timeout (90 s), three times the lease.
RENEW_WITHIN = RENEW_EVERY / 2
# How long a replica's presence is held before it judges others' leases and runs by their
# expiry (PostgresLeases.judges_expiry): a renewal turn, the leases' and then the board's.
EXPIRY_GRACE = RENEW_EVERY + 2 * RENEW_WITHIN
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

    def where(self) -> str:
        host = self.host.split("/", 1)[0]  # without its process space (see process_space)
        return f"another server process, pid {self.pid} on {host}"

    def describe(self) -> str:
        return f"{self.holder} (in {self.where()})"

    def busy_message(self) -> str:
        return (
            f"session {self.session_id} is busy: {self.describe()} is working on it. Wait for "
            "it to finish, or continue in a fork (the session_fork tool; on the command"
            " line, `sessions fork ID`)."
        )


def process_space() -> str:
    """Where a pid names the same process as here: this host's name and, on Linux, its pid
    namespace and boot. A lease's process is looked for (and, missing, its lease let go at
    once) only from the same space: two containers may share a host name, and a pid of
    one is no process of the other's, so by host name alone a container took the live leases
    of another for dead. Elsewhere a lease binds until it expires."""
    host = socket.gethostname()
    try:
        namespace = os.readlink("/proc/self/ns/pid")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:  # not Linux: the host name alone
        return host
    return f"{host}/{namespace}/{boot}"


class LeaseBook:
    """What the lease tables of every database share: who this process is, and whether a lease
    still binds."""

    def __init__(self) -> None:
        self.owner = uuid.uuid4().hex
        self.host = process_space()
        self.pid = os.getpid()
        # The sessions this process took a lease on and has not let go: their writes are
        # fenced (see ``guard``). Changed by whole set operations, which the GIL keeps whole.
        self.held: set[str] = set()

    def held_elsewhere(self, session_id: str, conn: Any = None) -> Lease | None:
        """The live lease another process holds on ``session_id``, if any (read through
        ``conn`` when given: a session database's connection, inside its transaction)."""
        raise NotImplementedError

    def acquire(self, session_id: str, holder: str) -> Lease | None:
        """Take ``session_id`` for ``holder``; returns the other process's lease instead when
        one holds it."""
        raise NotImplementedError

    def held_for(self, holder: str) -> Lease | None:
        """The live lease another process holds for ``holder`` (``run ID``), if any: how a
        run of another server on this database is known where no run board says it (None
        where one does: PostgreSQL's)."""
        return None

    def stopped_for(self, holder: str) -> Lease | None:
        """The lease of ``holder`` left by another process that stopped without letting it
        go (killed, its machine lost: gone, or its lease lapsed), if one is still kept: how a
        run cut short so is told from a run never given, where no run board says it."""
        return None

    def release(self, session_id: str) -> None:
        raise NotImplementedError

    def renew(self) -> set[str]:
        """Push back the expiry of every lease this process holds (``held``); the sessions
        whose lease was still its own (one missing from them was lost: see ``guard``). Only
        those: a lease whose release failed (the database out of reach when its run ended) is
        still this process's in the table, and renewing every row of ours kept that session
        busy for every other process for as long as this one lived; left alone, it lapses."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of every lease of this process."""
        raise NotImplementedError

    def own_lease(self, conn: Any, session_id: str) -> Lease | None:
        """The lease on ``session_id`` as stored, read through ``conn`` (a session database's,
        inside its transaction) and held against a taker until that transaction ends."""
        raise NotImplementedError

    def guard(self, conn: Any, session_id: str) -> None:
        """Refuse a change to a session another process runs an agent in (a session
        database's ``session_guard``: checked in the same transaction as the change).

        A session this process holds a lease on is fenced: the change goes through only while
        the lease is still its own. A lease can lapse while its holder lives (the database
        out of reach past ``LEASE_SECONDS``, so no renewal landed); another process may then
        have taken the session and written to it, and the holder's run must not write on."""
        if session_id not in self.held:
            other = self.held_elsewhere(session_id, conn)
            if other is not None:
                raise SessionError("busy", other.busy_message())
            return
        lease = self.own_lease(conn, session_id)
        if lease is None or lease.owner != self.owner:
            raise SessionError("busy", lease_lost_message(session_id, lease))

    def _alive(self, lease: Lease, now: float | None = None, expiry: bool = True) -> bool:
        if lease.owner in ("", self.owner):
            return False  # none (a row made to be locked), or ours: we keep our own books
        if expiry and lease.expires < (time.time() if now is None else now):
            return False
        if lease.host == self.host:
            try:
                os.kill(lease.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        return True


# Said once by a server whose PostgreSQL is reached through a pooler.
POOLED = (
    "the session database %s is reached through a connection pooler (PgBouncer or its kind:"
    " the backend pid it announced is not that of the backend that answers): the presence"
    " locks, which say a killed replica gone at once, are off, so a stopped replica's sessions"
    " are freed when its leases expire (MCP_AGENT_LEASE_SECONDS); in transaction mode"
    " notifications from the other replicas (LISTEN) are lost too. Connect the replicas to"
    " PostgreSQL itself (each keeps a pool of its own)"
)


def lease_lost_message(session_id: str, taken_by: Lease | None) -> str:
    now = f"; {taken_by.describe()} holds it now" if taken_by is not None else ""
    return (
        f"session {session_id}: this server's lease on it lapsed (no renewal reached the"
        f" database for {LEASE_SECONDS:g} s), so another process may have worked on it{now};"
        " nothing more is written here. Continue the session once it is idle."
    )


@contextmanager
def said_as_session_error(path: Path) -> Iterator[None]:
    """A SQLite failure of the leases' table (a full disk, a damaged file, an I/O error) as
    the SessionError the session database's own writes raise: a plain sqlite3 error reached a
    client as the SDK's bare "Error executing tool" (session_compact, agent_run on a full
    disk). A busy database stays what it is (the callers wait for it)."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if is_damage(error):
            raise damage_error(path, error) from error
        if not isinstance(error, sqlite3.OperationalError):
            raise
        if is_busy(error):
            raise SessionError(
                "busy",
                f"the session database {path} stayed locked by another writer for"
                f" {BUSY_TIMEOUT_S:g} s; nothing was written, try again",
            ) from error
        raise storage_error(path, error) from error


class SessionLeases(LeaseBook):
    """Leases in a SQLite session database.

    With ``database`` (the session database of that file, not a separate leases file), a file
    never served before is checked whole before the leases' table is made in it, and one found
    damaged is not written: no table, every lease refused with the damage said (the first
    write of a server to a damaged file was this table's)."""

    def __init__(self, db_path: str | Path, database: SqliteDatabase | None = None) -> None:
        super().__init__()
        self.path = Path(db_path)
        self.database = database
        self._conn = sqlite3.connect(
            str(db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        try:
            refuse_foreign(self._conn, Path(db_path))
            if database is None or _has_table(self._conn) or database.check_whole():
                self._conn.execute(_SCHEMA)
        except BaseException:
            self._conn.close()
            raise
        # One connection for the worker threads that take and let go of leases at once: a
        # transaction on it is every thread's, so each use holds it whole (another thread's
        # BEGIN inside it failed, and its ROLLBACK undid the first one's lease).
        self._lock = threading.Lock()
        self.stopping = False  # the process is stopping (SIGTERM): see close
        stops_with_the_process(self)

    def close(self) -> None:
        with self._lock:
            try:
                if self.stopping:
                    # Not another BUSY_TIMEOUT_S of a stop for the lock another process
                    # holds: the leases of a process gone lapse by themselves (_alive).
                    self._conn.execute("PRAGMA busy_timeout = 0")
                self._conn.execute("DELETE FROM session_leases WHERE owner = ?", (self.owner,))
            except sqlite3.Error:
                pass  # the database cannot be written (then no lease was taken), or is gone
            finally:
                self._conn.close()

    def held_elsewhere(self, session_id: str, conn: Any = None) -> Lease | None:
        if conn is not None:  # a session database's, in its own transaction
            return self._live(conn, session_id)
        with self._lock, said_as_session_error(self.path):
            return self._live(self._conn, session_id)

    def _live(self, conn: sqlite3.Connection, session_id: str) -> Lease | None:
        if self.database is not None and self.database.damaged is not None:
            return None  # no table may have been made (see __init__); no lease taken either
        lease = _sqlite_lease(conn, session_id)
        return lease if lease is not None and self._alive(lease) else None

    def held_for(self, holder: str) -> Lease | None:
        return next((lease for lease in self._leases_of(holder) if self._alive(lease)), None)

    def stopped_for(self, holder: str) -> Lease | None:
        for lease in self._leases_of(holder):
            if lease.owner not in ("", self.owner) and not self._alive(lease):
                return lease
        return None

    def _leases_of(self, holder: str) -> list[Lease]:
        if self.database is not None and self.database.damaged is not None:
            return []
        with self._lock, said_as_session_error(self.path):
            rows = self._conn.execute(
                "SELECT session_id, holder, owner, host, pid, expires FROM session_leases "
                "WHERE holder = ?",
                (holder,),
            ).fetchall()
        return [Lease(*row) for row in rows]

    def own_lease(self, conn: Any, session_id: str) -> Lease | None:
        # SQLite's writers take turns (BEGIN IMMEDIATE): no taker comes in between.
        return _sqlite_lease(conn, session_id)

    def acquire(self, session_id: str, holder: str) -> Lease | None:
        if self.database is not None:
            self.database.check_writable()  # found damaged: nothing more is written to it
        with self._lock, said_as_session_error(self.path):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                other = self._live(self._conn, session_id)
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
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            if other is None:
                self.held.add(session_id)
            return other

    def release(self, session_id: str) -> None:
        self.held.discard(session_id)
        with self._lock, said_as_session_error(self.path):
            self._conn.execute(
                "DELETE FROM session_leases WHERE session_id = ? AND owner = ?",
                (session_id, self.owner),
            )

    def renew(self) -> set[str]:
        if not self.held:
            return set()  # nothing to renew: no transaction (a damaged file has no table)
        held = json.dumps(sorted(self.held))
        ours = "owner = ? AND session_id IN (SELECT value FROM json_each(?))"
        with self._lock, said_as_session_error(self.path):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    f"UPDATE session_leases SET expires = ? WHERE {ours}",
                    (time.time() + LEASE_SECONDS, self.owner, held),
                )
                rows = self._conn.execute(
                    f"SELECT session_id FROM session_leases WHERE {ours}", (self.owner, held)
                ).fetchall()
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        return {session_id for (session_id,) in rows}


class LeaseCheck(LeaseBook):
    """The leases of a process that takes none (the command line) in a SQLite session
    database: a ``session_guard`` that refuses a change to a session a server runs an agent in,
    read inside the change's own transaction. It writes nothing, so a database no server has
    served (without the leases table) is read as it is."""

    def held_elsewhere(self, session_id: str, conn: Any = None) -> Lease | None:
        if conn is None:
            raise ValueError("a lease check reads through the session database's transaction")
        try:
            lease = _sqlite_lease(conn, session_id)
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return None  # no server has used this database: no leases
            raise
        return lease if lease is not None and self._alive(lease) else None


def _has_table(conn: sqlite3.Connection) -> bool:
    found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'session_leases'"
    return conn.execute(found).fetchone() is not None


def _sqlite_lease(conn: sqlite3.Connection, session_id: str) -> Lease | None:
    row = conn.execute(
        "SELECT session_id, holder, owner, host, pid, expires FROM session_leases "
        "WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    return Lease(*row) if row else None


class PostgresLeases(LeaseBook):
    """Leases in a PostgreSQL session database (its ``session_leases`` table), timed by the
    database's clock: replicas on several machines need not agree on the time.

    With ``presence`` (a server's), this process holds a presence lock, and every connection
    of its database its key (runtime.presence): the lease of a process whose key no
    connection holds binds no longer, on any machine, as soon as the database has found its
    connections closed, not once the lease expires."""

    def __init__(self, database: Any, presence: bool = False) -> None:  # a PostgresDatabase
        super().__init__()
        self.database = database
        self.presence: Presence | None = None
        self.expiry_grace = EXPIRY_GRACE  # see judges_expiry
        if presence and database.pooled:
            log.warning(POOLED, database.where)
        elif presence:
            from mcp_agent.runtime.presence import Presence, connection_sql, live_owner

            self.owner = live_owner()
            database.set_up_each(connection_sql(self.owner))
            self.presence = Presence(database.url, self.owner)

    def judges_expiry(self) -> bool:
        """Whether an expired lease or run (of another process) binds no longer in this
        process's eyes now. Without a presence, always; with one, once its lock has been held
        for ``expiry_grace`` (a renewal turn, ``EXPIRY_GRACE``): an outage of the database longer than the lease
        lets every lease and run lapse, none could be renewed, and drops every lock; the
        replicas that live renew within a turn of its return, and one that judged sooner
        (the first renewal back ends the runs that expired) took theirs for stopped."""
        return self.presence is None or self.presence.held_for(self.expiry_grace)

    def gone_sql(self, owner_column: str) -> str:
        """SQL true where ``owner_column`` names a process known gone (see ``presence``)."""
        return self.presence.gone_sql(owner_column) if self.presence is not None else "false"

    def close(self) -> None:
        if self.presence is not None:
            self.presence.close()
        try:
            self.database.write(
                lambda conn: conn.execute(
                    "DELETE FROM session_leases WHERE owner = %s", (self.owner,)
                )
            )
        except SessionError as error:
            # Read-only or gone since: the leases left expire by themselves.
            log.warning("the run leases could not be let go: %s", error)

    def held_elsewhere(self, session_id: str, conn: Any = None) -> Lease | None:
        sql = (
            "SELECT session_id, holder, owner, host, pid, expires,"
            " extract(epoch FROM clock_timestamp())::float8,"
            f" {self.gone_sql('owner')} FROM session_leases WHERE session_id = %s"
        )
        if conn is None:
            rows = self.database.read(sql, (session_id,))
        else:
            rows = conn.execute(sql, (session_id,)).fetchall()
        if not rows:
            return None
        *fields, now, gone = rows[0]
        lease = Lease(*fields)
        return lease if not gone and self._alive(lease, now, self.judges_expiry()) else None

    def acquire(self, session_id: str, holder: str) -> Lease | None:
        def work(conn: Any) -> Lease | None:
            conn.execute(
                "INSERT INTO session_leases (session_id, holder, owner, host, pid, expires)"
                " VALUES (%s, '', '', '', 0, 0) ON CONFLICT (session_id) DO NOTHING",
                (session_id,),
            )
            conn.execute(
                "SELECT 1 FROM session_leases WHERE session_id = %s FOR UPDATE", (session_id,)
            )
            other = self.held_elsewhere(session_id, conn)
            if other is None:
                conn.execute(
                    "UPDATE session_leases SET holder = %s, owner = %s, host = %s, pid = %s,"
                    " expires = extract(epoch FROM clock_timestamp()) + %s"
                    " WHERE session_id = %s",
                    (holder, self.owner, self.host, self.pid, LEASE_SECONDS, session_id),
                )
            return other

        result: Lease | None = self.database.write(work)
        if result is None:
            self.held.add(session_id)
        return result

    def own_lease(self, conn: Any, session_id: str) -> Lease | None:
        # FOR SHARE: a taker (acquire locks the row FOR UPDATE) waits for this transaction,
        # so the lease cannot change hands between this check and the change it guards.
        row = conn.execute(
            "SELECT session_id, holder, owner, host, pid, expires FROM session_leases"
            " WHERE session_id = %s FOR SHARE",
            (session_id,),
        ).fetchone()
        return Lease(*row) if row else None

    def release(self, session_id: str) -> None:
        self.held.discard(session_id)
        self.database.write(
            lambda conn: conn.execute(
                "DELETE FROM session_leases WHERE session_id = %s AND owner = %s",
                (session_id, self.owner),
            )
        )

    def renew(self) -> set[str]:
        held = sorted(self.held)
        rows = self.database.write(
            lambda conn: conn.execute(
                "UPDATE session_leases SET expires = extract(epoch FROM clock_timestamp()) + %s"
                " WHERE owner = %s AND session_id = ANY(%s) RETURNING session_id",
                (LEASE_SECONDS, self.owner, held),
            ).fetchall(),
            within=RENEW_WITHIN,
        )
        return {session_id for (session_id,) in rows}
