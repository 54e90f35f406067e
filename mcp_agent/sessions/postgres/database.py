"""The PostgreSQL backend's database: a connection pool, the schema and its migrations.

Shape (the SQLite backend's, in PostgreSQL's terms):
- ``sessions``: one row per session with its header JSON, leaf, name, created/modified and
  the running counters of :class:`~mcp_agent.sessions.storage.RowDelta`, updated in the same
  transaction as each append. Listing walks an index on (modified, id).
- ``entries``: one row per entry, keyed by (session_id, id) and indexed on (session_id,
  parent_id), holding the entry's pi JSON; a branch is one recursive query from the leaf up.
  ``search`` is a generated ``tsvector`` of the entry's text (the ``simple`` configuration:
  no stemming, so a word matches what it starts, as in the other backends) under a GIN index.
- ``labels``: the current label of each labelled entry.
- ``session_leases``: the runtime's leases (runtime.leases), one run per session; ``runs``
  and ``run_commands``: the runs of every replica (runtime.run_board).

Concurrency: each append is one transaction that locks its session's row (``FOR UPDATE``), so
appends to one session from any number of replicas are serialised and re-read the leaf, while
appends to different sessions run side by side.

Migrations: ``schema_version`` holds the version; each step in ``MIGRATIONS`` runs once, in
order, in one transaction under a transaction-level advisory lock, so replicas that start
together wait for each other and the second finds the work done.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from mcp_agent.outages import Outage
from mcp_agent.paths import DB_ENV, shown_url
from mcp_agent.sessions.errors import SessionError, Unreachable
from mcp_agent.sessions.postgres.connect import (
    POOL_NAME,
    BoundedConnection,
    StatementTimeout,
    behind_pooler,
    tcp_options,
    url_options,
)
from mcp_agent.sessions.row_waits import RowWaits
from mcp_agent.sessions.sqlite.database import BUSY_TIMEOUT_S
from mcp_agent.sessions.words import CJK_CHARS, latin_folds
from mcp_agent.wire import one_line

T = TypeVar("T")
log = logging.getLogger(__name__)

Durability = Literal["full", "normal"]
# Called inside each transaction that appends to or moves a session, before the change, with
# the connection and the session id; raising refuses the change (runtime.leases).
SessionGuard = Callable[[Any, str], None]
# Called inside each transaction that appends to or moves a session, with the connection and
# the session id, to announce the change there (runtime.change_feed: a NOTIFY is delivered at
# the commit, and only if it commits).
SessionAnnounce = Callable[[Any, str], None]

# Any constant of our own: the key of the advisory lock migrations hold.
MIGRATION_LOCK_KEY = 0x6D637061_67656E74 & 0x7FFFFFFFFFFFFFFF
POOL_TIMEOUT_S = 30.0
# A caller waits for the pool in turns this long, looking between them whether the database
# is down (see PostgresDatabase._lend).
POOL_TURN_S = 1.0
# How long the pool goes on trying to replace a connection while the database is down. Its
# pause between tries doubles (1, 2, 4, … s), so left at psycopg's five minutes a database
# back after a minute away was not tried again for another minute: callers waited the pool's
# whole timeout and were told it was busy. Given up sooner, the next caller (who first finds
# the database back with one connection of its own, see ``connection``) starts a try at once.
RECONNECT_S = 5.0
# Every statement is bounded (``statement_timeout``, MCP_AGENT_DB_STATEMENT_TIMEOUT): the
# database cancels one that runs longer, and a backend that answers nothing at all (frozen,
# stopped, its host hung while its kernel still answers keepalives) cannot cancel its own, so
# the connection is given up STATEMENT_GRACE_S later on this side. Longer than the lock
# timeout by default, so that a lock wait is said as such.
STATEMENT_TIMEOUT_S = 90.0
# The longest lock wait, as a share of the statement timeout (see PostgresDatabase).
LOCK_SHARE = 0.9
STATEMENT_GRACE_S = 5.0
# The pool's check of an idle connection before lending it is an empty statement: one that
# has no answer in this long is dropped (and another connection lent), not waited for.
CHECK_TIMEOUT_S = 10.0

# words.CJK_CHARS as a PostgreSQL bracket expression (its regular expressions take \u escapes).
_CJK_CLASS = (
    "["
    + "".join(
        c if c == "-" else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
        for c in CJK_CHARS
    )
    + "]"
)
MIGRATIONS: list[str] = [
    # 1: the first shape
    """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    header TEXT NOT NULL,
    name TEXT,
    cwd TEXT,
    leaf TEXT,
    created TEXT NOT NULL,
    modified TEXT NOT NULL,
    parent_session TEXT,
    first_user_message TEXT,
    next_seq BIGINT NOT NULL DEFAULT 0,
    entry_count BIGINT NOT NULL DEFAULT 0,
    message_count BIGINT NOT NULL DEFAULT 0,
    tool_call_count BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    total_tokens BIGINT NOT NULL DEFAULT 0,
    cost_total DOUBLE PRECISION NOT NULL DEFAULT 0,
    roles JSONB NOT NULL DEFAULT '{}',
    leaf_count BIGINT NOT NULL DEFAULT 0,
    branch_point_count BIGINT NOT NULL DEFAULT 0,
    first_timestamp TEXT,
    last_timestamp TEXT
);
CREATE INDEX sessions_modified ON sessions (modified, id);
CREATE TABLE entries (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    parent_id TEXT,
    type TEXT NOT NULL,
    role TEXT,
    timestamp TEXT NOT NULL,
    seq BIGINT NOT NULL,
    data TEXT NOT NULL,
    text TEXT,
    search TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', coalesce(text, ''))) STORED,
    PRIMARY KEY (session_id, id)
);
CREATE INDEX entries_parent ON entries (session_id, parent_id);
CREATE INDEX entries_seq ON entries (session_id, seq);
CREATE INDEX entries_search ON entries USING GIN (search);
CREATE TABLE labels (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    target_id TEXT NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY (session_id, target_id)
);
-- runtime.leases: one run per session across replicas
CREATE TABLE session_leases (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires DOUBLE PRECISION NOT NULL
);
-- runtime.run_board: the runs of every replica, and commands for them
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    agent TEXT NOT NULL,
    model TEXT NOT NULL,
    depth INTEGER NOT NULL,
    status TEXT NOT NULL,
    started DOUBLE PRECISION NOT NULL,
    finished DOUBLE PRECISION,
    event_count BIGINT NOT NULL,
    last_event TEXT NOT NULL,
    answer TEXT,
    error TEXT,
    stop_reason TEXT,
    usage TEXT NOT NULL,
    new_messages INTEGER NOT NULL,
    expires DOUBLE PRECISION NOT NULL
);
CREATE INDEX runs_started ON runs (started, id);
CREATE INDEX runs_running ON runs (status) WHERE status = 'running';
CREATE TABLE run_commands (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT
);
CREATE INDEX run_commands_owner ON run_commands (owner, id);
""",
    # 2: each session row's incarnation (see sql.storage.new_incarnation)
    "ALTER TABLE sessions ADD COLUMN incarnation TEXT",
    # 3: each run's warnings on the board (runtime.run_board), a JSON array of strings
    "ALTER TABLE runs ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]'",
    # 4: the run whose tool call started each run (a sub-agent's), on the board
    "ALTER TABLE runs ADD COLUMN parent_run_id TEXT",
    # 5: search text as words.search_text makes it: Latin letters folded, each CJK character a
    # word of its own
    f"UPDATE entries SET text = regexp_replace(translate(text, '{''.join(latin_folds())}',"
    f" '{''.join(latin_folds().values())}'), '({_CJK_CLASS})', ' \\1 ', 'g')"
    " WHERE text ~ '[^\\x01-\\x7f]'",
]
SCHEMA_VERSION = len(MIGRATIONS)
# Every table of ours: a database holding one of these names without our schema_version is
# another program's.
TABLES = (
    "schema_version",
    "sessions",
    "entries",
    "labels",
    "session_leases",
    "runs",
    "run_commands",
)


class BrokenConnection(SessionError):
    """The connection broke during a transaction, perhaps during its commit: what it wrote is
    whole or absent, and a read on another connection can tell which (``unwritten`` says it
    is absent)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(
            "storage",
            f"the connection to the session database {where} broke: {reason};"
            " a write under way is either whole or absent, read before writing it again",
        )
        self.where, self.reason = where, reason

    def unwritten(self) -> SessionError:
        return SessionError(
            "storage",
            f"the connection to the session database {self.where} broke: {self.reason};"
            " nothing was written, try again",
        )


def connection_lost(error: psycopg.Error) -> bool:
    """Whether ``error`` ended the connection (what the transaction wrote is then unknown):
    no SQLSTATE (the client lost it), a connection error (08…) or the server ending the
    session (57P…: shut down, terminated, idle too long). Not one that failed a statement, as
    a full disk (53100) does: that transaction was rolled back."""
    state = error.sqlstate
    return state is None or state.startswith(("08", "57P"))


def storage_error(where: str, error: psycopg.Error) -> SessionError:
    """A database failure as an error that says what happened and what became of the write."""
    if isinstance(error, pg_errors.ReadOnlySqlTransaction):
        return SessionError(
            "storage",
            f"the session database {where} is read-only (a standby server, or"
            " default_transaction_read_only is on); nothing was written",
        )
    if isinstance(error, psycopg.OperationalError) and connection_lost(error):
        return BrokenConnection(where, one_line(error))
    if isinstance(error, pg_errors.DiskFull):  # as SQLite's is said
        return SessionError(
            "storage",
            f"the disk holding the session database {where} is full; nothing was written"
            f" ({one_line(error)})",
        )
    # The statement failed: its transaction was rolled back (a full disk, out of memory, a
    # limit such as temp_file_limit: psycopg's OperationalError too, the connection whole).
    return SessionError(
        "storage", f"the session database {where} failed: {one_line(error)}; nothing was written"
    )


# libpq's refusals of a URL's own settings (an unknown parameter, a value it does not take),
# told before any connection is tried: no database or network is to blame.
_URL_REFUSALS = re.compile(
    r"^(connection is bad: )?(invalid URI query parameter|invalid connection option"
    r"|missing \"=\" after)|^connection is bad: invalid \w+ value"
)


# A new connection refused for want of a slot (the server's max_connections, a role's or a
# database's CONNECTION LIMIT; SQLSTATE 53300, which psycopg does not give for an error at
# connection time): the database is there, only the pool cannot grow.
_NO_SLOT = re.compile(r"too many (connections|clients)|connection slots are reserved")


def _url_refused(error: psycopg.Error) -> bool:
    return isinstance(error, psycopg.ProgrammingError | psycopg.OperationalError) and bool(
        _URL_REFUSALS.search(str(error))
    )


class PostgresDatabase:
    """A PostgreSQL session database, shared by the sessions a repo opens.

    Blocking: call it from worker threads, never from an event loop. Each call borrows a
    connection from a bounded pool (``max_connections``; a caller beyond it waits up to
    ``POOL_TIMEOUT_S``, then is refused), and waits for a lock (a session's row, or a table
    another program locked) up to ``lock_timeout`` seconds, as SQLite's writers wait.
    """

    def __init__(
        self,
        url: str,
        durability: Durability = "full",
        session_guard: SessionGuard | None = None,
        min_connections: int = 1,
        max_connections: int = 10,
        create: bool = True,
        lock_timeout: float = BUSY_TIMEOUT_S,
        statement_timeout: float = STATEMENT_TIMEOUT_S,
    ) -> None:
        if durability not in ("full", "normal"):
            raise ValueError("durability must be one of full, normal")
        if not 0 < statement_timeout <= 24 * 3600:
            raise ValueError("statement_timeout must be more than 0 and at most a day (seconds)")
        self.url = url
        self.where = shown_url(url)
        self.session_guard = session_guard
        self.create = create
        self.statement_timeout = statement_timeout
        # The lock wait ends before the statement timeout, whose timer starts first: one as
        # long was ended by it, and a lock held by another was said as a statement cancelled.
        self.lock_timeout = min(lock_timeout, statement_timeout * LOCK_SHARE)
        # "normal": a commit returns before its WAL reaches the disk (PostgreSQL's
        # synchronous_commit = off): a crash of the database server may lose the newest
        # appends, never corrupt older ones.
        # Custom plans always: psycopg prepares a statement after a few runs, and PostgreSQL may
        # then keep a generic plan made from a young table's statistics, a scan of the whole
        # session for every append (appends went from 5 to 60 ms over 400 entries).
        # A lock held by another (a program's LOCK TABLE, a transaction left open) must not
        # hold a request, and the worker thread serving it, for as long as it is held.
        options = "-c plan_cache_mode=force_custom_plan"
        options += f" -c lock_timeout={round(self.lock_timeout * 1000)}"
        options += f" -c statement_timeout={round(statement_timeout * 1000)}"
        # A transaction whose client stops between two statements (a replica frozen, its
        # machine paused) would hold its session's row for as long: the database ends it
        # after as long as a statement may run (an import reading its file lifts this).
        options += f" -c idle_in_transaction_session_timeout={round(statement_timeout * 1000)}"
        if durability == "normal":
            options += " -c synchronous_commit=off"
        # The URL's own options (a search_path, …) come after ours, so they stand.
        given = url_options(url).get("options")
        if given:
            options += f" {given}"
        # Every connection's: the pool's, the first one's and a probe's, so that settings a
        # pooler refuses are refused at the start, and said (see ``_unprepared``).
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": options, **tcp_options(url)}
        self.pool: ConnectionPool[BoundedConnection] = ConnectionPool(
            url,
            connection_class=self._pooled_class(),
            min_size=min_connections,
            max_size=max_connections,
            kwargs=self._kwargs,
            configure=self._configure,
            timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_S,
            check=self._check,
            open=False,
            name=POOL_NAME,
        )
        self._closed = threading.Event()
        # A statement each connection runs once, before it is first used (``set_up_each``).
        self._setup: str | None = None
        # The bound of the call this thread makes now, when shorter than the statement
        # timeout (``write(within=…)``): the pool's check of a connection keeps to it too.
        self._call = threading.local()
        self._unreachable = False  # the pool timed out and a connection attempt failed
        # Said once when the database is found out of reach, and once when it is back.
        self.outage = Outage(log, f"the session database {self.where} is out of reach")
        # Said once when the pool is short and the database refuses it more connections (no
        # slot left), and once when a connection can be made again; callers meanwhile wait
        # for the connections the pool has.
        self.no_slot = Outage(
            log,
            f"the session database {self.where} refuses this server more connections (calls"
            " wait for those it has)",
        )
        # Reached through a connection pooler (connect.behind_pooler): set by the first one.
        self.pooled = False
        # The server's bound on its writes waiting for held session rows (sessions.row_waits);
        # None: as many as call.
        self.row_waits: RowWaits | None = None
        # Who hears of each change of a session's entries, told in the change's transaction
        # (the command line's announcer; a server publishes on its bus instead).
        self.announce: SessionAnnounce | None = None
        try:
            # One connection first: an unreachable database is said at once (the pool would
            # retry until its timeout), and the schema is ready before any request. Its
            # statements are not bounded: a migration of a large database may take long, and
            # a replica starting meanwhile waits for it (under the migrations' lock).
            with psycopg.connect(url, connect_timeout=10, **self._kwargs) as conn:
                self._migrate(conn)
                self.pooled = behind_pooler(conn)
        except psycopg.Error as error:
            raise self._unprepared(error) from None
        self.pool.open(wait=False)

    def _pooled_class(self) -> type[BoundedConnection]:
        """The pool's connections, whose refusal for want of a slot is said (``no_slot``): the
        pool's own word on each failed try is not logged (connect._QuietReconnects), and its
        callers wait for the connections it has, so nothing else would say why it stays
        short."""
        database = self

        class Pooled(BoundedConnection):
            @classmethod
            def connect(cls, *args: Any, **kwargs: Any) -> Pooled:
                try:
                    conn = super().connect(*args, **kwargs)
                except psycopg.OperationalError as error:
                    if _NO_SLOT.search(str(error)):
                        database.no_slot.failed(error)
                    raise
                database.no_slot.recovered()
                return conn

        return Pooled

    @property
    def lock_wait(self) -> float:
        return self.lock_timeout

    def _client_bound(self) -> float:
        return self.statement_timeout + STATEMENT_GRACE_S

    def _bound(self, conn: BoundedConnection) -> None:
        conn.bound = self._client_bound()

    def _configure(self, conn: BoundedConnection) -> None:
        """The pool's set-up of each new connection."""
        self._bound(conn)
        self._set_up(conn)

    def set_up_each(self, statement: str) -> None:
        """Have every connection run ``statement`` once before it is first used (a new one
        when the pool makes it, one made before when it is first lent): a replica's presence
        (runtime.presence) holds a lock of its own on each."""
        self._setup = statement

    def _set_up(self, conn: BoundedConnection) -> None:
        setup = self._setup
        if setup is not None and conn.set_up != setup:
            conn.execute(setup)
            conn.set_up = setup

    def _check(self, conn: BoundedConnection) -> None:
        """The pool's check of a connection before lending it. One found broken means the
        database restarted or dropped its connections, so the pool's other idle ones are dead
        too: they are all dropped at once (the pool opens new ones). Left to the pool, each
        would be checked in turn with a growing pause between (1, 2, 4, 8 s): a caller after a
        restart of the database waited the pool's whole timeout and was told it was busy."""
        within: float | None = getattr(self._call, "within", None)
        conn.bound = min(CHECK_TIMEOUT_S, within or CHECK_TIMEOUT_S, self._client_bound())
        try:
            ConnectionPool.check_connection(conn)
        except StatementTimeout:
            raise  # this one stopped answering; the others may be well
        except psycopg.Error:
            self.pool.drain()
            raise
        finally:
            self._bound(conn)

    def _unprepared(self, error: psycopg.Error) -> SessionError:
        """Why the database could not be opened, in one line that says what to do."""
        if _url_refused(error):
            return SessionError(
                "storage",
                f"the session database URL {self.where} holds a setting PostgreSQL's client"
                f" does not take ({one_line(error)}): correct it in --db or {DB_ENV}",
            )
        if isinstance(error, psycopg.OperationalError) and "startup parameter" in str(error):
            return SessionError(
                "storage",
                f"the session database {self.where} refused this server's connection settings"
                f" ({one_line(error)}): a connection pooler (PgBouncer) stands between; connect"
                " to PostgreSQL itself (see the README: Several replicas over one PostgreSQL)",
            )
        if isinstance(error, psycopg.OperationalError):
            return SessionError(
                "storage", f"cannot reach the session database {self.where}: {one_line(error)}"
            )
        if isinstance(error, pg_errors.InsufficientPrivilege):
            return SessionError(
                "storage",
                f"the session database {self.where} has no session tables (or older ones), and"
                f" this role may not make them ({one_line(error)}): grant it CREATE on the"
                " schema, or start the server once as a role that may",
            )
        if isinstance(error, pg_errors.ReadOnlySqlTransaction):
            return SessionError(
                "storage",
                f"the session database {self.where} is read-only and has no session tables"
                " (or older ones): start the server once on the writable primary",
            )
        return SessionError(
            "storage", f"the session database {self.where} could not be opened: {one_line(error)}"
        )

    @contextmanager
    def connection(self, within: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool's for one call. ``within`` (seconds, shorter than the
        statement timeout) bounds the call's waits instead: for a connection, for its check,
        and for each answer of the database on it (``write`` sets the transaction's
        statement timeout to two thirds of it)."""
        if self._closed.is_set():
            raise SessionError("closed", f"the session database {self.where} is closed")
        if self._unreachable:
            # Found down before: one connection attempt says whether it is still, instead of
            # every call waiting the pool's whole timeout while the pool retries.
            down = self._probe()
            if down is not None:
                self.outage.failed(down.reason)
                raise down
            self._unreachable = False
            self.outage.recovered()
        try:
            self._call.within = within
            try:
                conn = self._lend(within)
            finally:
                self._call.within = None
            if within is not None:
                conn.bound = within
            try:
                self._set_up(conn)
                with conn:  # as the pool's own connection(): commit, or roll back
                    yield conn
            finally:
                self._bound(conn)
                self.pool.putconn(conn)
        except PoolTimeout:
            raise self._no_connection(within) from None
        except pg_errors.LockNotAvailable:
            raise SessionError(
                "busy",
                f"the session database {self.where} stayed locked by another transaction for"
                f" {self.lock_timeout:g} s; nothing was written, try again",
            ) from None
        except pg_errors.QueryCanceled:
            # statement_timeout (or an administrator's pg_cancel_backend): rolled back.
            bound = (
                f"{within * 2 / 3:.3g} s (the bound of this call)"
                if within is not None
                else f"{self.statement_timeout:g} s (the statement timeout,"
                " MCP_AGENT_DB_STATEMENT_TIMEOUT)"
            )
            raise SessionError(
                "storage",
                f"a statement on the session database {self.where} was cancelled after running"
                f" up to {bound}; nothing was written, try again",
            ) from None
        except pg_errors.DataError as error:
            raise SessionError(
                "invalid_entry", f"the database refused a value: {one_line(error)}"
            ) from None
        except psycopg.Error as error:
            raise storage_error(self.where, error) from None

    def _lend(self, within: float | None = None) -> BoundedConnection:
        """A connection of the pool's, waited for up to ``POOL_TIMEOUT_S`` in turns of
        ``POOL_TURN_S``. After a turn with the pool short of connections (it could not make
        them), one attempt of our own says whether the database is down: then the caller is
        told at once, not after the whole wait; up, the caller gets back in line, which makes
        the pool try again (it tries when a caller joins the line: callers already waiting
        when its last try gave up waited the whole timeout, the database long back, and were
        told that every connection stayed busy). ``within`` shortens the wait."""
        deadline = time.monotonic() + min(POOL_TIMEOUT_S, within or POOL_TIMEOUT_S)
        while True:
            turn = min(POOL_TURN_S, deadline - time.monotonic())
            try:
                return self.pool.getconn(timeout=max(turn, 0.001))
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
            if self.pool.get_stats().get("pool_size", 0) >= self.pool.max_size:
                continue  # every connection is there, and lent: busy, not down
            down = self._probe()
            if down is not None:
                self._unreachable = True
                self.outage.failed(down.reason)
                raise down

    def _no_connection(self, within: float | None = None) -> SessionError:
        """Why the pool gave no connection in time: the database is down or unreachable (the
        pool only retries then), or every connection stayed busy."""
        down = self._probe()
        if down is not None:
            self._unreachable = True
            self.outage.failed(down.reason)
            return down
        short = ""
        if self.no_slot.down:
            size = self.pool.get_stats().get("pool_size", 0)
            short = f" (the {size} it has: it refuses more, see the log)"
        return SessionError(
            "busy",
            f"every connection to the session database {self.where}{short} stayed busy for"
            f" {min(POOL_TIMEOUT_S, within or POOL_TIMEOUT_S):g} s; nothing was written,"
            " try again",
        )

    def side_connection(self) -> psycopg.Connection[Any]:
        """A connection outside the pool, for a short look at the database while a pooled one
        waits (``row_lock``); its statements are bounded."""
        return psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=5,
            options=f"-c statement_timeout={round(CHECK_TIMEOUT_S * 1000)}",
            **tcp_options(self.url),
        )

    def _probe(self) -> Unreachable | None:
        """Whether the database is there: None (a connection could be made now, or it was
        refused for want of a slot: see ``no_slot``), or the error saying why not."""
        try:
            with psycopg.connect(self.url, connect_timeout=5, **self._kwargs):
                self.no_slot.recovered()
                return None
        except psycopg.Error as error:
            reason = one_line(error)
            if isinstance(error, psycopg.OperationalError) and _NO_SLOT.search(reason):
                # Up, and full: the pool's connections still work; said here, once (the
                # pool's own tries are not logged, see connect._QuietReconnects).
                self.no_slot.failed(reason)
                return None
            return Unreachable(
                f"cannot reach the session database {self.where}: {reason};"
                " nothing was written, try again",
                reason,
            )

    def write(self, work: Callable[[psycopg.Connection[Any]], T], within: float | None = None) -> T:
        """Run ``work`` in one transaction (committed when it returns, rolled back when it
        raises); ``within``: the whole call is bounded by so many seconds (see
        ``connection``), for work that must end sooner than the statement timeout."""
        if within is not None and not 0 < within < self.statement_timeout:
            within = None  # the statement timeout bounds it already
        with self.connection(within) as conn:
            try:
                with conn.transaction():
                    if within is not None:  # a live database cancels first, and says so
                        conn.execute(
                            "SELECT set_config('statement_timeout', %s, true)",
                            (f"{max(round(within * 2 / 3 * 1000), 1)}ms",),
                        )
                    return work(conn)
            except pg_errors.DataError as error:
                raise SessionError(
                    "invalid_entry", f"the database refused a value: {error}"
                ) from None

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        with self.connection() as conn:
            return conn.execute(sql, params).fetchall()

    def read_only(self) -> str | None:
        """Why a write would be refused (a standby, default_transaction_read_only, or a role
        that may only read the tables), or None."""
        [(standby, role, unwritable)] = self.read(
            "SELECT current_setting('transaction_read_only') = 'on', current_user,"
            " array(SELECT t FROM unnest(%s::text[]) AS t"
            "       WHERE NOT has_table_privilege(t, 'INSERT'))",
            [[name for name in TABLES if name != "schema_version"]],
        )
        if standby:
            return "a standby server, or default_transaction_read_only is on"
        if unwritable:
            return f"the role {role} may not write to {', '.join(unwritable)}"
        return None

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Bring the schema to ``SCHEMA_VERSION`` (see the module docstring). A database
        whose schema is current is only read: a role that may not create tables, or a
        read-only standby, opens it. A database that holds a table of ours by name but no
        ``schema_version`` is another program's, and is refused before anything is written.
        Without ``create``, a database with no tables of ours is refused as it is found: a
        command that only reads must not leave our tables in a database named by mistake."""
        with conn.transaction():
            for setting in ("statement_timeout", "lock_timeout"):
                conn.execute(f"SET LOCAL {setting} = 0")  # not bounded (see __init__)
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            found = {
                name
                for (name,) in conn.execute(
                    "SELECT relname FROM pg_class WHERE relname = ANY(%s)"
                    " AND relkind IN ('r', 'p', 'v', 'm', 'f') AND pg_table_is_visible(oid)",
                    [list(TABLES)],
                )
            }
            if "schema_version" not in found and found:
                raise SessionError(
                    "storage",
                    f"the database {self.where} is not a session database: it holds a table"
                    f" {min(found)!r} of another program (and no schema_version of ours);"
                    " give the sessions a database of their own",
                )
            try:
                row = (
                    conn.execute("SELECT version FROM schema_version").fetchone() if found else None
                )
            except pg_errors.UndefinedColumn:
                raise SessionError(
                    "storage",
                    f"the database {self.where} is not a session database: its table"
                    " 'schema_version' is another program's; give the sessions a database of"
                    " their own",
                ) from None
            version = row[0] if row else 0
            if version == SCHEMA_VERSION:
                return
            if not found and not self.create:
                raise SessionError(
                    "storage",
                    f"the database {self.where} holds no sessions (no session tables; nothing"
                    " was created): check the URL; a run, a chat, `serve` or `sessions import`"
                    " makes the tables",
                )
            if version > SCHEMA_VERSION:
                raise SessionError(
                    "storage",
                    f"the session database {self.where} has schema version {version}, newer"
                    f" than this server's {SCHEMA_VERSION}: upgrade mcp-agent-sessions",
                )
            if not found:
                conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for step in MIGRATIONS[version:]:
                conn.execute(step)
            if row is None:
                conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION,))
            else:
                conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))

    def close(self) -> None:
        self._closed.set()
        self.pool.close()
