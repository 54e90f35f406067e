"""A replica's presence in the shared PostgreSQL database: advisory locks on a key of its own,
held by its connections for as long as the process lives, so the others know at once when it
is gone (killed, its machine lost), not only when its leases and runs expire.

The database lets go of a session's advisory locks as soon as it finds its connection closed:
at once for a process that was killed (its kernel closes the socket), within a keepalive
round for a machine that vanished. The key is held twice over: by a connection of the
presence's own (the presence lock, the key as one bigint) and, shared, by every connection of
the replica's pool from before its first use (the key's two halves, a lock of its own to
PostgreSQL). A lease or run whose owner took the presence lock and whose key no connection
holds now is the lease or run of a process that is gone (``gone_sql``).

Why both. The presence connection alone can be cut while the replica lives (a DBA's
``pg_terminate_backend``, a pooler's or firewall's idle timeout): judged by that lock alone,
the replica was gone until it took the lock again, and another replica that looked meanwhile
ended its runs and took its sessions. Every lease renewal and board write of a replica runs
on a pool connection that holds its key, and its pool keeps one connection open at least: so
a judge that finds the key held by no connection knows that the replica had no connection,
and no transaction under way, at that instant. Whatever it writes after (a renewal, an
append) is fenced: the lease check in each write's transaction, the board's final end. The
presence connection finds a cut at once (it waits on its socket) and takes its lock again.

Judged only while this process's own lock has been held for ``GRACE_S``: a restart or failover
of the database drops every replica's lock at once, and each takes its own again within about
a second; a replica that judged before then would take the others, alive, for gone.

Blocking: the lock is kept by a thread of its own (one statement a second).
"""

from __future__ import annotations

import logging
import select
import threading
import time
import uuid
from typing import Any

from mcp_agent.outages import Outage
from mcp_agent.paths import shown_url
from mcp_agent.sessions.postgres.connect import KEEP_WHEN_IDLE

log = logging.getLogger(__name__)

# The owners that hold a presence lock begin so; the lock's key is read from the rest.
LIVE_PREFIX = "live-"
GRACE_S = 5.0
KEEP_EVERY_S = 1.0
_KEY_MASK = 0x7FFFFFFFFFFFFFFF
# The server's side of each connection that holds the key: it finds a vanished client within
# about 20 s.
_SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": 10,
    "tcp_keepalives_interval": 5,
    "tcp_keepalives_count": 2,
}


def live_owner() -> str:
    """A fresh owner (of leases and runs) that holds a presence lock."""
    return LIVE_PREFIX + uuid.uuid4().hex


def presence_key(owner: str) -> int:
    """The advisory lock key of an owner from ``live_owner``."""
    return int(owner[len(LIVE_PREFIX) : len(LIVE_PREFIX) + 16], 16) & _KEY_MASK


def connection_sql(owner: str) -> str:
    """The statement each pool connection of ``owner`` runs before its first use: the key's
    shared lock (its two halves as int4: objsubid 2 in pg_locks, apart from the presence
    lock's bigint), the server's keepalives, and no idle_session_timeout."""
    key = presence_key(owner)
    high, low = key >> 32, key & 0xFFFFFFFF
    low = low - (1 << 32) if low >= 1 << 31 else low
    keepalives = "".join(
        f", set_config('{name}', '{value}', false)" for name, value in _SERVER_KEEPALIVES.items()
    )
    return f"SELECT pg_advisory_lock_shared({high}, {low}){keepalives}, {KEEP_WHEN_IDLE}"


def _key_sql(owner_column: str) -> str:
    start = len(LIVE_PREFIX) + 1
    return f"(('x' || substr({owner_column}, {start}, 16))::bit(64)::bigint & {_KEY_MASK})"


def _held_sql(key: str, subids: str = "1") -> str:
    """SQL: an advisory lock on ``key`` is held in this database: the bigint one (objsubid 1,
    the presence lock), or with ``subids`` "1, 2" the pool connections' too."""
    return (
        "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted"
        f" AND l.objsubid IN ({subids}) AND l.database = (SELECT oid FROM pg_database"
        " WHERE datname = current_database())"
        f" AND (l.classid::bigint << 32 | l.objid::bigint) = {key})"
    )


class Presence:
    """This process's presence lock, kept on a connection of its own by a daemon thread that
    takes it again whenever the connection breaks."""

    def __init__(self, url: str, owner: str) -> None:
        self.url = url
        self.owner = owner
        self.key = presence_key(owner)
        self.grace = GRACE_S
        # monotonic time since which the lock has been held without a break; None: not held.
        self._held_since: float | None = None
        self._closed = threading.Event()
        self._outage = Outage(log, f"the presence lock in {shown_url(url)} cannot be held")
        self._conn: Any = None
        self._thread = threading.Thread(target=self._keep, name="presence", daemon=True)
        self._thread.start()

    def judging(self) -> bool:
        """Whether this process may judge others by their locks now (see the module)."""
        return self.held_for(self.grace)

    def held_for(self, seconds: float) -> bool:
        """Whether the lock has been held without a break for ``seconds`` at least."""
        since = self._held_since
        return since is not None and time.monotonic() - since >= seconds

    def gone_sql(self, owner_column: str) -> str:
        """SQL true where ``owner_column`` names a process that held a presence lock and
        whose key no connection holds now (see the module); never while this process may not
        judge (then expiry alone says it)."""
        if not self.judging():
            return "false"
        return (
            f"(starts_with({owner_column}, '{LIVE_PREFIX}') AND {_held_sql(str(self.key))}"
            f" AND NOT {_held_sql(_key_sql(owner_column), '1, 2')})"
        )

    def wait_held(self, timeout: float) -> bool:
        """Wait until this process may judge (for tests and a start that wants it at once)."""
        deadline = time.monotonic() + timeout
        while not self.judging():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        """Let go of the lock (the database frees it with the connection)."""
        self._closed.set()
        self._thread.join(timeout=10)

    def _keep(self) -> None:
        import psycopg

        from mcp_agent.sessions.postgres.connect import BoundedConnection, tcp_options

        keepalives = " ".join(f"-c {name}={value}" for name, value in _SERVER_KEEPALIVES.items())
        woke = False
        while not self._closed.is_set():
            broke = False
            try:
                if self._conn is None:
                    self._conn = BoundedConnection.connect(
                        self.url,
                        autocommit=True,
                        connect_timeout=5,
                        options=f"-c statement_timeout=5000 {keepalives}",
                        **tcp_options(self.url),
                    )
                    self._conn.bound = 10.0  # a backend that answers nothing: given up
                    # Not taken: an old connection of ours the database has not yet found
                    # closed still holds it. Tried again a second later.
                    [(taken, _)] = self._conn.execute(
                        f"SELECT pg_try_advisory_lock(%s), {KEEP_WHEN_IDLE}", (self.key,)
                    ).fetchall()
                    if taken:
                        self._held_since = time.monotonic()
                        self._outage.recovered()
                    else:
                        self._drop()
                else:
                    self._conn.execute("SELECT 1")
            except psycopg.Error as error:
                broke = self._held_since is not None  # held until now: tried again at once
                self._drop()
                self._outage.failed(error)
            if not broke:
                # Watched only after a rest that ran its course: a socket that stays readable
                # with nothing wrong makes no busy loop.
                woke = self._rest(watch=not woke)
        self._drop()

    def _rest(self, watch: bool) -> bool:
        """Wait until the next check (``KEEP_EVERY_S``), or, watching, less when the database
        has something to say on the connection: a backend terminated writes why and closes
        it, and the lock is taken again at once, before another replica looks. Whether it
        woke early."""
        conn = self._conn
        if not watch or conn is None or conn.closed:
            self._closed.wait(KEEP_EVERY_S)
            return False
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], KEEP_EVERY_S)
        except (OSError, ValueError):  # closed meanwhile: the next check says so
            return True
        return bool(readable)

    def _drop(self) -> None:
        self._held_since = None
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken
                pass
