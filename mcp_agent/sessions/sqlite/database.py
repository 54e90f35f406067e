"""The SQLite backend: every session in one database file.

Shape (each everyday query costs what it returns, not the size of the file):
- ``sessions``: one row per session with its header JSON, leaf, name, created/modified and
  running counters (entries, messages by role, tool calls, tokens, cost, leaves, branch
  points, first and last entry time, first user message), all updated in the same
  transaction as each append, so statistics cost one row. Listing walks an index on
  (modified, id).
- ``entries``: one row per entry, unique on (session_id, id) and indexed on (session_id,
  parent_id), holding the entry's pi JSON. A branch is one recursive query from the leaf up,
  so reading it costs O(depth); building a context parses only the newest compaction, what it
  keeps and what follows (plus the newest model, thinking level and tools settings before).
  A repo keeps the sessions it opened last open, with their parsed entries.
- ``labels``: the current label of each labelled entry.
- ``entries_fts``: FTS5 over the text of messages, summaries and names (``entries.text``).
  An append only stores the text; a search first indexes what was appended since the last
  search (rows with ``n`` above the ``fts_indexed_upto`` mark in ``meta``), a batch of
  ``FTS_BATCH_ROWS`` per transaction, so that appends go on in between. Indexing inside
  every append would make each durable append write several more pages.

Durability and concurrency: WAL, ``synchronous=FULL`` (a committed append survives power
loss), ``BEGIN IMMEDIATE`` transactions retried while another connection holds the write lock,
so two processes appending to one file neither fail nor lose entries. The appends that wait
while one commits are committed together (group commit, see ``SqliteDatabase.write``): each
is acknowledged only once committed, with one fsync for the group instead of one each. The leaf
is re-read inside each append's transaction: an entry appended after another process moved
the leaf goes onto that leaf instead of forking silently from a stale one.
"""

from __future__ import annotations

import builtins
import functools
import itertools
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.sqlite.read_only import (
    PrivateCopy,
    file_uri,
    read_only_reason,
    read_only_uri,
)
from mcp_agent.sessions.words import search_text

T = TypeVar("T")

SCHEMA_VERSION = 5
# Version 2 keeps every figure of session_stats in the sessions row. A database of version 1
# gains the columns empty (NULL): each session's figures are counted the first time they are
# asked for, and kept up to date from then on. Version 3 has TREE_INDEX instead of the
# (session_id, parent_id) index (built once, when an older database is first opened).
# Version 4 gives each session row its ``incarnation`` (see sql.storage.new_incarnation); rows
# of older versions have none (NULL), and keep none. Version 5 stores search text with each
# CJK character a word of its own and Latin letters folded (``words.search_text``): an older
# database has its texts that change so made again, and its full-text index rebuilt at the next
# search.
_STATS_COLUMNS = (
    ("roles", "TEXT"),
    ("leaf_count", "INTEGER"),
    ("branch_point_count", "INTEGER"),
    ("first_timestamp", "TEXT"),
    ("last_timestamp", "TEXT"),
)
# An entry's place in the tree, for the searches of children by parent (every append counts
# its parent's) and for reading the whole tree without its content (the tree and outline
# views): the entry rows hold the whole entry, so a ~1 KB message would read ten times the
# pages. It replaces version 2's (session_id, parent_id) index: one index page per append, as
# before. (An index led by (session_id, n) would save the sort of the tree read, but SQLite
# then takes it for the children searches too, and walks the whole session on every append.)
TREE_INDEX = (
    "CREATE INDEX IF NOT EXISTS idx_entries_tree"
    " ON entries (session_id, parent_id, type, n, id, timestamp)"
)
# A new database's tables (version SCHEMA_VERSION), in plain SQL: sqlite-utils wrote them
# before, and importing it (with pluggy, dateutil and ctypes) cost every first start on a new
# database (each test's, each new user's) more than all the rest of opening it.
_DEFAULT_ZERO = (
    "next_seq",
    "entry_count",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)
_SESSION_COLUMNS = ",\n".join(
    [
        '   "id" TEXT PRIMARY KEY',
        '   "header" TEXT NOT NULL',
        *(f'   "{name}" TEXT' for name in ("name", "cwd", "leaf")),
        *(f'   "{name}" TEXT NOT NULL' for name in ("created", "modified")),
        *(f'   "{name}" TEXT' for name in ("parent_session", "first_user_message")),
        *(f'   "{name}" INTEGER DEFAULT 0' for name in _DEFAULT_ZERO),
        '   "cost_total" REAL DEFAULT 0.0',
        *(f'   "{name}" {kind}' for name, kind in _STATS_COLUMNS),
        '   "incarnation" TEXT',
    ]
)
NEW_SCHEMA = (
    f'CREATE TABLE IF NOT EXISTS "sessions" (\n{_SESSION_COLUMNS}\n)',
    'CREATE INDEX IF NOT EXISTS "idx_sessions_modified_id" ON "sessions" ("modified", "id")',
    # ``n`` is the rowid: full-text rows point at it, and an explicit integer key keeps it
    # stable across VACUUM. (session_id, id) is the entry's real key.
    'CREATE TABLE IF NOT EXISTS "entries" (\n'
    '   "n" INTEGER PRIMARY KEY,\n'
    '   "session_id" TEXT NOT NULL,\n'
    '   "id" TEXT NOT NULL,\n'
    '   "parent_id" TEXT,\n'
    '   "type" TEXT NOT NULL,\n'
    '   "role" TEXT,\n'
    '   "timestamp" TEXT NOT NULL,\n'
    '   "seq" INTEGER NOT NULL,\n'
    '   "data" TEXT NOT NULL,\n'
    '   "text" TEXT\n'
    ")",
    'CREATE UNIQUE INDEX IF NOT EXISTS "idx_entries_session_id_id"'
    ' ON "entries" ("session_id", "id")',
    # No index on seq or type of their own: the queries that order by seq or filter by type
    # read the whole session anyway, and each index is one more page to fsync on every append.
    TREE_INDEX,
    'CREATE TABLE IF NOT EXISTS "labels" (\n'
    '   "session_id" TEXT,\n'
    '   "target_id" TEXT,\n'
    '   "label" TEXT,\n'
    '   PRIMARY KEY ("session_id", "target_id")\n'
    ")",
    'CREATE TABLE IF NOT EXISTS "meta" (\n   "key" TEXT PRIMARY KEY,\n   "value" INTEGER\n)',
    # Which session each indexed entry belongs to: a search resolves thousands of hits through
    # this narrow table instead of the wide entry rows.
    'CREATE TABLE IF NOT EXISTS "fts_docs" (\n'
    '   "n" INTEGER PRIMARY KEY,\n'
    '   "session_id" TEXT NOT NULL\n'
    ")",
)
# The full-text index of the entries' text, kept by index_pending_text (no triggers).
FTS_TABLE = 'CREATE VIRTUAL TABLE "entries_fts" USING FTS5 (\n    "text",\n    content="entries"\n)'
BUSY_TIMEOUT_S = 60.0
# How long SQLite itself waits for the write lock at a time for a write on the main thread,
# before the retry loop sleeps and tries again (see ``SqliteDatabase.write``).
MAIN_THREAD_WAIT_S = 0.1
# The same on a worker thread: a write there that waits for another process's lock hears
# within it that the process is stopping (see ``stop_waiting_for_locks``).
WORKER_THREAD_WAIT_S = 0.5
# Every database open in this process (and leases' book: ``stops_with_the_process``), which
# ``stop_waiting_for_locks`` tells.
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def stops_with_the_process(thing: Any) -> None:
    """``thing.stopping`` is set True by ``stop_waiting_for_locks`` (while ``thing`` lives)."""
    _OPEN.add(thing)


def stop_waiting_for_locks() -> None:
    """The process is stopping (SIGTERM): the writes of its open databases that wait for a
    lock another process holds give up within ``WORKER_THREAD_WAIT_S``, nothing written, and
    so do those that come later. Before, a request waiting so (its caller cannot be cancelled
    while its work runs) held the server's stop for up to the busy timeout, a minute, and the
    search indexer's write as long again."""
    for database in list(_OPEN):
        database.stopping = True


# The tables a session database holds (with the leases table of runtime.leases); a file with
# any other table is another program's.
_OUR_TABLES = frozenset({"sessions", "entries", "labels", "meta", "fts_docs", "session_leases"})


def _is_ours(table: str) -> bool:
    return table in _OUR_TABLES or table.startswith("entries_fts")


def refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse, before anything is written, a SQLite file of another program (its tables are
    not ours) or of a newer version of this one: making it a session database would change
    data that is not ours to change (WAL mode, our tables)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SessionError(
            "storage",
            f"the session database {path} has schema version {version}, newer than this"
            f" version's {SCHEMA_VERSION}: upgrade mcp-agent-sessions",
        )
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
    ).fetchall()
    foreign = sorted(name for (name,) in rows if not _is_ours(name))
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise SessionError(
            "storage",
            f"{path} is a SQLite database of another program (it has tables no session"
            f" database has: {', '.join(foreign[:5])}{more}); it was left as it was. Name a"
            " new file, or a session database",
        )


def is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def is_damage(error: BaseException) -> bool:
    """A SQLite error that says the file is damaged or no database (SQLITE_CORRUPT,
    SQLITE_NOTADB), which sqlite3 raises as a bare DatabaseError."""
    name = getattr(error, "sqlite_errorname", None) or ""
    return isinstance(error, sqlite3.DatabaseError) and name.startswith(
        ("SQLITE_CORRUPT", "SQLITE_NOTADB")
    )


def damage_error(path: Path, error: sqlite3.Error) -> SessionError:
    """A damaged database file said as such, with what to do (a traceback said it before)."""
    if (getattr(error, "sqlite_errorname", None) or "").startswith("SQLITE_NOTADB"):
        return SessionError(
            "corrupt",
            f"{path} is not a SQLite database, or its header is damaged ({error}); it was left"
            " as it was: name a session database, or a new file",
        )
    return SessionError(
        "corrupt",
        f"the session database {path} is damaged ({error}); nothing was written. Restore it"
        " from a backup (SQLite's `.recover` command may save what it still holds); the parts"
        " still whole are read as before",
    )


def storage_error(path: Path, error: sqlite3.Error | OSError) -> SessionError:
    """A database failure (disk full, read-only file, I/O error) as an error that says what
    happened; the transaction it broke was rolled back."""
    text = str(error)
    if "full" in text.lower():
        return SessionError(
            "storage", f"the disk holding {path} is full; nothing was written ({text})"
        )
    return SessionError("storage", f"the session database {path} failed: {text}")


# "full": a committed append survives a power loss (fsync at every commit). "normal": it
# survives the process being killed, but the newest appends may be lost if the machine stops.
Durability = Literal["full", "normal"]
# Called inside each transaction that appends to or moves a session, before the change, with
# the connection and the session id; raising refuses the change. The runtime checks there that
# no other process runs an agent in the session (runtime.leases).
SessionGuard = Callable[[sqlite3.Connection, str], None]
DURABILITY: dict[str, str] = {"full": "FULL", "normal": "NORMAL"}
# Read connections kept open between reads; one more is opened for each read beyond them at
# once, and closed after it (a worker thread that comes and goes leaves none behind).
IDLE_READERS = 8


# Writes one transaction takes at most (see SqliteDatabase.write); the rest wait for the next.
GROUP_WRITES = 64

# Session rows whose newest write by this process is remembered while the file is watched
# (see OwnWrites): past it, the oldest is forgotten.
OWN_WRITES = 4096


class OwnWrites:
    """The session rows this process wrote lately, while a watcher of the file (sqlite.watch)
    looks for the other processes' writes: each session's newest ``modified`` stamp written
    here, or None once deleted here. This process notified its own writes as it made them; a
    row still bearing a stamp written here is not another's. Bounded: a row forgotten is at
    worst notified once more.

    Writes are staged while their transaction runs and known only once it commits
    (``publish``, under ``gate``, which a look holds while it reads): known as they were
    written, a look made meanwhile took a creation not yet in the file for one another process
    deleted (a list change), then, the row there at the next look, for one another created (a
    list change again), and an append's stamp not yet committed made the one committed before
    it pass for another's."""

    def __init__(self, limit: int = OWN_WRITES) -> None:
        self.limit = max(1, limit)
        # Held by a commit as it publishes its writes, and by a look from its snapshot on: a
        # look sees this process's writes exactly as far as its snapshot of the file does.
        self.gate = threading.Lock()
        self._lock = threading.Lock()
        self._rows: dict[str, str | None] = {}  # insertion-ordered: oldest first
        self._deletions = 0  # sessions deleted here since ``take_news``
        # Sessions created here since ``take_news`` (by id: one another process deleted before
        # the watcher looked must be told from one never made).
        self._created: dict[str, None] = {}
        # The writes of the transaction under way (one writer connection: one at a time).
        self._staged: list[tuple[str, str | None, bool]] = []

    def wrote(self, session_id: str, modified: str | None, created: bool = False) -> None:
        """A write of the transaction under way (known once it commits: ``publish``)."""
        with self._lock:
            self._staged.append((session_id, modified, created))

    def staged(self) -> int:
        """How many writes the transaction under way made so far (a savepoint's mark)."""
        with self._lock:
            return len(self._staged)

    def discard(self, mark: int = 0) -> None:
        """Forget the transaction's writes from ``mark`` on (rolled back)."""
        with self._lock:
            del self._staged[mark:]

    def publish(self) -> None:
        """The transaction committed: its writes are known (call it holding ``gate``)."""
        with self._lock:
            for session_id, modified, created in self._staged:
                if created:
                    self._created[session_id] = None
                    if len(self._created) > self.limit:  # then passes for another's: harmless
                        del self._created[next(iter(self._created))]
                self._rows.pop(session_id, None)
                self._rows[session_id] = modified
                if len(self._rows) > self.limit:
                    del self._rows[next(iter(self._rows))]
                if modified is None:
                    self._deletions += 1
            self._staged.clear()

    def is_own(self, session_id: str, modified: str) -> bool:
        """Whether the row's ``modified`` stamp is one this process wrote."""
        with self._lock:
            return self._rows.get(session_id, "") == modified

    def deleted_here(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._rows and self._rows[session_id] is None

    def take_news(self) -> tuple[list[str], int]:
        """The sessions this process created, and how many it deleted, since the last call."""
        with self._lock:
            taken = list(self._created), self._deletions
            self._created.clear()
            self._deletions = 0
            return taken


class WriterConnection(sqlite3.Connection):
    """The writer's connection, carrying the record of this process's writes while the file
    is watched (``SqliteDatabase.record_own_writes``): the statements that write a session's
    row reach it through the connection they are given."""

    own_writes: OwnWrites | None = None


def record_write(conn: Any, session_id: str, modified: str | None, created: bool = False) -> None:
    """Note that ``conn``'s transaction wrote session ``session_id``'s row (``modified``: its
    new stamp; None: deleted; ``created``: a new row), if this process's writes are being
    recorded."""
    own = getattr(conn, "own_writes", None)
    if own is not None:
        own.wrote(session_id, modified, created)


# Entry positions the full-text index takes in per transaction (see index_pending_text):
# 10 to 40 ms of the write lock each here, measured over 100,000 messages of 40 words.
FTS_BATCH_ROWS = 2000


class _Write:
    """One write waiting for, or done in, a group's transaction."""

    __slots__ = ("derived", "done", "error", "ready", "result", "work")

    def __init__(self, work: Callable[[sqlite3.Connection], Any], derived: bool = False) -> None:
        self.work = work
        self.derived = derived  # writes only what can be made again (see ``write``)
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        # Set once the write is done, or when its thread is to commit the next group. Only
        # a write whose thread waits for another's commit has one (``write``): the thread of a
        # lone write commits it itself, and making an Event cost it about 5 µs.
        self.ready: threading.Event | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error, self.done = result, error, True
        if self.ready is not None:
            self.ready.set()

    def fail(self, error: BaseException) -> None:
        """The group's transaction failed: nothing of this write was committed. (Each waiting
        caller raises an error of its own: one exception raised in several threads at once
        would mix their tracebacks.)"""
        if self.done:
            return
        if isinstance(error, SessionError):
            copy = SessionError(error.code, error.message)
            copy.__cause__ = error.__cause__
            error = copy
        self.settle(None, error)

    def outcome(self) -> Any:
        error, self.error = self.error, None
        if error is None:
            return self.result
        try:
            raise error
        finally:
            # No cycle through this write or this frame (error -> traceback -> frame -> error):
            # the work it holds, and the storage in it, are freed when the caller lets go.
            del error


# How far the full-text index goes, and the newest entry (see index_pending_text).
_FTS_EXISTS = "SELECT 1 FROM sqlite_master WHERE name = 'entries_fts'"
_FTS_MARKS = (
    "SELECT (SELECT value FROM meta WHERE key = 'fts_indexed_upto'), (SELECT max(n) FROM entries)"
)


def _last_pending(marks: tuple[int, int | None], target: int | None) -> int | None:
    """The last entry position to index, up to ``target`` (None: the newest), or None."""
    upto, newest = marks
    last = newest if target is None or newest is None else min(newest, target)
    return None if last is None or last <= upto else last


def _index_batch(conn: sqlite3.Connection, target: int | None, step: int) -> bool:
    """Index the next ``step`` entry positions not yet indexed, up to ``target``, inside the
    caller's transaction (see ``SqliteDatabase.index_text_batch``); whether more remains."""
    marks: tuple[int, int | None] = conn.execute(_FTS_MARKS).fetchone()
    last = _last_pending(marks, target)
    if last is None:
        return False
    upto = marks[0]
    end = min(last, upto + step)
    pending = "FROM entries WHERE n > ? AND n <= ? AND text IS NOT NULL"
    conn.execute(f"INSERT INTO entries_fts (rowid, text) SELECT n, text {pending}", (upto, end))
    conn.execute(
        f"INSERT INTO fts_docs (n, session_id) SELECT n, session_id {pending}", (upto, end)
    )
    conn.execute("UPDATE meta SET value = ? WHERE key = 'fts_indexed_upto'", (end,))
    return end < last


class SqliteDatabase:
    """A session database, shared by the sessions a repo opens.

    Writes go through one connection, used by one thread at a time (a lock). Each read borrows
    a read connection of its own from a small pool: in WAL mode a reader never waits for a
    writer, so a read answers while another thread or process holds the write lock (on
    ``:memory:``, which has a single connection, reads share the writer's). Call it from worker threads, never
    from an event loop: a write may wait up to ``busy_timeout`` for the lock.
    """

    def __init__(
        self,
        path: str | Path,
        busy_timeout: float = BUSY_TIMEOUT_S,
        durability: Durability = "full",
        session_guard: SessionGuard | None = None,
    ) -> None:
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {', '.join(DURABILITY)}")
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout = busy_timeout
        self.lock_wait = busy_timeout  # how long a write waits for a lock another holds
        self.lock = threading.RLock()  # the writer connection's
        self.session_guard = session_guard
        self._shared = str(path) == ":memory:"  # one connection: reads share the writer's
        self._idle_readers: builtins.list[sqlite3.Connection] = []
        self._reader_conns: builtins.list[sqlite3.Connection] = []  # every one open
        self._readers_lock = threading.Lock()
        self._closed = False
        self.stopping = False  # see stop_waiting_for_locks
        # Writes waiting for the next transaction (see ``write``): each waits in a thread of
        # its own, so the threads that write bound it.
        self._writes: builtins.list[_Write] = []
        self._writes_lock = threading.Lock()
        self._leading = False  # a thread commits groups (see ``write``)
        # Why this process cannot write the file (see read_only.py), or None.
        self.read_only = None if self._shared else read_only_reason(self.path)
        # The error that found the file damaged, once one has (see ``_note_damage``).
        self.damaged: SessionError | None = None
        self._target = ":memory:" if self._shared else str(self.path)  # what connections open
        self._copy: PrivateCopy | None = None  # a read-only file's private copy, if read there
        self._generation = 0  # of _target: readers of an older one are closed, not kept
        self._reader_generation: dict[sqlite3.Connection, int] = {}
        self._copy_lock = threading.Lock()  # one thread makes the search's private copy
        if self.read_only is not None:
            self._open_read_only()
        self.conn: WriterConnection = cast(WriterConnection, self._connect(WriterConnection))
        stops_with_the_process(self)
        self._sqlite_wait = busy_timeout  # how long SQLite itself waits for a lock on conn
        # Whether each commit is synced to the disk (durability full), and whether the
        # connection is set not to sync for the derived writes of the last commit (``write``).
        self._syncs = False
        self._relaxed = False
        # The file the connection opened (see _commit); None in memory.
        self._identity: tuple[int, int] | None = None
        try:
            if not self._shared:
                self._retry(lambda: refuse_foreign(self.conn, self.path))
                self._identity = self._file_identity()
            if self.read_only is not None:
                self._check_readable()
                return
            self._retry(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
            self.conn.execute(f"PRAGMA synchronous = {DURABILITY[durability]}")
            self._syncs = durability == "full"
            # Only a new file takes the write lock: opening must not wait for busy writers.
            if self.read("PRAGMA user_version")[0][0] < SCHEMA_VERSION:
                self.write(lambda _conn: self._create_schema())
        except BaseException:
            self.conn.close()  # not a database, or not writable: do not leak the connection
            if self._copy is not None:
                self._copy.close()
            raise

    def _open_read_only(self) -> None:
        """Have connections open the read-only file without writing beside it (see
        read_only.py): in place, or from a private copy when only that reads it whole."""
        uri = read_only_uri(self.path)
        if uri is None:
            try:
                self._copy = PrivateCopy.from_files(self.path)
            except (OSError, sqlite3.Error) as error:
                raise storage_error(self.path, error) from error
            uri = file_uri(self._copy.path, "mode=ro")
        self._target = uri

    def _check_readable(self) -> None:
        """A read-only database must be one of this version's: bringing an older one up to
        date (or making a new one) writes to it."""
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            what = (
                "is not a session database yet"
                if version == 0
                else f"has schema version {version}, older than this version's {SCHEMA_VERSION}"
            )
            raise SessionError(
                "storage",
                f"the session database {self.path} {what}, and is read-only"
                f" ({self.read_only}): it is brought up to date when first opened where it can"
                " be written; open it so once (or a copy of it), then read it here",
            )

    def check_writable(self) -> None:
        """Raise the error every write gets when the file cannot be written: read-only, or
        found damaged (``damaged``)."""
        if self.damaged is not None:
            raise SessionError(self.damaged.code, self.damaged.message)
        if self.read_only is not None:
            raise SessionError(
                "storage",
                f"the session database {self.path} is read-only ({self.read_only});"
                " nothing was written",
            )

    def _note_damage(self, error: sqlite3.Error) -> SessionError:
        """The file said damaged by ``error``, as the error to raise; from now on this
        process writes nothing more to it (``check_writable``): each write to a damaged file
        may spread the damage (a page its broken free list hands out twice), and what still
        reads is read as well without."""
        failure = damage_error(self.path, error)
        if self.damaged is None:
            self.damaged = failure
        return failure

    def check_whole(self) -> bool:
        """Whether the file reads whole (SQLite's ``quick_check``: every page of every table
        and index, in time proportional to the file); found damaged, nothing more is written
        to it (``_note_damage``). For a file about to be written for the first time by a
        server (runtime.leases), not for every open."""
        if self._shared:
            return True
        try:
            found = self.read("PRAGMA quick_check(1)")
        except SessionError:
            return self.damaged is None  # damage said by SQLite itself is noted already
        verdict = " ".join(str(found[0][0]).split()) if found else "no answer"  # one line
        if verdict == "ok":
            return True
        self._note_damage(sqlite3.DatabaseError(f"quick_check: {verdict}"))
        return False

    def _file_identity(self) -> tuple[int, int] | None:
        """The device and inode of the file now at ``path`` (None: no file there)."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return None
        return found.st_dev, found.st_ino

    def _connect(
        self, factory: type[sqlite3.Connection] = sqlite3.Connection
    ) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._target,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            factory=factory,
            uri=self.read_only is not None,  # then a file: URI (read_only.file_uri)
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return conn

    def _borrow_reader(self) -> sqlite3.Connection:
        with self._readers_lock:
            if self._closed:
                raise SessionError("closed", f"the session database {self.path} is closed")
            if self._idle_readers:
                return self._idle_readers.pop()
            try:
                conn = self._connect()
            except sqlite3.Error as error:  # out of file descriptors, the folder gone...
                raise storage_error(self.path, error) from error
            conn.execute("PRAGMA query_only = 1")
            self._reader_conns.append(conn)
            self._reader_generation[conn] = self._generation
            return conn

    def record_own_writes(self) -> OwnWrites:
        """Start remembering the session rows this process writes (see OwnWrites), for a
        watcher of the file; the same record for every watcher."""
        with self.lock:
            if self.conn.own_writes is None:
                self.conn.own_writes = OwnWrites()
            return self.conn.own_writes

    def watch_connection(self) -> sqlite3.Connection:
        """A read connection of the watcher's own, kept apart from the pool: ``PRAGMA
        data_version`` tells a connection of the commits of every other since it last asked."""
        if self._shared:
            raise SessionError("invalid_argument", "an in-memory database has no other writers")
        try:
            conn = self._connect()
            conn.execute("PRAGMA query_only = 1")
        except sqlite3.Error as error:
            raise storage_error(self.path, error) from error
        return conn

    def _return_reader(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            current = self._reader_generation.get(conn) == self._generation
            if current and not self._closed and len(self._idle_readers) < IDLE_READERS:
                self._idle_readers.append(conn)
                return
            if conn in self._reader_conns:
                self._reader_conns.remove(conn)
            self._reader_generation.pop(conn, None)
        conn.close()

    def _retry(self, action: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.002
        while True:
            try:
                return action()
            except sqlite3.OperationalError as error:
                if not is_busy(error):
                    raise storage_error(self.path, error) from error
                if self.stopping:
                    raise SessionError(
                        "busy",
                        f"the session database {self.path} is locked by another writer and"
                        " this process is stopping; nothing was written",
                    ) from error
                if time.monotonic() > deadline:
                    raise SessionError(
                        "busy",
                        f"the session database {self.path} stayed locked by another writer for"
                        f" {self.busy_timeout:g} s; nothing was written, try again",
                    ) from error
            except sqlite3.DatabaseError as error:
                if is_damage(error):
                    raise self._note_damage(error) from error
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def write(self, work: Callable[[sqlite3.Connection], T], derived: bool = False) -> T:
        """Run ``work`` in a write transaction, waiting out other writers, and return once it
        is committed. ``work`` may run more than once, so it must not change Python state it
        does not return.

        ``derived``: ``work`` writes only what is made again from the rest when lost (the text
        index with its mark, in one transaction), so a transaction of such writes alone is
        committed without a sync to the disk, even at durability full: a power cut may take
        it back whole, never a part of it (WAL), and the next search does it again; its sync
        cost the process about half a millisecond of CPU. A group with any other write is
        synced as before, and so is every write before it in the file.

        Group commit: the writes of other threads that wait while one commits go into the
        next transaction together, each in a savepoint of its own (one failing rolls back
        only itself), so a burst of appends costs one commit (one fsync at durability full),
        not one each. Each caller still returns only once its write is committed."""
        self.check_writable()
        job = _Write(work, derived)
        with self._writes_lock:
            lead = not self._leading
            self._leading = True
            ready = None if lead else threading.Event()
            job.ready = ready  # before the job can be taken, or handed the commit
            self._writes.append(job)
        if ready is not None:
            # Another thread commits: it wakes this one once this write is done, or to commit
            # the next group. (Waiting on the writer's lock instead woke each writer of a
            # group in turn, only to find its write done.)
            try:
                ready.wait()
            except BaseException:  # interrupted while waiting: leave no write behind to lead
                self._abandon(job)
                raise
            if job.done:
                return cast(T, job.outcome())
        try:
            with self.lock:
                self._wait_in_sqlite(
                    MAIN_THREAD_WAIT_S
                    if threading.current_thread() is threading.main_thread()
                    else min(WORKER_THREAD_WAIT_S, self.busy_timeout)
                )
                # Until a transaction has taken this write (a group takes the oldest waiting
                # writes first).
                while not job.done:
                    batch: builtins.list[_Write] = []
                    try:
                        self._retry(functools.partial(self._commit, batch))
                    except BaseException as error:
                        # Nothing of the group was written; this write either (a busy
                        # database fails before any is taken), while the others waiting try
                        # again.
                        for each in batch:
                            each.fail(error)
                        raise
        finally:
            with self._writes_lock:
                if job in self._writes:  # never taken (failed, or interrupted before it was)
                    self._writes.remove(job)
            self._hand_over()
        return cast(T, job.outcome())

    def _wait_in_sqlite(self, seconds: float) -> None:
        """Have SQLite wait up to ``seconds`` for the lock before ``_retry`` sleeps and tries
        again. A thread waiting in SQLite sits in C, where no KeyboardInterrupt can be raised:
        the main thread, which alone hears Ctrl-C, waits in short slices, or a command line's
        `sessions rename` behind another process's write went deaf to Ctrl-C for up to
        ``busy_timeout``; worker threads in longer ones, to hear that the process is stopping
        (``stop_waiting_for_locks``). Called holding
        ``lock``; set only when it changes, so a process writing from one kind of thread sends
        no pragma per write."""
        if seconds != self._sqlite_wait and not self._shared:
            self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
            self._sqlite_wait = seconds

    def _abandon(self, job: _Write) -> None:
        """``job``'s thread stopped waiting: out of the queue, and if it was just handed the
        commit, it hands it on."""
        with self._writes_lock:
            if job not in self._writes:
                return  # taken by a group: settled by it
            self._writes.remove(job)
            handed = job.ready is not None and job.ready.is_set() and not job.done
        if handed:
            self._hand_over()

    def _hand_over(self) -> None:
        """The committing thread is done: the oldest write still waiting commits next."""
        with self._writes_lock:
            if self._writes:
                # A write that came while another thread committed: it has ``ready``.
                ready = self._writes[0].ready
                if ready is not None:
                    ready.set()
            else:
                self._leading = False

    def _commit(self, batch: builtins.list[_Write]) -> None:
        """One transaction: the writes in ``batch`` (from an attempt before, if any) and those
        waiting now, up to ``GROUP_WRITES``; unsynced when all are derived (see ``write``).
        SQLite sets a connection's syncing outside a transaction only: a write that comes
        after it began waits for the next, synced, one. (A derived write among others is
        synced with them: a commit of its own would cost more.)"""
        with self._writes_lock:
            group = [*batch, *self._writes[: GROUP_WRITES - len(batch)]]
            unsynced = self._syncs and bool(group) and all(each.derived for each in group)
        if unsynced != self._relaxed:
            self.conn.execute(f"PRAGMA synchronous = {'NORMAL' if unsynced else 'FULL'}")
            self._relaxed = unsynced
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if self._identity is not None and self._file_identity() != self._identity:
                # SQLite goes on writing to the file it opened, deleted or not: each write
                # would be acknowledged and lost with the process. (One stat per commit.)
                raise SessionError(
                    "storage",
                    f"the session database {self.path} was deleted or replaced while this "
                    "process had it open; nothing was written (restart to use the file there "
                    "now)",
                )
            with self._writes_lock:
                taken = self._writes[: GROUP_WRITES - len(batch)]
                if unsynced:  # any other write that came since waits for a synced commit
                    taken = builtins.list(itertools.takewhile(lambda each: each.derived, taken))
                batch.extend(taken)
                del self._writes[: len(taken)]
            if len(batch) == 1:  # no savepoint needed: its failure rolls back all there is
                outcomes: builtins.list[tuple[Any, BaseException | None]] = [
                    (batch[0].work(self.conn), None)
                ]
            else:
                outcomes = [self._in_savepoint(each.work) for each in batch]
            own = self.conn.own_writes
            if own is None:
                self.conn.execute("COMMIT")
            else:
                with own.gate:  # no look reads between the commit and its writes known
                    self.conn.execute("COMMIT")
                    own.publish()
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if self.conn.own_writes is not None:
                self.conn.own_writes.discard()
            raise
        for each, (result, error) in zip(batch, outcomes, strict=True):
            each.settle(result, error)

    def _in_savepoint(
        self, work: Callable[[sqlite3.Connection], Any]
    ) -> tuple[Any, BaseException | None]:
        """Run one write of a group in a savepoint: its failure rolls back only its own
        changes and is its caller's. A busy database fails the whole group (to be retried), and
        so does a failure after which SQLite rolled back the whole transaction (a full disk),
        or anything that is not an ``Exception``."""
        self.conn.execute("SAVEPOINT write")
        own = self.conn.own_writes
        mark = 0 if own is None else own.staged()
        try:
            result = work(self.conn)
        except Exception as error:
            busy = isinstance(error, sqlite3.OperationalError) and is_busy(error)
            if busy or not self.conn.in_transaction:
                raise
            self.conn.execute("ROLLBACK TO write")
            self.conn.execute("RELEASE write")
            if own is not None:
                own.discard(mark)
            if isinstance(error, sqlite3.DatabaseError) and is_damage(error):
                failure = self._note_damage(error)
                failure.__cause__ = error
                return None, failure
            if isinstance(error, sqlite3.OperationalError):
                failure = storage_error(self.path, error)
                failure.__cause__ = error
                return None, failure
            return None, error
        self.conn.execute("RELEASE write")
        return result, None

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> builtins.list[Any]:
        if not self._shared:
            reader = self._borrow_reader()
            try:
                return self._retry(lambda: reader.execute(sql, params).fetchall())
            finally:
                self._return_reader(reader)
        with self.lock:
            return self._retry(lambda: self.conn.execute(sql, params).fetchall())

    def _create_schema(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION:
            return
        if version in (1, 2, 3, 4):
            if version == 1:
                for column, kind in _STATS_COLUMNS:
                    self.conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} {kind}")
            if version <= 2:
                self.conn.execute(TREE_INDEX)
                self.conn.execute("DROP INDEX IF EXISTS idx_entries_session_id_parent_id")
            if version <= 3:
                self.conn.execute("ALTER TABLE sessions ADD COLUMN incarnation TEXT")
            self._remake_search_text()
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return
        for statement in NEW_SCHEMA:
            self.conn.execute(statement)
        if not self.conn.execute(_FTS_EXISTS).fetchone():
            # No triggers: rows are indexed in batches before a search (see the module doc).
            self.conn.execute(FTS_TABLE)
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('fts_indexed_upto', 0)")
        self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _remake_search_text(self) -> None:
        """Version 5's search text (see SCHEMA_VERSION) for the entries whose text it changes
        (CJK, accented Latin letters); if any, the index is emptied, to be built again by the next
        search, in batches (its rows must be deleted with the text they were made of)."""
        self.conn.create_function("search_text", 1, search_text, deterministic=True)
        # Only texts that are not ASCII can change; GLOB finds them without a call into Python.
        changed = self.conn.execute(
            "UPDATE entries SET text = search_text(text)"
            " WHERE text GLOB ? AND search_text(text) != text",
            ("*[^\x01-\x7f]*",),
        ).rowcount
        if changed and self.conn.execute(_FTS_EXISTS).fetchone():
            self.conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')")
            self.conn.execute("DELETE FROM fts_docs")
            self.conn.execute("UPDATE meta SET value = 0 WHERE key = 'fts_indexed_upto'")

    def index_pending_text(self, batch_rows: int | None = None) -> None:
        """Bring the full-text index up to date with every entry appended so far, at most
        ``batch_rows`` (default ``FTS_BATCH_ROWS``) entry positions per transaction: a search
        after a large import would otherwise hold the write lock for seconds (300,000 entries
        of pi sessions: 5 s), and every append of every client would wait that long.

        Invariant: ``entries_fts`` holds exactly the entries with ``n <= fts_indexed_upto``.
        """
        upto, newest = self.read(_FTS_MARKS)[0]
        if newest is None or newest <= upto:
            return  # nothing to index (every search asked this twice, in two statements)
        if self.read_only is not None:
            self._index_private_copy()
            return
        # Up to the newest entry as the search found it: appends that keep coming while it
        # indexes are the next search's to index, not a reason to go on.
        while self.index_text_batch(newest, batch_rows):
            pass

    def index_text_batch(self, target: int | None = None, batch_rows: int | None = None) -> bool:
        """One transaction of indexing (see ``index_pending_text``): the next ``batch_rows``
        (default ``FTS_BATCH_ROWS``) entry positions not yet indexed, none beyond ``target``
        (default: the newest entry). Returns whether more remains up to ``target``."""
        step = max(1, FTS_BATCH_ROWS if batch_rows is None else batch_rows)
        if self.read_only is not None:  # not the file's: a search indexes a private copy
            return False
        if _last_pending(self.read(_FTS_MARKS)[0], target) is None:  # nothing to do: no lock
            return False
        return self.write(lambda conn: _index_batch(conn, target, step), derived=True)

    def _index_private_copy(self) -> None:
        """Have the reads of this read-only database go to a private copy whose full-text index
        takes in the entries the file holds unindexed (see read_only.py): a search must find
        them too, and the file is not this process's to write."""
        with self._copy_lock:
            reader = self._borrow_reader()
            try:
                if _last_pending(reader.execute(_FTS_MARKS).fetchone(), None) is None:
                    return  # another thread made the copy meanwhile
                try:
                    copy = PrivateCopy.from_connection(self.path, reader)
                except (OSError, sqlite3.Error) as error:
                    raise storage_error(self.path, error) from error
            finally:
                self._return_reader(reader)
            try:
                conn = sqlite3.connect(copy.path, isolation_level=None)
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    _index_batch(conn, None, 1 << 62)
                    conn.execute("COMMIT")
                finally:
                    conn.close()
            except sqlite3.Error as error:
                copy.close()
                raise storage_error(self.path, error) from error
            except BaseException:
                copy.close()
                raise
            with self._readers_lock:
                old, self._copy = self._copy, copy
                self._target = file_uri(copy.path, "mode=ro")
                self._generation += 1
                idle, self._idle_readers = self._idle_readers, []
                for each in idle:
                    self._reader_conns.remove(each)
                    self._reader_generation.pop(each, None)
            for each in idle:
                each.close()
            if old is not None:  # unlinked: readers that still have it open read on
                old.close()

    @staticmethod
    def delete_session_rows(conn: sqlite3.Connection, session_id: str) -> None:
        """Remove a session's entries and their index rows (inside a transaction)."""
        upto = conn.execute("SELECT value FROM meta WHERE key = 'fts_indexed_upto'").fetchone()[0]
        conn.execute(
            "INSERT INTO entries_fts (entries_fts, rowid, text) SELECT 'delete', n, text"
            " FROM entries WHERE session_id = ? AND n <= ? AND text IS NOT NULL",
            (session_id, upto),
        )
        conn.execute(
            "DELETE FROM fts_docs WHERE n IN (SELECT n FROM entries WHERE session_id = ? AND n <= ?)",
            (session_id, upto),
        )
        conn.execute("DELETE FROM entries WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM labels WHERE session_id = ?", (session_id,))
        record_write(conn, session_id, None)
        # Rowids above the newest remaining entry may be handed out again; they must count as
        # not yet indexed.
        newest = conn.execute("SELECT max(n) FROM entries").fetchone()[0] or 0
        if newest < upto:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'fts_indexed_upto'", (newest,))

    def close(self) -> None:
        with self._readers_lock:
            self._closed = True
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()
            self._idle_readers.clear()
        with self.lock:
            self.conn.close()
        if self._copy is not None:
            self._copy.close()
