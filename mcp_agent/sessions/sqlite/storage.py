"""One session in a session database: its entries, its leaf, its row's counters."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mcp_agent.sessions.entries import (
    LeafEntry,
    MessageEntry,
    SessionEntry,
    SessionHeader,
    entry_to_json,
    iso_now,
    new_entry_id,
    sortable_time,
    write_time,
)
from mcp_agent.sessions.errors import Reincarnated, SessionError
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.row_sql import (
    _TREE_CHILDREN,
    label_changes,
    recount_sql,
    row_update,
    tree_delta,
)
from mcp_agent.sessions.sql.storage import (
    SqlSessionStorage,
    branch_messages_sql,
    entry_row,
    new_incarnation,
)
from mcp_agent.sessions.sqlite.database import SqliteDatabase, record_write
from mcp_agent.sessions.storage import (
    RowDelta,
    SessionStats,
    TreeRow,
    compute_stats,
    leaf_after,
)

# Entries an import inserts per statement (its one transaction holds them all).
IMPORT_BATCH_ROWS = 2000


# --- what each entry adds to its session's row ------------------------------------------------


_INSERT_ENTRY = (
    "INSERT INTO entries (session_id, id, parent_id, type, role, timestamp, seq, data, text)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# The opening read of an append: the session's leaf and next position, whether the new id is
# taken, and the planned parent's type (None: no such entry) and its children in the tree
# (for leaves and branch points, see row_sql.tree_delta; not counted below a leaf move).
# One statement instead of four: each costs a round through the driver in the transaction.
_OPEN_APPEND = f"""
SELECT s.leaf, s.next_seq, s.incarnation,
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
    tree: tuple[int, int] | None = None,
) -> list[tuple[Any, ...]]:
    """Insert ``entries`` and fold them into the session row (inside a transaction); returns
    the rows inserted. ``totals``, given, adds up what several calls in one transaction add to
    the row, and is checked as a whole. ``bulk`` leaves the figures that need the tree to a
    :func:`_recount` once all are stored; otherwise each entry's are added as it goes in.
    ``children``: see :func:`tree_delta` (one entry only). ``tree``, in bulk: the leaves and
    branch points of the whole session, when ``entries`` are all of it (no recount needed)."""
    delta = RowDelta()
    rows = []
    for offset, entry in enumerate(entries):
        rows.append(entry_row(session_id, entry, first_seq + offset))
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
    if tree is not None:
        leaves, branch_points = tree
    # In bulk the recount counts the roles; otherwise the row's update adds them.
    roles = {} if bulk and tree is None else delta.counts.messages_by_role
    for target_id, label in label_changes(entries).items():
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
    params = row_update(delta, session_id, leaf_id, len(entries), leaves, branch_points)
    conn.execute(_apply_delta(len(roles)), {**_role_params(roles), **params})
    record_write(conn, session_id, params["modified"])
    return rows


def _insert_session(conn: sqlite3.Connection, header: SessionHeader, incarnation: str) -> None:
    modified = write_time()
    try:
        conn.execute(
            "INSERT INTO sessions (id, header, cwd, created, modified, parent_session, roles,"
            " leaf_count, branch_point_count, incarnation)"
            " VALUES (?, ?, ?, ?, ?, ?, '{}', 0, 0, ?)",
            (
                header.id,
                entry_to_json(header),
                header.cwd,
                sortable_time(header.timestamp),
                modified,
                header.parent_session,
                incarnation,
            ),
        )
    except sqlite3.IntegrityError:
        raise SessionError("conflict", f"session {header.id} already exists") from None
    record_write(conn, header.id, modified, created=True)


class _Refused(Exception):
    """An import the database refused (inside its transaction, which this rolls back)."""

    def __init__(self, error: SessionError) -> None:
        super().__init__(error.message)
        self.error = error


# --- one session ------------------------------------------------------------------------------


def _message(data: str) -> str:
    """SQL for the message in the stored entry ``data``: SQLite cuts it out of the stored
    text, compact already, nothing parsed here."""
    return f"json_extract({data}, '$.message')"


# The file's last rows a session's newest entries are looked for in first (``_newest_rows``).
NEWEST_SPAN = 4096


class SqliteSessionStorage(SqlSessionStorage):
    """One session in a session database (see the module docstring): the reads are
    SqlSessionStorage's, the writes this class's."""

    # The rowid n grows with every insert and a session's entries are inserted in sequence
    # order, so n orders them as seq does, and the tree index (led by session_id) holds it: the
    # positions are found in the index, and only their rows are read.
    RANGE_SQL = (
        "SELECT data FROM entries WHERE n IN (SELECT n FROM entries WHERE session_id = :s"
        " ORDER BY n LIMIT :count OFFSET :start) ORDER BY n"
    )
    BRANCH_MESSAGES_SQL = branch_messages_sql(_message("e.data"))
    LOG_ORDER = "n"
    APPEND_CHECKS_INCARNATION = True

    def _newest_rows(self, count: int) -> list[TreeRow]:
        # The session's newest rows are most often the newest of the file: its last rows are
        # read back first (by rowid, ``NEWEST_SPAN`` of them), and the session's last
        # ``count`` are those when enough of them are. Else its places are sorted from the
        # tree index (a 100,000-entry session's: a third of the time of reading them all).
        params = {"s": self.session_id, "count": count, "span": NEWEST_SPAN}
        rows = self._read(
            f"SELECT {self.NEWEST_COLUMNS} FROM entries e WHERE e.n > (SELECT max(n)"
            " FROM entries) - :span AND +e.session_id = :s ORDER BY e.n DESC LIMIT :count",
            params,
        )
        if len(rows) == count:
            return rows
        return super()._newest_rows(count)

    def stored_log(self, end: int, batch: int) -> Iterator[list[str]]:
        # Each RANGE_SQL sorts the session's positions to skip to its offset: read in turn,
        # a 100,000-entry log took 3 s. Here the positions are sorted once, then each batch
        # is read by rowid.
        found = self._read("SELECT n FROM entries WHERE session_id = :s", {"s": self.session_id})
        places = sorted(row[0] for row in found)[:end]
        self._check_count(len(places), end)
        for start in range(0, end, batch):
            part = places[start : start + batch]
            rows: list[str] = []
            for marks, params in self._id_chunks(part):
                # The session too: once it is deleted, its rowids may be another's.
                sql = (
                    f"SELECT data FROM entries WHERE session_id = :s AND n IN ({marks}) ORDER BY n"
                )
                rows += (row[0] for row in self._read(sql, params))
            self._check_count(start + len(rows), start + len(part))
            yield rows

    def __init__(
        self,
        database: SqliteDatabase | str | Path,
        session_id: str,
        header: SessionHeader | None = None,
    ) -> None:
        self._owns_database = not isinstance(database, SqliteDatabase)
        self.database: SqliteDatabase = (
            database if isinstance(database, SqliteDatabase) else SqliteDatabase(database)
        )
        super().__init__(self.database, session_id, header)

    @staticmethod
    def store_new(
        conn: sqlite3.Connection,
        header: SessionHeader,
        entries: list[SessionEntry],
        leaf_id: str | None,
        incarnation: str,
    ) -> None:
        _insert_session(conn, header, incarnation)
        if not entries:
            # The row as inserted is the empty session's (no entries, leaf or counts to add):
            # an update adding nothing would cost a statement in every session_create.
            return
        ids = {entry.id for entry in entries}
        if all(entry.parent_id is None or entry.parent_id in ids for entry in entries):
            # The whole tree is in hand: its figures cost no second pass over the rows.
            stats = compute_stats(entries)
            tree = (stats.leaf_count, stats.branch_point_count)
            _write_entries(conn, header.id, entries, 0, leaf_id, bulk=True, tree=tree)
            return
        _write_entries(conn, header.id, entries, 0, leaf_id, bulk=True)
        _recount(conn, header.id)

    @classmethod
    def import_stream(cls, database: SqliteDatabase, stream: SessionStream) -> SqliteSessionStorage:
        """Store an imported session in one transaction, inserting its entries in batches as
        the stream yields them; a problem anywhere in the file rolls it all back.

        The write lock is held while the file is read: other writers wait for the import (up
        to the busy timeout, in other processes)."""
        header = stream.header
        incarnation = new_incarnation()
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
            nonlocal header
            try:
                try:
                    _insert_session(conn, header, incarnation)
                except SessionError as taken:  # the statement alone was undone
                    header = stream.retake_id(taken)
                    _insert_session(conn, header, incarnation)
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
        return cls.stored(database, header, stream.leaf_id, incarnation)

    # --- helpers ------------------------------------------------------------------------------

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

    def _recount_row(self) -> None:
        self.database.write(lambda conn: _recount(conn, self.session_id))

    # --- the storage protocol: writes (reads: SqlSessionStorage) --------------------------------

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
            leaf, seq, incarnation, id_taken, parent_type, children = row
            if incarnation != self.incarnation and self.incarnation is not None:
                raise Reincarnated(self.session_id)
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

    def stored_messages(self, ids: Sequence[str]) -> dict[str, str]:
        return self._by_ids(_message("data"), ids)

    def close(self) -> None:
        if self._owns_database:
            self.database.close()
