"""One session in a session database: its entries, its leaf, its row's counters."""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcp_agent.sessions.context import compaction_stop, context_path_indices
from mcp_agent.sessions.entries import (
    ENTRY_TYPES,
    CompactionEntry,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    SessionEntry,
    SessionHeader,
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
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.row_sql import _TREE_CHILDREN, recount_sql, tree_delta
from mcp_agent.sessions.sqlite.database import SqliteDatabase
from mcp_agent.sessions.storage import (
    RowDelta,
    SessionStats,
    leaf_after,
    validate_tree,
)
from mcp_agent.wire import describe_validation_error

# Parsed entries kept per database (entries never change once stored), in bytes: an entry
# counts as the length of its stored JSON plus ENTRY_OVERHEAD_BYTES, about what its Python
# objects cost beyond the text (1.4 to 6.6 KB measured for entries of 150 to 800 bytes), so
# that the bound holds for small entries too. See EntryCache.
ENTRY_CACHE_BYTES = 64 * 2**20
ENTRY_OVERHEAD_BYTES = 2048
# Branches in outline kept per open session (see SqliteSessionStorage._branches), and the
# longest kept: 4 x 100,000 rows of three short strings is about 40 MB at most.
BRANCH_CACHE_BRANCHES = 4
BRANCH_CACHE_ROWS = 100_000
# One entry of a branch in outline: (id, type, message role).
BranchRow = tuple[str, str, str | None]
# Entries an import inserts per statement (its one transaction holds them all).
IMPORT_BATCH_ROWS = 2000


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# --- the parse cache --------------------------------------------------------------------------


class EntryCache:
    """The parsed entries of the sessions open on one database, bounded in bytes.

    One budget per database, shared among the storages open on it by use: each storage keeps
    its entries least recently used first (a :class:`CacheShare`), and when the cache is over
    budget, the storage holding the most gives back its least recently used entries, down to
    an even share of the budget (or to 1/8 under budget). So a session read alone may use the
    whole budget, while a full read of one big session pushes out its own older entries, not
    the few that the other open sessions use at every turn. A storage's entries go when it is
    garbage-collected. Thread-safe: storages are read from worker threads.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.lock = threading.Lock()
        self.shares: set[CacheShare] = set()

    def share(self) -> CacheShare:
        share = CacheShare(self)
        with self.lock:
            self.shares.add(share)
        return share

    def evict(self) -> None:
        """Back under budget (the lock held)."""
        low = self.max_bytes - self.max_bytes // 8
        while self.bytes > self.max_bytes:
            holders = [share for share in self.shares if share.bytes]
            victim = max(holders, key=lambda share: share.bytes)
            # Over budget, the biggest holder has more than an even share: this takes at
            # least one entry.
            even = self.max_bytes // len(holders)
            entries = victim.entries
            while entries and self.bytes > low and victim.bytes > even:
                _, (_, size) = entries.popitem(last=False)
                victim.bytes -= size
                self.bytes -= size


class CacheShare:
    """One storage's entries in its database's :class:`EntryCache`."""

    def __init__(self, cache: EntryCache) -> None:
        self.cache = cache
        self.entries: OrderedDict[str, tuple[SessionEntry, int]] = OrderedDict()
        self.bytes = 0

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, entry_id: str) -> SessionEntry | None:
        with self.cache.lock:
            found = self.entries.get(entry_id)
            if found is None:
                return None
            self.entries.move_to_end(entry_id)
            return found[0]

    def put(self, entry_id: str, entry: SessionEntry, json_chars: int) -> None:
        cache = self.cache
        size = json_chars + ENTRY_OVERHEAD_BYTES
        if size > cache.max_bytes:
            return
        with cache.lock:
            if self not in cache.shares:
                return  # released
            old = self.entries.pop(entry_id, None)
            if old is not None:
                self.bytes -= old[1]
                cache.bytes -= old[1]
            self.entries[entry_id] = (entry, size)
            self.bytes += size
            cache.bytes += size
            if cache.bytes > cache.max_bytes:
                cache.evict()

    def release(self) -> None:
        with self.cache.lock:
            self.cache.shares.discard(self)
            self.cache.bytes -= self.bytes
            self.bytes = 0
            self.entries.clear()


_caches: weakref.WeakKeyDictionary[SqliteDatabase, EntryCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def entry_cache(database: SqliteDatabase) -> EntryCache:
    """The parse cache of ``database`` (made with ENTRY_CACHE_BYTES as its budget)."""
    with _caches_lock:
        cache = _caches.get(database)
        if cache is None:
            cache = _caches[database] = EntryCache(ENTRY_CACHE_BYTES)
        return cache


# --- what each entry adds to its session's row ------------------------------------------------


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

# The opening read of an append: the session's leaf and next position, whether the new id is
# taken, and the planned parent's type (None: no such entry) and its children in the tree
# (for leaves and branch points, see row_sql.tree_delta; not counted below a leaf move).
# One statement instead of four: each costs a round through the driver in the transaction.
_OPEN_APPEND = f"""
SELECT s.leaf, s.next_seq,
  (SELECT 1 FROM entries WHERE session_id = :s AND id = :id),
  p.type,
  CASE WHEN p.type != 'leaf' THEN ({_TREE_CHILDREN}) END
FROM sessions s LEFT JOIN entries p ON p.session_id = :s AND p.id = :p
WHERE s.id = :s
"""


@functools.lru_cache(maxsize=8)
def _apply_delta(roles: int) -> str:
    """The row's update, adding to ``roles`` message roles (their counts by role, a JSON
    object) in the same statement."""
    if not roles:
        return _APPLY_DELTA.format(roles="roles")
    pairs = ", ".join(
        f":role{i}, coalesce(json_extract(roles, :role{i}), 0) + :n{i}" for i in range(roles)
    )
    return _APPLY_DELTA.format(roles=f"json_set(roles, {pairs})")


def _role_params(roles: dict[str, int]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    # Known roles only (message classes), so each makes a plain JSON path.
    for i, (role, count) in enumerate(roles.items()):
        params[f"role{i}"] = f'$."{role}"'
        params[f"n{i}"] = count
    return params


_APPLY_DELTA = """
UPDATE sessions SET
  roles = {roles},
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
  leaf_count = leaf_count + :leaves,
  branch_point_count = branch_point_count + :branch_points,
  first_timestamp = CASE WHEN leaf_count IS NULL THEN NULL
    ELSE coalesce(first_timestamp, :first_timestamp) END,
  last_timestamp = CASE WHEN leaf_count IS NULL THEN NULL
    ELSE coalesce(:last_timestamp, last_timestamp) END,
  first_user_message = coalesce(first_user_message, :first_user_message),
  name = CASE WHEN :renames THEN :name ELSE name END
WHERE id = :id
"""


_RECOUNT = recount_sql("json_group_object(role, n)")


def _recount(conn: sqlite3.Connection, session_id: str) -> None:
    """Count the row's figures that need every entry, after entries were stored in bulk, and
    once for a session of a database made before the row kept them."""
    conn.execute(_RECOUNT, {"s": session_id})


def _tree_delta(
    conn: sqlite3.Connection, session_id: str, entry: SessionEntry, children: int | None
) -> tuple[int, int]:
    def fetch_one(sql: str, params: dict[str, Any]) -> Any:
        return conn.execute(sql, params).fetchone()

    return tree_delta(fetch_one, session_id, entry, children=children)


def _write_entries(
    conn: sqlite3.Connection,
    session_id: str,
    entries: Sequence[SessionEntry],
    first_seq: int,
    leaf_id: str | None,
    totals: SessionStats | None = None,
    bulk: bool = False,
    children: int | None = None,
) -> list[tuple[Any, ...]]:
    """Insert ``entries`` and fold them into the session row (inside a transaction); returns
    the rows inserted. ``totals``, given, adds up what several calls in one transaction add to
    the row, and is checked as a whole. ``bulk`` leaves the figures that need the tree to a
    :func:`_recount` once all are stored; otherwise each entry's are added as it goes in.
    ``children``: see :func:`tree_delta` (one entry only)."""
    delta = RowDelta()
    rows = []
    for offset, entry in enumerate(entries):
        rows.append(_entry_row(session_id, entry, first_seq + offset))
        delta.add(entry)
    delta.check_fits()
    if totals is not None:
        delta.add_into(totals)
    leaves = branch_points = 0
    if bulk:
        conn.executemany(_INSERT_ENTRY, rows)
    else:
        for entry, row in zip(entries, rows, strict=True):
            added_leaves, added_branch_points = _tree_delta(conn, session_id, entry, children)
            leaves += added_leaves
            branch_points += added_branch_points
            conn.execute(_INSERT_ENTRY, row)
    # In bulk the recount counts the roles; otherwise the row's update adds them.
    roles = {} if bulk else delta.counts.messages_by_role
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
        _apply_delta(len(roles)),
        {
            **_role_params(roles),
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
            "leaves": leaves,
            "branch_points": branch_points,
            "first_timestamp": delta.counts.first_timestamp,
            "last_timestamp": delta.counts.last_timestamp,
            "first_user_message": delta.first_user_message,
            "renames": delta.name is not None,
            "name": delta.name[0] if delta.name is not None else None,
        },
    )
    return rows


def _insert_session(conn: sqlite3.Connection, header: SessionHeader) -> None:
    try:
        conn.execute(
            "INSERT INTO sessions (id, header, cwd, created, modified, parent_session, roles,"
            " leaf_count, branch_point_count) VALUES (?, ?, ?, ?, ?, ?, '{}', 0, 0)",
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


class _Refused(Exception):
    """An import the database refused (inside its transaction, which this rolls back)."""

    def __init__(self, error: SessionError) -> None:
        super().__init__(error.message)
        self.error = error


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
# The branch in outline: what the walk reads anyway, with no second lookup per entry.
_BRANCH_OUTLINE_SQL = """
WITH RECURSIVE path(id, parent_id, type, role, depth) AS (
  SELECT id, parent_id, type, role, 0 FROM entries WHERE session_id = :s AND id = :leaf
  UNION ALL
  SELECT e.id, e.parent_id, e.type, e.role, p.depth + 1 FROM path p
  JOIN entries e ON e.session_id = :s AND e.id = p.parent_id
  WHERE p.depth < 10000000
)
SELECT id, type, role FROM path ORDER BY depth DESC
"""
# SQLite's default bound on the parameters of one statement is 32,766; pages are far smaller.
_IDS_PER_QUERY = 1000


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
        # Taken by Session around read-leaf-then-append; the append re-checks the leaf inside
        # its transaction anyway, for writers in other storages and processes.
        self.lock = threading.RLock()
        # This storage's part of the database's parse cache, given back when it is collected.
        self._cache = entry_cache(self.database).share()
        weakref.finalize(self, self._cache.release)
        # Branches in outline by the entry they end at, newest used last. A branch never
        # changes (entries and their parents are immutable), and an append extends its
        # parent's, so reading the current branch again costs no walk.
        self._branches: OrderedDict[str, list[BranchRow]] = OrderedDict()
        self._branches_lock = threading.Lock()

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
            _insert_session(conn, header)
            _write_entries(conn, header.id, entries, 0, leaf_id, bulk=True)
            _recount(conn, header.id)

        database.write(work)
        storage = cls(database, header.id, header)
        storage._seen_leaf = leaf_id
        return storage

    @classmethod
    def import_stream(cls, database: SqliteDatabase, stream: SessionStream) -> SqliteSessionStorage:
        """Store an imported session in one transaction, inserting its entries in batches as
        the stream yields them; a problem anywhere in the file rolls it all back.

        The write lock is held while the file is read: other writers wait for the import (up
        to the busy timeout, in other processes)."""
        header = stream.header
        attempts = 0

        def work(conn: sqlite3.Connection) -> None:
            nonlocal attempts
            attempts += 1
            if attempts > 1:  # a stream cannot be read again
                raise SessionError(
                    "busy",
                    f"the session database {database.path} was locked during the import;"
                    " nothing was written, try again",
                )
            try:
                _insert_session(conn, header)
            except SessionError as error:
                raise _Refused(error) from None
            totals = SessionStats()
            batch: list[SessionEntry] = []
            seq = 0

            def flush(leaf_id: str | None) -> None:
                nonlocal seq
                try:
                    _write_entries(conn, header.id, batch, seq, leaf_id, totals, bulk=True)
                except SessionError as error:
                    raise _Refused(error) from None
                except sqlite3.IntegrityError:
                    # A duplicate id: the stream names it, with both lines, once drained.
                    duplicate = SessionError(stream.code, f"{stream.source}: duplicate entry id")
                    raise _Refused(duplicate) from None
                seq += len(batch)
                batch.clear()

            for entry in stream:
                batch.append(entry)
                if len(batch) >= IMPORT_BATCH_ROWS:
                    flush(leaf_after(batch))
            flush(stream.leaf_id)  # the last batch (maybe empty) sets the leaf
            _recount(conn, header.id)

        try:
            database.write(work)
        except _Refused as refused:
            stream.drain()  # a problem in the rest of the file is reported first
            raise refused.error from None
        storage = cls(database, header.id, header)
        storage._seen_leaf = stream.leaf_id
        return storage

    # --- helpers ------------------------------------------------------------------------------

    def parse_stored(self, entry_id: str, entry_type: str, data: str) -> SessionEntry:
        """An entry from its stored JSON, through the parse cache."""
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
            self._cache.put(entry_id, entry, len(data))
        return entry

    def _entries(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> list[SessionEntry]:
        rows = self.database.read(sql, params)
        return [
            self.parse_stored(entry_id, entry_type, data) for entry_id, entry_type, data in rows
        ]

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

        def work(conn: sqlite3.Connection) -> tuple[SessionEntry, int]:
            row = conn.execute(
                _OPEN_APPEND, {"s": self.session_id, "id": entry.id, "p": entry.parent_id}
            ).fetchone()
            if row is None:
                raise SessionError("not_found", f"session {self.session_id} was deleted")
            if self.database.session_guard is not None:
                self.database.session_guard(conn, self.session_id)
            leaf, seq, id_taken, parent_type, children = row
            if id_taken:
                raise SessionError("conflict", f"entry id {entry.id} is already taken")
            stored = entry
            if entry.parent_id != leaf and entry.parent_id == seen:
                # Built on the leaf we last saw, but another connection has appended or moved
                # the leaf since: keep the conversation linear on the leaf as it is now.
                stored = entry.model_copy(update={"parent_id": leaf})
                children = None  # counted for another parent
            elif entry.parent_id is not None and parent_type is None:
                raise SessionError(
                    "invalid_entry", f"entry {entry.id}: parent {entry.parent_id} not found"
                )
            new_leaf = stored.target_id if isinstance(stored, LeafEntry) else stored.id
            rows = _write_entries(conn, self.session_id, [stored], seq, new_leaf, children=children)
            return stored, len(rows[0][7])

        stored, json_chars = self.database.write(work)
        self._seen_leaf = stored.target_id if isinstance(stored, LeafEntry) else stored.id
        self._cache.put(stored.id, stored, json_chars)
        if not isinstance(stored, LeafEntry) and stored.parent_id is not None:
            role = stored.message.role if isinstance(stored, MessageEntry) else None
            self._extend_branch(stored.parent_id, (stored.id, stored.type, role))
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
        sets each of model, thinking level and active tools. The rest is not even read."""
        rows = self.context_rows(leaf_id)
        found = self.stored_json([row[0] for row in rows])
        return [self.parse_stored(row[0], row[1], found[row[0]]) for row in rows]

    def context_rows(self, leaf_id: str | None) -> list[BranchRow]:
        """The entries ``get_context_path`` returns, as (id, type, message role): only the
        newest compaction on the branch is read (to find what it keeps)."""
        rows = self._branch_outline(leaf_id)

        def compaction_at(i: int) -> CompactionEntry:
            entry = self.get_entry(rows[i][0])
            assert isinstance(entry, CompactionEntry)
            return entry

        if not rows:
            return []
        ids, types, roles = zip(*rows, strict=True)
        return [rows[i] for i in context_path_indices(ids, types, roles, compaction_at)]

    def _branch_outline(self, leaf_id: str | None) -> list[BranchRow]:
        """The branch ending at ``leaf_id``, root first, as (id, type, message role); the
        caller must not change the list."""
        if leaf_id is None:
            return []
        with self._branches_lock:
            rows = self._branches.get(leaf_id)
            if rows is not None:
                self._branches.move_to_end(leaf_id)
                return rows
        rows = self.database.read(_BRANCH_OUTLINE_SQL, {"s": self.session_id, "leaf": leaf_id})
        if not rows:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        self._keep_branch(leaf_id, rows)
        return rows

    def _keep_branch(self, leaf_id: str, rows: list[BranchRow]) -> None:
        if len(rows) > BRANCH_CACHE_ROWS:
            return
        with self._branches_lock:
            self._branches[leaf_id] = rows
            self._branches.move_to_end(leaf_id)
            while len(self._branches) > BRANCH_CACHE_BRANCHES:
                self._branches.popitem(last=False)

    def _extend_branch(self, parent_id: str, row: BranchRow) -> None:
        with self._branches_lock:
            parent = self._branches.get(parent_id)
        if parent is not None:
            self._keep_branch(row[0], [*parent, row])

    # --- stored JSON, unparsed (StoredPages) ----------------------------------------------------

    def branch_ids(self, leaf_id: str | None) -> list[str]:
        return [row[0] for row in self._branch_outline(leaf_id)]

    def stored_json(self, ids: Sequence[str]) -> dict[str, str]:
        return self._by_ids("data", ids)

    def stored_messages(self, ids: Sequence[str]) -> dict[str, str]:
        # SQLite cuts the message out of the stored text: compact already, nothing parsed here.
        return self._by_ids("json_extract(data, '$.message')", ids)

    def _by_ids(self, column: str, ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            marks = ",".join("?" * len(chunk))
            found.update(
                self.database.read(
                    f"SELECT id, {column} FROM entries WHERE session_id = ? AND id IN ({marks})",
                    (self.session_id, *chunk),
                )
            )
        return found

    def entry_total(self) -> int:
        # Every entry takes the next sequence number: positions are 0 .. next_seq - 1.
        rows = self.database.read("SELECT next_seq FROM sessions WHERE id = ?", (self.session_id,))
        if not rows:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        return int(rows[0][0])

    def stored_range(self, start: int, end: int) -> list[str]:
        if end <= start:
            return []
        # The rowid grows with every insert and a session's entries are inserted in sequence
        # order, so the rowid orders them as seq does, and the (session_id, parent_id) index
        # holds it: the positions are found in the index, and only their rows are read.
        rows = self.database.read(
            "SELECT data FROM entries WHERE n IN (SELECT n FROM entries WHERE session_id = ?"
            " ORDER BY n LIMIT ? OFFSET ?) ORDER BY n",
            (self.session_id, end - start, start),
        )
        if len(rows) != end - start:  # next_seq counts every row: this is damage
            raise SessionError(
                "corrupt",
                f"session {self.session_id} has fewer entries than its row counts ({start + len(rows)}"
                f" of {end} read)",
            )
        return [row[0] for row in rows]

    def outline(self) -> list[tuple[str, str | None, str, str]]:
        return self.database.read(
            "SELECT id, parent_id, type, timestamp FROM entries WHERE session_id = ? ORDER BY n",
            (self.session_id,),
        )

    def labels(self) -> dict[str, str]:
        return dict(
            self.database.read(
                "SELECT target_id, label FROM labels WHERE session_id = ?", (self.session_id,)
            )
        )

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
        # Two index searches on (session_id, parent_id): with an OR between them SQLite scans
        # the whole session instead (tens of ms per call at 100,000 entries).
        sql = (
            "SELECT id, type, data FROM (SELECT id, type, data, seq FROM entries"
            f" WHERE session_id = :s AND parent_id {match} AND type != 'leaf'"
            " UNION ALL SELECT id, type, data, seq FROM entries WHERE session_id = :s"
            " AND type != 'leaf' AND parent_id IN (SELECT id FROM entries"
            f" WHERE session_id = :s AND parent_id {match} AND type = 'leaf'))"
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
        names = (
            "entry_count message_count tool_call_count input_tokens output_tokens"
            " cache_read_tokens cache_write_tokens total_tokens cost_total leaf_count"
            " branch_point_count first_timestamp last_timestamp"
        ).split()
        sql = f"SELECT roles, {', '.join(names)} FROM sessions WHERE id = ?"
        rows = self.database.read(sql, (s,))
        if rows and rows[0][0] is None:  # a session stored before the row kept these figures
            self.database.write(lambda conn: _recount(conn, s))
            rows = self.database.read(sql, (s,))
        if not rows:
            raise SessionError("not_found", f"session {s} was deleted")
        roles, *figures = rows[0]
        stats = SessionStats(**dict(zip(names, figures, strict=True)))
        stats.messages_by_role = json.loads(roles)
        return stats

    def close(self) -> None:
        if self._owns_database:
            self.database.close()
