"""The SQLite backend: every session in one database file.

Shape (each everyday query costs what it returns, not the size of the file):
- ``sessions``: one row per session with its header JSON, leaf, name, created/modified and
  running counters (entries, messages, tokens, cost, first user message), all updated in the
  same transaction as each append. Listing walks an index on (modified, id).
- ``entries``: one row per entry, unique on (session_id, id) and indexed on (session_id,
  parent_id), holding the entry's pi JSON. A branch is one recursive query from the leaf up,
  so reading it costs O(depth); building a context parses only the newest compaction, what it
  keeps and what follows (plus the newest model, thinking level and tools settings before).
  A repo keeps the sessions it opened last open, with their parsed entries.
- ``labels``: the current label of each labelled entry.
- ``entries_fts``: FTS5 over the text of messages, summaries and names (``entries.text``).
  An append only stores the text; a search first indexes what was appended since the last
  search (rows with ``n`` above the ``fts_indexed_upto`` mark in ``meta``). Indexing inside
  every append would make each durable append write several more pages.

Durability and concurrency: WAL, ``synchronous=FULL`` (a committed append survives power
loss), one ``BEGIN IMMEDIATE`` transaction per append, retried while another connection holds
the write lock, so two processes appending to one file neither fail nor lose entries. The leaf
is re-read inside each append's transaction: an entry appended after another process moved
the leaf goes onto that leaf instead of forking silently from a stale one.
"""

from __future__ import annotations

import builtins
import functools
import json
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from mcp_agent.messages import UserMessage
from mcp_agent.sessions.context import (
    SessionContextBuildOptions,
    compaction_stop,
    context_path_indices,
)
from mcp_agent.sessions.entries import (
    ENTRY_TYPES,
    CompactionEntry,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    SessionEntry,
    SessionHeader,
    SessionInfoEntry,
    UnknownEntry,
    entry_text,
    entry_to_json,
    iso_now,
    new_entry_id,
    parse_header,
    sortable_time,
    write_time,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.repo import (
    FIRST_MESSAGE_CHARS,
    BaseSessionRepo,
    SessionPage,
    SessionSummary,
    decode_cursor,
    encode_cursor,
    query_words,
)
from mcp_agent.sessions.storage import (
    SessionStats,
    count_entry,
    leaf_after,
    validate_tree,
)
from mcp_agent.wire import describe_validation_error

T = TypeVar("T")

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
# Parsed entries kept per open session; entries never change once stored.
ENTRY_CACHE_SIZE = 20_000
# Sessions a repo keeps open (with their parsed entries) between opens.
OPEN_SESSIONS = 4


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


# "full": a committed append survives a power loss (fsync at every commit). "normal": it
# survives the process being killed, but the newest appends may be lost if the machine stops.
Durability = Literal["full", "normal"]
# Called inside each transaction that appends to or moves a session, before the change, with
# the connection and the session id; raising refuses the change. The runtime checks there that
# no other process runs an agent in the session (runtime.leases).
SessionGuard = Callable[[sqlite3.Connection, str], None]
DURABILITY: dict[str, str] = {"full": "FULL", "normal": "NORMAL"}


class SqliteDatabase:
    """One connection to a session database, shared by the sessions a repo opens.

    The connection is used from one thread at a time (a lock), so the MCP server may call in
    from worker threads.
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
        self.lock = threading.RLock()
        self.session_guard = session_guard
        self.conn = sqlite3.connect(
            str(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            self._retry(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
            self.conn.execute(f"PRAGMA synchronous = {DURABILITY[durability]}")
            # Only a new file takes the write lock: opening must not wait for busy writers.
            if self.read("PRAGMA user_version")[0][0] < SCHEMA_VERSION:
                self.write(lambda _conn: self._create_schema())
        except BaseException:
            self.conn.close()  # not a database, or not writable: do not leak the connection
            raise

    def _retry(self, action: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.002
        while True:
            try:
                return action()
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one write transaction, waiting out other writers. ``work`` may run
        more than once, so it must not change Python state it does not return."""

        def attempt() -> T:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(self.conn)
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            return result

        with self.lock:
            return self._retry(attempt)

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> builtins.list[Any]:
        with self.lock:
            return self._retry(lambda: self.conn.execute(sql, params).fetchall())

    def _create_schema(self) -> None:
        # Only a new database needs sqlite-utils; opening an existing one stays quick.
        import sqlite_utils

        db = sqlite_utils.Database(self.conn)
        if (self.conn.execute("PRAGMA user_version").fetchone()[0]) >= SCHEMA_VERSION:
            return
        db["sessions"].create(
            {
                "id": str,
                "header": str,
                "name": str,
                "cwd": str,
                "leaf": str,
                "created": str,
                "modified": str,
                "parent_session": str,
                "first_user_message": str,
                "next_seq": int,
                "entry_count": int,
                "message_count": int,
                "tool_call_count": int,
                "input_tokens": int,
                "output_tokens": int,
                "cache_read_tokens": int,
                "cache_write_tokens": int,
                "total_tokens": int,
                "cost_total": float,
            },
            pk="id",
            not_null={"header", "created", "modified"},
            defaults={
                "next_seq": 0,
                "entry_count": 0,
                "message_count": 0,
                "tool_call_count": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "total_tokens": 0,
                "cost_total": 0.0,
            },
            if_not_exists=True,
        )
        db["sessions"].create_index(["modified", "id"], if_not_exists=True)
        # ``n`` is the rowid: full-text rows point at it, and an explicit integer key keeps it
        # stable across VACUUM. (session_id, id) is the entry's real key.
        db["entries"].create(
            {
                "n": int,
                "session_id": str,
                "id": str,
                "parent_id": str,
                "type": str,
                "role": str,
                "timestamp": str,
                "seq": int,
                "data": str,
                "text": str,
            },
            pk="n",
            not_null={"session_id", "id", "type", "timestamp", "seq", "data"},
            if_not_exists=True,
        )
        db["entries"].create_index(["session_id", "id"], unique=True, if_not_exists=True)
        db["entries"].create_index(["session_id", "parent_id"], if_not_exists=True)
        # No index on seq or type: every query that orders by seq or filters by type reads the
        # whole session anyway, and each index is one more page to fsync on every append.
        db["labels"].create(
            {"session_id": str, "target_id": str, "label": str},
            pk=("session_id", "target_id"),
            if_not_exists=True,
        )
        db["meta"].create({"key": str, "value": int}, pk="key", if_not_exists=True)
        # Which session each indexed entry belongs to: a search resolves thousands of hits
        # through this narrow table instead of the wide entry rows.
        db["fts_docs"].create(
            {"n": int, "session_id": str}, pk="n", not_null={"session_id"}, if_not_exists=True
        )
        if not db["entries_fts"].exists():
            # No triggers: rows are indexed in batches before a search (see the module doc).
            db["entries"].enable_fts(["text"], fts_version="FTS5", create_triggers=False)
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('fts_indexed_upto', 0)")
        self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def index_pending_text(self) -> None:
        """Bring the full-text index up to date with every entry appended so far.

        Invariant: ``entries_fts`` holds exactly the entries with ``n <= fts_indexed_upto``.
        """
        upto, newest = self.read(
            "SELECT (SELECT value FROM meta WHERE key = 'fts_indexed_upto'),"
            " (SELECT max(n) FROM entries)"
        )[0]
        if newest is None or newest <= upto:
            return

        def work(conn: sqlite3.Connection) -> None:
            upto = conn.execute("SELECT value FROM meta WHERE key = 'fts_indexed_upto'").fetchone()[
                0
            ]
            newest = conn.execute("SELECT max(n) FROM entries").fetchone()[0] or 0
            pending = "FROM entries WHERE n > ? AND n <= ? AND text IS NOT NULL"
            conn.execute(
                f"INSERT INTO entries_fts (rowid, text) SELECT n, text {pending}", (upto, newest)
            )
            conn.execute(
                f"INSERT INTO fts_docs (n, session_id) SELECT n, session_id {pending}",
                (upto, newest),
            )
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'fts_indexed_upto'", (max(upto, newest),)
            )

        self.write(work)

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
        # Rowids above the newest remaining entry may be handed out again; they must count as
        # not yet indexed.
        newest = conn.execute("SELECT max(n) FROM entries").fetchone()[0] or 0
        if newest < upto:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'fts_indexed_upto'", (newest,))

    def close(self) -> None:
        with self.lock:
            self.conn.close()


# --- what each entry adds to its session's row ------------------------------------------------


_MAX_INTEGER = 2**63 - 1


@dataclass
class _Delta:
    """The change entries make to their session's row: the counters, the first user message,
    a new name."""

    counts: SessionStats = field(default_factory=SessionStats)
    first_user_message: str | None = None
    name: tuple[str | None] | None = None  # (new name,) when the entry renames the session

    def add(self, entry: SessionEntry) -> None:
        if not count_entry(self.counts, entry):
            return
        if isinstance(entry, MessageEntry):
            message = entry.message
            if isinstance(message, UserMessage) and self.first_user_message is None:
                self.first_user_message = message.text[:FIRST_MESSAGE_CHARS]
        if isinstance(entry, SessionInfoEntry):
            self.name = ((entry.name or "").strip() or None,)

    def check_fits(self) -> None:
        """SQLite integers have 64 bits; a larger count would fail deep inside the driver."""
        c = self.counts
        counts = (
            c.input_tokens,
            c.output_tokens,
            c.cache_read_tokens,
            c.cache_write_tokens,
            c.total_tokens,
        )
        if any(abs(n) > _MAX_INTEGER for n in counts):
            raise SessionError(
                "invalid_entry", f"a token count is too large to store (over {_MAX_INTEGER})"
            )


@functools.lru_cache(maxsize=1024)
def _stored_header(session_id: str, text: str) -> SessionHeader:
    """A stored header, parsed once: headers never change, and every open reads one."""
    return parse_header(json.loads(text), f"session {session_id} header")


def _entry_row(session_id: str, entry: SessionEntry, seq: int) -> tuple[Any, ...]:
    role = entry.message.role if isinstance(entry, MessageEntry) else None
    return (
        session_id,
        entry.id,
        entry.parent_id,
        entry.type,
        role,
        entry.timestamp,
        seq,
        entry_to_json(entry),
        entry_text(entry) or None,
    )


_INSERT_ENTRY = (
    "INSERT INTO entries (session_id, id, parent_id, type, role, timestamp, seq, data, text)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_APPLY_DELTA = """
UPDATE sessions SET
  leaf = :leaf,
  modified = :modified,
  next_seq = next_seq + :count,
  entry_count = entry_count + :entries,
  message_count = message_count + :messages,
  tool_call_count = tool_call_count + :tool_calls,
  input_tokens = input_tokens + :input,
  output_tokens = output_tokens + :output,
  cache_read_tokens = cache_read_tokens + :cache_read,
  cache_write_tokens = cache_write_tokens + :cache_write,
  total_tokens = total_tokens + :total,
  cost_total = cost_total + :cost,
  first_user_message = coalesce(first_user_message, :first_user_message),
  name = CASE WHEN :renames THEN :name ELSE name END
WHERE id = :id
"""


def _write_entries(
    conn: sqlite3.Connection,
    session_id: str,
    entries: Sequence[SessionEntry],
    first_seq: int,
    leaf_id: str | None,
) -> None:
    """Insert ``entries`` and fold them into the session row (inside a transaction)."""
    delta = _Delta()
    rows = []
    for offset, entry in enumerate(entries):
        rows.append(_entry_row(session_id, entry, first_seq + offset))
        delta.add(entry)
    delta.check_fits()
    if len(rows) == 1:
        conn.execute(_INSERT_ENTRY, rows[0])
    else:
        conn.executemany(_INSERT_ENTRY, rows)
    labels = {}
    for entry in entries:
        if isinstance(entry, LabelEntry):
            labels[entry.target_id] = entry.label or None
    for target_id, label in labels.items():
        if label:
            conn.execute(
                "INSERT OR REPLACE INTO labels (session_id, target_id, label) VALUES (?, ?, ?)",
                (session_id, target_id, label),
            )
        else:
            conn.execute(
                "DELETE FROM labels WHERE session_id = ? AND target_id = ?",
                (session_id, target_id),
            )
    conn.execute(
        _APPLY_DELTA,
        {
            "id": session_id,
            "leaf": leaf_id,
            "modified": write_time(),
            "count": len(entries),
            "entries": delta.counts.entry_count,
            "messages": delta.counts.message_count,
            "tool_calls": delta.counts.tool_call_count,
            "input": delta.counts.input_tokens,
            "output": delta.counts.output_tokens,
            "cache_read": delta.counts.cache_read_tokens,
            "cache_write": delta.counts.cache_write_tokens,
            "total": delta.counts.total_tokens,
            "cost": delta.counts.cost_total,
            "first_user_message": delta.first_user_message,
            "renames": delta.name is not None,
            "name": delta.name[0] if delta.name is not None else None,
        },
    )


def _branch_sql(columns: str) -> str:
    # Walks parent links from the leaf up; each step is one lookup in the (session_id, id)
    # index. The depth bound only guards against a corrupted cycle.
    return f"""
WITH RECURSIVE path(id, parent_id, depth) AS (
  SELECT id, parent_id, 0 FROM entries WHERE session_id = :s AND id = :leaf
  UNION ALL
  SELECT e.id, e.parent_id, p.depth + 1 FROM path p
  JOIN entries e ON e.session_id = :s AND e.id = p.parent_id
  WHERE p.depth < 10000000
)
SELECT {columns} FROM path p JOIN entries e ON e.session_id = :s AND e.id = p.id
ORDER BY p.depth DESC
"""


_BRANCH_SQL = _branch_sql("e.id, e.type, e.data")
_CONTEXT_PATH_SQL = _branch_sql("e.id, e.type, e.role, e.data")


# --- one session ------------------------------------------------------------------------------


class SqliteSessionStorage:
    """One session in a session database (see the module docstring)."""

    def __init__(
        self,
        database: SqliteDatabase | str | Path,
        session_id: str,
        header: SessionHeader | None = None,
    ) -> None:
        self._owns_database = not isinstance(database, SqliteDatabase)
        self.database = (
            database if isinstance(database, SqliteDatabase) else SqliteDatabase(database)
        )
        self.session_id = session_id
        # The leaf as this storage last saw it: the parent for the next append, which re-reads
        # the leaf in its transaction anyway (see append_entry).
        self._seen_leaf: str | None = None
        if header is None:
            rows = self.database.read(
                "SELECT header, leaf FROM sessions WHERE id = ?", (session_id,)
            )
            if not rows:
                raise SessionError("not_found", f"session {session_id} not found")
            header = _stored_header(session_id, rows[0][0])
            self._seen_leaf = rows[0][1]
        self._header = header
        self.lock = self.database.lock
        self._cache: dict[str, SessionEntry] = {}

    @classmethod
    def create(
        cls,
        database: SqliteDatabase,
        header: SessionHeader,
        entries: Sequence[SessionEntry] = (),
    ) -> SqliteSessionStorage:
        """Store a new session with its first entries in one transaction (all or nothing)."""
        entries = list(entries)
        validate_tree(entries)
        leaf_id = leaf_after(entries)

        def work(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO sessions (id, header, cwd, created, modified, parent_session)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        header.id,
                        entry_to_json(header),
                        header.cwd,
                        sortable_time(header.timestamp),
                        write_time(),
                        header.parent_session,
                    ),
                )
            except sqlite3.IntegrityError:
                raise SessionError("conflict", f"session {header.id} already exists") from None
            _write_entries(conn, header.id, entries, 0, leaf_id)

        database.write(work)
        storage = cls(database, header.id, header)
        storage._seen_leaf = leaf_id
        return storage

    # --- helpers ------------------------------------------------------------------------------

    def _parse(self, entry_id: str, entry_type: str, data: str) -> SessionEntry:
        entry = self._cache.get(entry_id)
        if entry is None:
            # The type column picks the class, so pydantic can parse the JSON text itself.
            cls = ENTRY_TYPES.get(entry_type, UnknownEntry)
            try:
                entry = cls.model_validate_json(data)
            except ValidationError as error:
                where = f"session {self.session_id} entry {entry_id}"
                detail = describe_validation_error(error, "", _loads_or_none(data))
                raise SessionError("corrupt", f"{where}: {detail}") from None
            if len(self._cache) >= ENTRY_CACHE_SIZE:
                self._cache.clear()
            self._cache[entry_id] = entry
        return entry

    def _entries(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> list[SessionEntry]:
        rows = self.database.read(sql, params)
        return [self._parse(entry_id, entry_type, data) for entry_id, entry_type, data in rows]

    def _session_row(self, conn: sqlite3.Connection) -> tuple[str | None, int]:
        row = conn.execute(
            "SELECT leaf, next_seq FROM sessions WHERE id = ?", (self.session_id,)
        ).fetchone()
        if row is None:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        return row[0], row[1]

    @staticmethod
    def _exists(conn: sqlite3.Connection, session_id: str, entry_id: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM entries WHERE session_id = ? AND id = ?", (session_id, entry_id)
        ).fetchone()
        return row is not None

    # --- the storage protocol -----------------------------------------------------------------

    def get_metadata(self) -> SessionHeader:
        return self._header

    def get_leaf_id(self) -> str | None:
        rows = self.database.read("SELECT leaf FROM sessions WHERE id = ?", (self.session_id,))
        if not rows:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        self._seen_leaf = rows[0][0]
        return self._seen_leaf

    def leaf_for_append(self) -> str | None:
        return self._seen_leaf

    def set_leaf_id(self, leaf_id: str | None) -> LeafEntry | None:
        def work(conn: sqlite3.Connection) -> LeafEntry | None:
            current, seq = self._session_row(conn)
            if self.database.session_guard is not None:
                self.database.session_guard(conn, self.session_id)
            if current == leaf_id:
                return None
            if leaf_id is not None and not self._exists(conn, self.session_id, leaf_id):
                raise SessionError("not_found", f"entry {leaf_id} not found")
            entry = LeafEntry(
                id=self._fresh_id(conn),
                parent_id=leaf_id,
                timestamp=iso_now(),
                target_id=leaf_id,
            )
            _write_entries(conn, self.session_id, [entry], seq, leaf_id)
            return entry

        moved = self.database.write(work)
        self._seen_leaf = leaf_id
        return moved

    def _fresh_id(self, conn: sqlite3.Connection) -> str:
        return new_entry_id(lambda candidate: self._exists(conn, self.session_id, candidate))

    def create_entry_id(self) -> str:
        # Not checked against the database: that check could be stale by the time of the
        # append anyway. The append checks inside its transaction and raises "conflict", and
        # Session then retries with a fresh id.
        return new_entry_id(self._cache.__contains__)

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        seen = self._seen_leaf

        def work(conn: sqlite3.Connection) -> SessionEntry:
            row = conn.execute(
                "SELECT leaf, next_seq,"
                " (SELECT 1 FROM entries WHERE session_id = :s AND id = :id),"
                " (SELECT 1 FROM entries WHERE session_id = :s AND id = :parent)"
                " FROM sessions WHERE id = :s",
                {"s": self.session_id, "id": entry.id, "parent": entry.parent_id},
            ).fetchone()
            if row is None:
                raise SessionError("not_found", f"session {self.session_id} was deleted")
            if self.database.session_guard is not None:
                self.database.session_guard(conn, self.session_id)
            leaf, seq, id_taken, parent_found = row
            if id_taken:
                raise SessionError("conflict", f"entry id {entry.id} is already taken")
            stored = entry
            if entry.parent_id != leaf and entry.parent_id == seen:
                # Built on the leaf we last saw, but another connection has appended or moved
                # the leaf since: keep the conversation linear on the leaf as it is now.
                stored = entry.model_copy(update={"parent_id": leaf})
            elif entry.parent_id is not None and not parent_found:
                raise SessionError(
                    "invalid_entry", f"entry {entry.id}: parent {entry.parent_id} not found"
                )
            new_leaf = stored.target_id if isinstance(stored, LeafEntry) else stored.id
            _write_entries(conn, self.session_id, [stored], seq, new_leaf)
            return stored

        stored = self.database.write(work)
        self._seen_leaf = stored.target_id if isinstance(stored, LeafEntry) else stored.id
        self._cache[stored.id] = stored
        return stored

    def get_entry(self, entry_id: str) -> SessionEntry | None:
        cached = self._cache.get(entry_id)
        if cached is not None:
            return cached
        found = self._entries(
            "SELECT id, type, data FROM entries WHERE session_id = ? AND id = ?",
            (self.session_id, entry_id),
        )
        return found[0] if found else None

    def find_entries(self, entry_type: str) -> list[SessionEntry]:
        return self._entries(
            "SELECT id, type, data FROM entries WHERE session_id = ? AND type = ? ORDER BY seq",
            (self.session_id, entry_type),
        )

    def get_label(self, entry_id: str) -> str | None:
        rows = self.database.read(
            "SELECT label FROM labels WHERE session_id = ? AND target_id = ?",
            (self.session_id, entry_id),
        )
        return rows[0][0] if rows else None

    def get_session_name(self) -> str | None:
        rows = self.database.read("SELECT name FROM sessions WHERE id = ?", (self.session_id,))
        return rows[0][0] if rows else None

    def get_branch(self, leaf_id: str | None) -> list[SessionEntry]:
        if leaf_id is None:
            return []
        path = self._entries(_BRANCH_SQL, {"s": self.session_id, "leaf": leaf_id})
        if not path:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        return path

    def get_context_path(self, leaf_id: str | None) -> list[SessionEntry]:
        """The part of the branch its context is built from: the newest compaction, the
        entries it keeps and everything after it, and before those only the newest entry that
        sets each of model, thinking level and active tools. The rest is not even parsed."""
        if leaf_id is None:
            return []
        rows = self.database.read(_CONTEXT_PATH_SQL, {"s": self.session_id, "leaf": leaf_id})
        if not rows:
            raise SessionError("not_found", f"entry {leaf_id} not found")

        def compaction_at(i: int) -> CompactionEntry:
            entry = self._parse(rows[i][0], rows[i][1], rows[i][3])
            assert isinstance(entry, CompactionEntry)
            return entry

        ids, types, roles, _ = zip(*rows, strict=True)
        keep = context_path_indices(ids, types, roles, compaction_at)
        return [self._parse(rows[i][0], rows[i][1], rows[i][3]) for i in keep]

    def get_path_to_root_or_compaction(self, leaf_id: str | None) -> list[SessionEntry]:
        path = self.get_branch(leaf_id)
        stop = compaction_stop()
        for index in range(len(path) - 1, -1, -1):
            if stop(path[index]):
                return path[index:]
        return path

    def get_children(self, entry_id: str | None) -> list[SessionEntry]:
        # Children of the entry, and entries that pi appended below a leaf move to it.
        match = "= :x" if entry_id is not None else "IS NULL"
        sql = (
            "SELECT id, type, data FROM entries WHERE session_id = :s AND type != 'leaf'"
            f" AND (parent_id {match} OR parent_id IN (SELECT id FROM entries"
            f" WHERE session_id = :s AND type = 'leaf' AND parent_id {match}))"
            " ORDER BY seq"
        )
        return self._entries(sql, {"s": self.session_id, "x": entry_id})

    def get_entries(self, options: dict[str, Any] | None = None) -> list[SessionEntry]:
        return self._entries(
            "SELECT id, type, data FROM entries WHERE session_id = ? ORDER BY seq",
            (self.session_id,),
        )

    def get_session_stats(self) -> SessionStats:
        s = self.session_id
        row = self.database.read(
            "SELECT entry_count, message_count, tool_call_count, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens, total_tokens, cost_total"
            " FROM sessions WHERE id = ?",
            (s,),
        )
        if not row:
            raise SessionError("not_found", f"session {s} was deleted")
        names = (
            "entry_count message_count tool_call_count input_tokens output_tokens"
            " cache_read_tokens cache_write_tokens total_tokens cost_total"
        ).split()
        stats = SessionStats(**dict(zip(names, row[0], strict=True)))
        stats.messages_by_role = dict(
            self.database.read(
                "SELECT role, count(*) FROM entries WHERE session_id = ? AND role IS NOT NULL"
                " GROUP BY role",
                (s,),
            )
        )
        # Each tree node under its tree parent (through leaf moves pi appended below).
        parents = (
            "SELECT CASE WHEN p.type = 'leaf' THEN p.parent_id ELSE c.parent_id END AS tp"
            " FROM entries c LEFT JOIN entries p ON p.session_id = c.session_id"
            " AND p.id = c.parent_id WHERE c.session_id = :s AND c.type != 'leaf'"
        )
        stats.leaf_count, stats.branch_point_count = self.database.read(
            f"SELECT :nodes - (SELECT count(DISTINCT tp) FROM ({parents}) WHERE tp IS NOT NULL),"
            f" (SELECT count(*) FROM (SELECT tp FROM ({parents}) WHERE tp IS NOT NULL"
            " GROUP BY tp HAVING count(*) > 1))",
            {"s": s, "nodes": stats.entry_count},
        )[0]
        times = self.database.read(
            "SELECT (SELECT timestamp FROM entries WHERE session_id = :s AND type != 'leaf'"
            " ORDER BY seq LIMIT 1), (SELECT timestamp FROM entries WHERE session_id = :s"
            " AND type != 'leaf' ORDER BY seq DESC LIMIT 1)",
            {"s": s},
        )
        stats.first_timestamp, stats.last_timestamp = times[0]
        return stats

    def close(self) -> None:
        if self._owns_database:
            self.database.close()


# --- the repo ---------------------------------------------------------------------------------

_SUMMARY_COLUMNS = (
    "id, name, cwd, created, modified, entry_count, message_count, first_user_message,"
    " parent_session, total_tokens, cost_total"
)


def _fts_query(words: Iterable[str]) -> str:
    # Each word as a quoted prefix term: user text never reaches FTS5 query syntax.
    return " ".join('"' + word.replace('"', '""') + '"*' for word in words)


class SqliteSessionRepo(BaseSessionRepo):
    """Every session in one SQLite file (the default store)."""

    def __init__(
        self,
        path: str | Path,
        context_build_options: SessionContextBuildOptions | None = None,
        busy_timeout: float = BUSY_TIMEOUT_S,
        durability: Durability = "full",
        session_guard: SessionGuard | None = None,
    ) -> None:
        super().__init__(context_build_options)
        self.database = SqliteDatabase(path, busy_timeout, durability, session_guard)
        # The sessions opened last, kept with their parsed entries: a server opens the same
        # few sessions request after request. A session deleted elsewhere meanwhile still says
        # so at its next read or write.
        self._opened: OrderedDict[str, SqliteSessionStorage] = OrderedDict()

    @property
    def path(self) -> Path:
        return self.database.path

    def _create_storage(
        self, header: SessionHeader, entries: builtins.list[SessionEntry]
    ) -> SqliteSessionStorage:
        return self._keep_open(SqliteSessionStorage.create(self.database, header, entries))

    def _open_storage(self, session_id: str) -> SqliteSessionStorage:
        with self.database.lock:
            storage = self._opened.get(session_id)
            if storage is not None:
                self._opened.move_to_end(session_id)
                return storage
        return self._keep_open(SqliteSessionStorage(self.database, session_id))

    def _keep_open(self, storage: SqliteSessionStorage) -> SqliteSessionStorage:
        with self.database.lock:
            self._opened[storage.session_id] = storage
            while len(self._opened) > OPEN_SESSIONS:
                self._opened.popitem(last=False)
        return storage

    def exists(self, session_id: str) -> bool:
        return bool(self.database.read("SELECT 1 FROM sessions WHERE id = ?", (session_id,)))

    def summary(self, session_id: str) -> SessionSummary:
        rows = self.database.read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        )
        if not rows:
            raise SessionError("not_found", f"session {session_id} not found")
        return SessionSummary(*rows[0])

    def list(
        self, query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        if limit < 1:
            raise SessionError("invalid_argument", "limit must be at least 1")
        conditions: builtins.list[str] = []
        params: dict[str, Any] = {"limit": limit + 1}
        if cursor is not None:
            params["modified"], params["after_id"] = decode_cursor(cursor)
            conditions.append("(modified, id) < (:modified, :after_id)")
        words = query_words(query)
        if words:
            self.database.index_pending_text()
            # Every word must occur in the session, not necessarily in one entry.
            for index, word in enumerate(words):
                params[f"w{index}"] = _fts_query([word])
                conditions.append(
                    "id IN (SELECT d.session_id FROM entries_fts f"
                    f" JOIN fts_docs d ON d.n = f.rowid WHERE entries_fts MATCH :w{index})"
                )
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = self.database.read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions {where}"
            " ORDER BY modified DESC, id DESC LIMIT :limit",
            params,
        )
        items = [SessionSummary(*row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            next_cursor = encode_cursor(items[-1].modified, items[-1].id)
        return SessionPage(items, next_cursor)

    def delete(self, session_id: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            gone = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
            if not gone:
                raise SessionError("not_found", f"session {session_id} not found")
            self.database.delete_session_rows(conn, session_id)

        self.database.write(work)
        with self.database.lock:
            self._opened.pop(session_id, None)

    def close(self) -> None:
        self.database.close()
