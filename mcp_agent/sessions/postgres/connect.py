"""How the PostgreSQL backend connects: TCP options that give up a database gone from the
network, the URL's own options, and connections on which no wait for the database outlasts a
bound (sessions.postgres.database sets it from the statement timeout)."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import PQGen

RV = TypeVar("RV")
POOL_NAME = "mcp-agent-sessions"

# A database gone from the network (a partition, a host switched off) is given up within about
# a minute, not the kernel's quarter of an hour: keepalives find it out on an idle connection,
# tcp_user_timeout (ms) under data it never acknowledges. A URL that sets one keeps its own.
TCP_OPTIONS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}


# A connection that must stay open while idle (a replica's presence, its change feed, its
# pool's while they hold its presence key): a DBA's idle_session_timeout (PostgreSQL 14 and
# later; older servers skip it) would end it. A scalar SQL expression.
KEEP_WHEN_IDLE = (
    "(SELECT set_config('idle_session_timeout', '0', false)"
    " WHERE current_setting('server_version_num')::int >= 140000)"
)


def tcp_options(url: str) -> dict[str, Any]:
    """``TCP_OPTIONS`` less those ``url`` sets itself."""
    given = url_options(url)
    return {key: value for key, value in TCP_OPTIONS.items() if key not in given}


def url_options(url: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError:  # said when the URL is used
        return {}


def behind_pooler(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` reaches PostgreSQL through a connection pooler (PgBouncer and its
    kind): a pooler hands each client a cancel key of its own, so the backend pid the
    connection was told at its start is not the pid of the backend that answers it."""
    [(pid,)] = conn.execute("SELECT pg_backend_pid()").fetchall()
    return bool(pid != conn.info.backend_pid)


class StatementTimeout(psycopg.OperationalError):
    """A statement had no answer within the client's bound: the connection was given up."""


class BoundedConnection(psycopg.Connection[Any]):
    """A connection on which no wait for the database outlasts ``bound`` seconds (a statement,
    a commit): past it the connection is closed and ``StatementTimeout`` raised. The database
    ends a statement that runs too long itself (``statement_timeout``); this bound is for a
    backend that answers nothing at all."""

    bound: float | None = None
    # The statement it ran to be set up (``PostgresDatabase.set_up_each``), if any.
    set_up: str | None = None

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        if timeout is not None or self.bound is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.bound)
        except pg_errors._WaitTimeout:
            self.pgconn.finish()  # its state is unknown: no one may use it again
            raise StatementTimeout(
                f"the database answered nothing for {self.bound:g} s (a backend frozen or a"
                " host hung, the connection still open: past the statement timeout,"
                " MCP_AGENT_DB_STATEMENT_TIMEOUT); the connection was given up"
            ) from None


class _QuietReconnects(logging.Filter):
    """Leaves out the pool's word on each connection attempt that failed (several a second
    while the database is down, each with the driver's message): the database says the
    outage once when a call finds it (``PostgresDatabase.outage``), and once when it ends."""

    QUIET = ("error connecting in %r: %s", "reconnection attempt in pool %r failed after %s sec")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        ours = isinstance(args, tuple) and bool(args) and args[0] == POOL_NAME
        return not (ours and record.msg in self.QUIET)


logging.getLogger("psycopg.pool").addFilter(_QuietReconnects())
