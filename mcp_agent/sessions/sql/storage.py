"""What the SQL backends' session storages share: every read of one session (entries through the
parse cache, branches in outline, pages as stored JSON for ``StoredPages``, the row's
figures) and the making of a new one. A backend keeps its writes and ``stored_messages``, and
says its dialect in a few hooks: ``sql`` (how ``:name`` parameters are spelled), ``RANGE_SQL``
and ``LOG_ORDER``."""

from __future__ import annotations

import functools
import json
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, ClassVar, Protocol, Self, TypeVar

from pydantic import ValidationError

from mcp_agent.sessions.context import compaction_stop, context_path_indices
from mcp_agent.sessions.entries import (
    ENTRY_TYPES,
    CompactionEntry,
    LeafEntry,
    MessageEntry,
    SessionEntry,
    SessionHeader,
    UnknownEntry,
    entry_text,
    entry_to_json,
    new_entry_id,
    parse_header,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.kept import Kept
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.sql.cache import entry_cache
from mcp_agent.sessions.storage import (
    OutlineRow,
    SessionStats,
    TreeRow,
    leaf_after,
    validate_tree,
)
from mcp_agent.sessions.words import search_text
from mcp_agent.wire import FROM_FILE, describe_validation_error

T = TypeVar("T")
Params = Sequence[Any] | dict[str, Any]

# Branches in outline kept for the sessions open (see kept_branches): the most rows kept for all
# of them (about 100 bytes a row: 40 MB), the longest branch kept and the branches per session.
BRANCH_ROWS_KEPT = 400_000
BRANCH_CACHE_ROWS = 100_000
BRANCH_CACHE_BRANCHES = 4
# One entry of a branch in outline: (id, type, message role).
BranchRow = tuple[str, str, str | None]
# By storage and the entry they end at. A branch never changes (entries and their parents are
# immutable), and an append may extend its parent's, so reading the current branch again
# costs no walk.
kept_branches: Kept[str, list[BranchRow]] = Kept(
    BRANCH_ROWS_KEPT, BRANCH_CACHE_ROWS, BRANCH_CACHE_BRANCHES, len
)
# Ids per query when reading entries by id (SQLite's bound on the parameters of one statement
# is 32,766); pages are far smaller.
IDS_PER_QUERY = 1000
# The row's figures that get_session_stats reads besides the roles.
_STATS_NAMES = (
    "entry_count message_count tool_call_count input_tokens output_tokens"
    " cache_read_tokens cache_write_tokens total_tokens cost_total leaf_count"
    " branch_point_count first_timestamp last_timestamp"
).split()
_STATS_SQL = f"SELECT roles, {', '.join(_STATS_NAMES)} FROM sessions WHERE id = :s"


class SqlDatabase(Protocol):
    """What the shared code asks of a backend's database (SqliteDatabase, PostgresDatabase)."""

    def read(self, sql: str, params: Params = ...) -> list[Any]: ...
    def write(self, work: Callable[[Any], T]) -> T: ...
    def close(self) -> None: ...
    # How long a write waits for a lock another transaction holds (seconds).
    @property
    def lock_wait(self) -> float: ...
    # Checked inside each transaction that changes or deletes a session (see SessionGuard).
    @property
    def session_guard(self) -> Callable[[Any, str], None] | None: ...


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def new_incarnation() -> str:
    """A session row's incarnation, made when the row is inserted: a session deleted and made
    again under the same id (an import, perhaps by another process or replica) is then told
    apart from the one a repo keeps open, with its parsed header and entries."""
    return uuid.uuid4().hex[:16]


def entry_row(session_id: str, entry: SessionEntry, seq: int) -> tuple[Any, ...]:
    """An entry's row of ``entries``, in its columns' order: session_id, id, parent_id, type,
    role, timestamp, seq, data (its stored JSON), text (what a search matches, ``search_text``; None if none)."""
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
        search_text(entry_text(entry)) or None,
    )


@functools.lru_cache(maxsize=1024)
def parse_entry(session_id: str, entry_id: str, entry_type: str, data: str) -> SessionEntry:
    """An entry from its stored JSON (its row's ``type`` and ``data``)."""
    # The type column picks the class, so pydantic can parse the JSON text itself.
    cls = ENTRY_TYPES.get(entry_type, UnknownEntry)
    try:
        return cls.model_validate_json(data, context=FROM_FILE)
    except ValidationError as error:
        where = f"session {session_id} entry {entry_id}"
        detail = describe_validation_error(error, "", _loads_or_none(data))
        raise SessionError("corrupt", f"{where}: {detail}") from None


def stored_header(session_id: str, text: str) -> SessionHeader:
    """A stored header, parsed (a new model each time: a caller may change its own)."""
    return parse_header(json.loads(text), f"session {session_id} header")


_WALK_GUARD = "p.id != p.parent_id AND p.depth < (SELECT next_seq FROM sessions WHERE id = :s)"


def branch_sql(columns: str) -> str:
    """The branch ending at ``:leaf``, root first, as ``columns`` of ``e`` (the entry)."""
    # Walks parent links from the leaf up; each step is one lookup in the (session_id, id)
    # index. The stops (``_WALK_GUARD``) only matter for a corrupted tree: an entry that is its own
    # parent (stored by an import before the check refused it) ends the walk as a root does,
    # as pi's tree shows it, and no walk is longer than the session's entries.
    return f"""
WITH RECURSIVE path(id, parent_id, depth) AS (
  SELECT id, parent_id, 0 FROM entries WHERE session_id = :s AND id = :leaf
  UNION ALL
  SELECT e.id, e.parent_id, p.depth + 1 FROM path p
  JOIN entries e ON e.session_id = :s AND e.id = p.parent_id
  WHERE {_WALK_GUARD}
)
SELECT {columns} FROM path p JOIN entries e ON e.session_id = :s AND e.id = p.id
ORDER BY p.depth DESC
"""


BRANCH_SQL = branch_sql("e.id, e.type, e.data")
_BRANCH_PLACES_SQL = branch_sql("e.id, e.parent_id, e.type, e.timestamp")
# The branch in outline: what the walk reads anyway, with no second lookup per entry.
_BRANCH_OUTLINE_SQL = f"""
WITH RECURSIVE path(id, parent_id, type, role, depth) AS (
  SELECT id, parent_id, type, role, 0 FROM entries WHERE session_id = :s AND id = :leaf
  UNION ALL
  SELECT e.id, e.parent_id, e.type, e.role, p.depth + 1 FROM path p
  JOIN entries e ON e.session_id = :s AND e.id = p.parent_id
  WHERE {_WALK_GUARD}
)
SELECT id, type, role FROM path ORDER BY depth DESC
"""

# The branch in outline with the stored JSON of its ``:newest`` last entries (all when
# negative): a lookup for each of those, as reading them by id would be, in the same statement.
_BRANCH_STORED_SQL = _BRANCH_OUTLINE_SQL.replace(
    "SELECT id, type, role FROM path",
    "SELECT id, type, role, CASE WHEN :newest < 0 OR depth < :newest THEN (SELECT e.data"
    " FROM entries e WHERE e.session_id = :s AND e.id = path.id) END FROM path",
)
assert _BRANCH_STORED_SQL != _BRANCH_OUTLINE_SQL


def branch_messages_sql(message: str) -> str:
    """The branch in outline with the message (``message``, of ``e``) of each message entry
    among its ``:newest`` last entries and after its newest compaction, cut out as the walk
    reads the row anyway (reading them by id afterwards would look each one up again). The
    messages before it that a compaction keeps are left to be read by id. The rows come with
    their depth (0 at the leaf) and in no set order: the caller puts them root first. Sorted
    in SQL (ORDER BY depth), every message went through a temporary B-tree, a megabyte for a
    1,000-message branch, copied into memory a fresh server faults in; Python sorts the rows
    in one pass, as the walk gives them leaf first."""
    past = "p.compacted OR p.type = 'compaction'"
    return f"""
WITH RECURSIVE path(id, parent_id, type, role, depth, compacted, message) AS (
  SELECT id, parent_id, type, role, 0, 0,
    CASE WHEN type = 'message' AND 0 < :newest THEN {message} END
  FROM entries e WHERE session_id = :s AND id = :leaf
  UNION ALL
  SELECT e.id, e.parent_id, e.type, e.role, p.depth + 1, {past},
    CASE WHEN e.type = 'message' AND p.depth + 1 < :newest AND NOT ({past}) THEN {message} END
  FROM path p JOIN entries e ON e.session_id = :s AND e.id = p.parent_id
  WHERE {_WALK_GUARD}
)
SELECT id, type, role, message, depth FROM path
"""


def _children_sql(entry_id: str | None) -> str:
    # Children of the entry, and entries that pi appended below a leaf move to it. Two index
    # searches on (session_id, parent_id): with an OR between them SQLite scans the whole
    # session instead (tens of ms per call at 100,000 entries).
    match = "= :x" if entry_id is not None else "IS NULL"
    return (
        "SELECT id, type, data FROM (SELECT id, type, data, seq FROM entries"
        f" WHERE session_id = :s AND parent_id {match} AND type != 'leaf'"
        " UNION ALL SELECT id, type, data, seq FROM entries WHERE session_id = :s"
        " AND type != 'leaf' AND parent_id IN (SELECT id FROM entries"
        f" WHERE session_id = :s AND parent_id {match} AND type = 'leaf')) children"
        " ORDER BY seq"
    )


class SqlSessionStorage:
    """One session in a SQL session database: the reads every SQL backend shares.

    A subclass adds the writes (append, leaf moves, import, a new session's rows:
    ``store_new``), ``stored_messages`` and its dialect: ``sql`` spells a query written with
    ``:name`` parameters for its driver; ``RANGE_SQL`` reads the ``data`` of the entries in
    positions ``:start`` .. ``:end`` - 1 (``:count`` of them) in the order appended;
    ``LOG_ORDER`` is the cheapest column to read the whole log in that order.
    """

    RANGE_SQL: str
    LOG_ORDER = "seq"
    # The walk that also reads messages (``branch_messages_sql``); None: the backend's
    # ``stored_messages`` reads them by id.
    BRANCH_MESSAGES_SQL: str | None = None

    @staticmethod
    def sql(text: str) -> str:
        return text

    def __init__(
        self, database: SqlDatabase, session_id: str, header: SessionHeader | None = None
    ) -> None:
        self.database = database
        self.session_id = session_id
        # The leaf as this storage last saw it: the parent for the next append, which re-reads
        # the leaf in its transaction anyway (see append_entry).
        self._seen_leaf: str | None = None
        # The row's incarnation (see new_incarnation; None for a row of an older schema).
        self.incarnation: str | None = None
        if header is None:
            rows = self._read(
                "SELECT header, leaf, incarnation FROM sessions WHERE id = :s", {"s": session_id}
            )
            if not rows:
                raise SessionError("not_found", f"session {session_id} not found")
            header = stored_header(session_id, rows[0][0])
            self._seen_leaf, self.incarnation = rows[0][1], rows[0][2]
        self._header = header
        # Taken by Session around read-leaf-then-append; the append re-checks the leaf inside
        # its transaction anyway, for writers in other storages, processes and replicas.
        self.lock = threading.RLock()
        # How long a write waits for ``lock``, held by another write of this process to the
        # session that waits for the database in turn (see Session._append).
        self.lock_wait: float = database.lock_wait
        # This storage's part of the database's parse cache, given back when it is collected.
        self._cache = entry_cache(database).share()
        weakref.finalize(self, self._cache.release)

    @classmethod
    def create(
        cls, database: Any, header: SessionHeader, entries: Sequence[SessionEntry] = ()
    ) -> Self:
        """Store a new session with its first entries in one transaction (all or nothing)."""
        return cls.create_reading(database, header, entries, None)[0]

    @classmethod
    def create_reading(
        cls,
        database: Any,
        header: SessionHeader,
        entries: Sequence[SessionEntry],
        read_back: str | None,
    ) -> tuple[Self, Any]:
        """``create``, and the row ``read_back`` (a statement of the backend, parameter
        ``:id``) reads in the same transaction once the session is stored (None: none read):
        on the writer's connection, which has just written its pages, where a read after the
        commit took a reader that the commit left cold."""
        entries = list(entries)
        validate_tree(entries)
        leaf_id = leaf_after(entries)
        incarnation = new_incarnation()

        def work(conn: Any) -> Any:
            cls.store_new(conn, header, entries, leaf_id, incarnation)
            if read_back is None:
                return None
            return conn.execute(read_back, {"id": header.id}).fetchone()

        row = database.write(work)
        return cls.stored(database, header, leaf_id, incarnation), row

    @staticmethod
    def store_new(
        conn: Any,
        header: SessionHeader,
        entries: list[SessionEntry],
        leaf_id: str | None,
        incarnation: str,
    ) -> None:
        """Insert a session's row and its first entries (inside the transaction of create)."""
        raise NotImplementedError

    @classmethod
    def stored(
        cls, database: Any, header: SessionHeader, leaf_id: str | None, incarnation: str | None
    ) -> Self:
        """The storage of a session just stored (or read), whose leaf is ``leaf_id``."""
        storage = cls(database, header.id, header)
        storage._seen_leaf = leaf_id
        storage.incarnation = incarnation
        return storage

    @classmethod
    def import_stream(cls, database: Any, stream: SessionStream) -> Self:
        """Store an imported session in one transaction (a problem anywhere rolls it back)."""
        raise NotImplementedError

    @classmethod
    def lock_for_delete(cls, database: Any, conn: Any, session_id: str) -> None:
        """Anything to take before the session's row is deleted (in the delete's transaction):
        nothing, unless the backend says otherwise."""

    def set_leaf_id(self, leaf_id: str | None) -> LeafEntry | None:
        raise NotImplementedError

    # Whether append_entry refuses, with Reincarnated and before it writes, a row of another
    # incarnation than this storage's (so the repo may append without reading the row first).
    APPEND_CHECKS_INCARNATION: ClassVar[bool] = False

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        raise NotImplementedError

    # --- helpers ------------------------------------------------------------------------------

    def _read(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self.database.read(self.sql(sql), params)

    def parse_stored(self, entry_id: str, entry_type: str, data: str) -> SessionEntry:
        """An entry from its stored JSON, through the parse cache."""
        entry = self._cache.get(entry_id)
        if entry is None:
            entry = parse_entry(self.session_id, entry_id, entry_type, data)
            self._cache.put(entry_id, entry, len(data))
        return entry

    def _entries(self, sql: str, params: dict[str, Any]) -> list[SessionEntry]:
        rows = self._read(sql, params)
        return [
            self.parse_stored(entry_id, entry_type, data) for entry_id, entry_type, data in rows
        ]

    def _recount_row(self) -> None:
        """Count the row's figures that need every entry (a row stored before it kept them)."""
        raise NotImplementedError

    # --- the storage protocol: reads ----------------------------------------------------------

    def get_metadata(self) -> SessionHeader:
        return self._header

    def get_leaf_id(self) -> str | None:
        rows = self._read("SELECT leaf FROM sessions WHERE id = :s", {"s": self.session_id})
        if not rows:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        # Not noted as the parent of the next append: that is changed only under the
        # storage's lock, by the writes (a read racing an append could set it back, and the
        # append after would fork the branch). An append built on an older leaf is moved onto
        # the leaf as it is in its transaction.
        leaf: str | None = rows[0][0]
        return leaf

    def leaf_for_append(self) -> str | None:
        return self._seen_leaf

    def create_entry_id(self) -> str:
        # Not checked against the database: that check could be stale by the time of the
        # append anyway. The append checks inside its transaction and raises "conflict", and
        # Session then retries with a fresh id.
        return new_entry_id(self._cache.__contains__)

    def get_entry(self, entry_id: str) -> SessionEntry | None:
        return self.parsed_entries([entry_id]).get(entry_id)

    def parsed_entries(self, ids: Sequence[str]) -> dict[str, SessionEntry]:
        """Each of ``ids`` found, parsed: through the parse cache, the rest read together."""
        found: dict[str, SessionEntry] = {}
        missing: list[str] = []
        for entry_id in ids:
            entry = self._cache.get(entry_id)
            if entry is None:
                missing.append(entry_id)
            else:
                found[entry_id] = entry
        for marks, params in self._id_chunks(missing):
            sql = f"SELECT id, type, data FROM entries WHERE session_id = :s AND id IN ({marks})"
            for entry in self._entries(sql, params):
                found[entry.id] = entry
        return found

    def find_entries(self, entry_type: str) -> list[SessionEntry]:
        return self._entries(
            "SELECT id, type, data FROM entries WHERE session_id = :s AND type = :t ORDER BY seq",
            {"s": self.session_id, "t": entry_type},
        )

    def get_label(self, entry_id: str) -> str | None:
        rows = self._read(
            "SELECT label FROM labels WHERE session_id = :s AND target_id = :id",
            {"s": self.session_id, "id": entry_id},
        )
        return rows[0][0] if rows else None

    def get_session_name(self) -> str | None:
        rows = self._read("SELECT name FROM sessions WHERE id = :s", {"s": self.session_id})
        return rows[0][0] if rows else None

    def get_branch(self, leaf_id: str | None) -> list[SessionEntry]:
        if leaf_id is None:
            return []
        path = self._entries(BRANCH_SQL, {"s": self.session_id, "leaf": leaf_id})
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
        return self._context_of(self._branch_outline(leaf_id))

    def _context_of(self, rows: list[BranchRow]) -> list[BranchRow]:
        """The rows of the branch ``rows`` that its context is built from."""

        def compaction_at(i: int) -> CompactionEntry:
            entry = self.get_entry(rows[i][0])
            assert isinstance(entry, CompactionEntry)
            return entry

        if not rows:
            return []
        ids, types, roles = zip(*rows, strict=True)
        return [rows[i] for i in context_path_indices(ids, types, roles, compaction_at)]

    def context_messages(
        self, leaf_id: str | None, newest: int
    ) -> tuple[list[BranchRow], dict[str, str]]:
        kept = leaf_id is not None and self._kept_branch(leaf_id) is not None
        if self.BRANCH_MESSAGES_SQL is None or leaf_id is None or newest <= 0 or kept:
            return self.context_rows(leaf_id), {}
        params = {"s": self.session_id, "leaf": leaf_id, "newest": newest}
        found = self._read(self.BRANCH_MESSAGES_SQL, params)
        if not found:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        found.sort(key=itemgetter(4), reverse=True)  # root first (see branch_messages_sql)
        rows: list[BranchRow] = [(row[0], row[1], row[2]) for row in found]
        self._keep_branch(leaf_id, rows)
        path = self._context_of(rows)
        on_path = {row[0] for row in path}
        return path, {row[0]: row[3] for row in found if row[3] is not None and row[0] in on_path}

    def _branch_outline(self, leaf_id: str | None) -> list[BranchRow]:
        """The branch ending at ``leaf_id``, root first, as (id, type, message role); the
        caller must not change the list."""
        if leaf_id is None:
            return []
        rows = self._kept_branch(leaf_id)
        if rows is not None:
            return rows
        rows = self._read(_BRANCH_OUTLINE_SQL, {"s": self.session_id, "leaf": leaf_id})
        if not rows:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        self._keep_branch(leaf_id, rows)
        return rows

    def _kept_branch(self, leaf_id: str) -> list[BranchRow] | None:
        return kept_branches.get(self, leaf_id)

    def _keep_branch(self, leaf_id: str, rows: list[BranchRow]) -> None:
        kept_branches.put(self, leaf_id, rows)

    def _extend_branch(self, parent_id: str, row: BranchRow) -> None:
        parent = kept_branches.get(self, parent_id)
        if parent is not None:
            self._keep_branch(row[0], [*parent, row])

    def get_path_to_root_or_compaction(self, leaf_id: str | None) -> list[SessionEntry]:
        path = self.get_branch(leaf_id)
        stop = compaction_stop()
        for index in range(len(path) - 1, -1, -1):
            if stop(path[index]):
                return path[index:]
        return path

    def get_children(self, entry_id: str | None) -> list[SessionEntry]:
        return self._entries(_children_sql(entry_id), {"s": self.session_id, "x": entry_id})

    def get_entries(self, options: dict[str, Any] | None = None) -> list[SessionEntry]:
        return self._entries(
            "SELECT id, type, data FROM entries WHERE session_id = :s ORDER BY seq",
            {"s": self.session_id},
        )

    def get_session_stats(self) -> SessionStats:
        params = {"s": self.session_id}
        rows = self._read(_STATS_SQL, params)
        if rows and rows[0][0] is None:  # a session stored before the row kept these figures
            self._recount_row()
            rows = self._read(_STATS_SQL, params)
        if not rows:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        roles, *figures = rows[0]
        stats = SessionStats(**dict(zip(_STATS_NAMES, figures, strict=True)))
        # JSON text (SQLite) or already decoded (PostgreSQL's jsonb)
        stats.messages_by_role = json.loads(roles) if isinstance(roles, str) else dict(roles)
        return stats

    # --- stored JSON, unparsed (StoredPages) ----------------------------------------------------

    def branch_ids(self, leaf_id: str | None) -> list[str]:
        return [row[0] for row in self._branch_outline(leaf_id)]

    def stored_branch(
        self, leaf_id: str | None, newest: int | None
    ) -> tuple[list[str], dict[str, str]]:
        if leaf_id is None:
            return [], {}
        kept = self._kept_branch(leaf_id)
        if kept is not None:
            ids = [row[0] for row in kept]
            return ids, self.stored_json(ids if newest is None else ids[len(ids) - newest :])
        # Not in outline yet: the walk reads those entries too, instead of a second statement.
        params = {"s": self.session_id, "leaf": leaf_id, "newest": -1 if newest is None else newest}
        rows = self._read(_BRANCH_STORED_SQL, params)
        if not rows:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        self._keep_branch(leaf_id, [(row[0], row[1], row[2]) for row in rows])
        return [row[0] for row in rows], {row[0]: row[3] for row in rows if row[3] is not None}

    def stored_json(self, ids: Sequence[str]) -> dict[str, str]:
        return self._by_ids("data", ids)

    def _by_ids(self, column: str, ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for marks, params in self._id_chunks(ids):
            sql = f"SELECT id, {column} FROM entries WHERE session_id = :s AND id IN ({marks})"
            found.update(self._read(sql, params))
        return found

    def _id_chunks(self, ids: Sequence[str | int]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``ids`` (entry ids, or rowids) in chunks of ``IDS_PER_QUERY``, each as the marks of
        an ``IN (…)`` list and its parameters (the session as ``:s``)."""
        for start in range(0, len(ids), IDS_PER_QUERY):
            chunk = ids[start : start + IDS_PER_QUERY]
            params: dict[str, Any] = {f"i{k}": entry_id for k, entry_id in enumerate(chunk)}
            params["s"] = self.session_id
            yield ", ".join(f":i{k}" for k in range(len(chunk))), params

    def entry_total(self) -> int:
        return self.log_end()[0]

    def log_end(self) -> tuple[int, str | None]:
        # Every entry takes the next sequence number: positions are 0 .. next_seq - 1.
        rows = self._read(
            "SELECT next_seq, leaf FROM sessions WHERE id = :s", {"s": self.session_id}
        )
        if not rows:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        return int(rows[0][0]), rows[0][1]

    def stored_range(self, start: int, end: int) -> list[str]:
        if end <= start:
            return []
        params = {"s": self.session_id, "start": start, "end": end, "count": end - start}
        rows = self._read(self.RANGE_SQL, params)
        self._check_count(start + len(rows), end)
        return [row[0] for row in rows]

    def stored_log(self, end: int, batch: int) -> Iterator[list[str]]:
        for start in range(0, end, batch):
            yield self.stored_range(start, min(end, start + batch))

    def _check_count(self, read: int, end: int) -> None:
        if read == end:
            return
        if not self._read("SELECT 1 FROM sessions WHERE id = :s", {"s": self.session_id}):
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        # next_seq counts every row: this is damage.
        raise SessionError(
            "corrupt",
            f"session {self.session_id} has fewer entries than its row counts ({read}"
            f" of {end} read)",
        )

    def branch_outline(self, leaf_id: str) -> list[OutlineRow]:
        rows = self._read(_BRANCH_PLACES_SQL, {"s": self.session_id, "leaf": leaf_id})
        if not rows:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        return rows

    def children_outline(self, ids: Sequence[str]) -> dict[str, list[OutlineRow]]:
        found: dict[str, list[OutlineRow]] = {entry_id: [] for entry_id in ids}
        for marks, params in self._id_chunks(list(found)):
            # Index searches only (see _children_sql), everything read in SQLite's tree index;
            # the children below a leaf move find the move's parent with one lookup each.
            rows = self._read(
                "SELECT p, id, parent_id, type, timestamp FROM (SELECT parent_id AS p, id,"
                f" parent_id, type, timestamp, {self.LOG_ORDER} AS o FROM entries"
                f" WHERE session_id = :s AND parent_id IN ({marks}) AND type != 'leaf'"
                " UNION ALL SELECT (SELECT m.parent_id FROM entries m WHERE m.session_id = :s"
                f" AND m.id = e.parent_id), e.id, e.parent_id, e.type, e.timestamp, e.{self.LOG_ORDER}"
                " FROM entries e WHERE e.session_id = :s AND e.type != 'leaf' AND e.parent_id"
                f" IN (SELECT id FROM entries WHERE session_id = :s AND parent_id IN ({marks})"
                " AND type = 'leaf')) children ORDER BY o",
                params,
            )
            for parent, entry_id, parent_id, entry_type, timestamp in rows:
                found[parent].append((entry_id, parent_id, entry_type, timestamp))
        return found

    def newest_outline(self, count: int) -> tuple[int, list[TreeRow]] | None:
        """How many entries the session has, and its last ``count`` in outline (as
        ``outline``, in the order appended), when no entry of it is a leaf move: each entry
        is then a tree node, and a row's parent is its tree parent (None for a parent not in
        the session). None when one is a leaf move."""
        counts = "SELECT next_seq, entry_count FROM sessions WHERE id = :s"
        rows = self._read(counts, {"s": self.session_id})
        if not rows:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        if rows[0][0] != rows[0][1]:
            return None
        found = self._newest_rows(count)
        # The rows are the count's only if nothing was appended between the two reads (the
        # count only grows): else the page's places would be off by the entries appended, and
        # the next pages would skip as many.
        if self._read(counts, {"s": self.session_id}) != rows:
            return None
        found.reverse()
        return int(rows[0][0]), found

    # ``newest_outline``'s columns of an entry ``e``: its parent only if in the session.
    NEWEST_COLUMNS = (
        "e.id, CASE WHEN EXISTS (SELECT 1 FROM entries p WHERE p.session_id = e.session_id"
        " AND p.id = e.parent_id) THEN e.parent_id END, e.type, e.timestamp"
    )

    def _newest_rows(self, count: int) -> list[TreeRow]:
        return self._read(
            f"SELECT {self.NEWEST_COLUMNS} FROM entries e WHERE e.session_id = :s"
            f" ORDER BY e.{self.LOG_ORDER} DESC LIMIT :count",
            {"s": self.session_id, "count": count},
        )

    def outline(self) -> list[TreeRow]:
        return self._read(
            "SELECT id, parent_id, type, timestamp FROM entries WHERE session_id = :s"
            f" ORDER BY {self.LOG_ORDER}",
            {"s": self.session_id},
        )

    def labels(self) -> dict[str, str]:
        rows = self._read(
            "SELECT target_id, label FROM labels WHERE session_id = :s", {"s": self.session_id}
        )
        return dict(rows)

    def close(self) -> None:
        pass
