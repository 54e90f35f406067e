"""The checks on a file's tree of entries (unique ids, parents that exist, no cycle), kept in
a private temporary SQLite database instead of Python memory, so that reading a file of any
size holds a bounded amount (SQLite's page cache) whatever its number of entries."""

from __future__ import annotations

import sqlite3

# Rows inserted per statement, and the page cache SQLite may use (KiB; the rest spills to its
# temporary file).
BATCH_ROWS = 5000
CACHE_KIB = 8192
MISSING_NAMED = 3

_FIRST_DUPLICATE = """
SELECT a.line, a.id, (SELECT min(b.line) FROM ids b WHERE b.id = a.id) FROM ids a
WHERE EXISTS (SELECT 1 FROM ids b WHERE b.id = a.id AND b.line < a.line)
ORDER BY a.line LIMIT 1
"""
_MISSING = """
FROM ids a
WHERE a.parent IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ids b WHERE b.id = a.parent)
"""
_MISSING_PARENTS = f"SELECT a.line, a.parent {_MISSING} ORDER BY a.line"
_MISSING_COUNT = f"SELECT count(*) {_MISSING}"
_ANY_FORWARD_LINK = """
SELECT 1 FROM ids a JOIN ids b ON b.id = a.parent WHERE b.line >= a.line LIMIT 1
"""
# With unique ids, an entry is on (or leads into) a cycle exactly when it cannot be reached
# from a root: an entry with no parent, or with a parent not in the file (pi shows it as one).
_REACH_FROM_ROOTS = """
INSERT INTO reached (id)
WITH RECURSIVE r(id) AS (
  SELECT id FROM ids a WHERE parent IS NULL
    OR NOT EXISTS (SELECT 1 FROM ids b WHERE b.id = a.parent)
  UNION ALL
  SELECT c.id FROM ids c JOIN r ON c.parent = r.id
)
SELECT id FROM r
"""
_FIRST_UNREACHED = """
SELECT line, id FROM ids WHERE id NOT IN (SELECT id FROM reached) ORDER BY line LIMIT 1
"""


class TreeCheck:
    """Collects (line, id, parent) of each entry as a file is read; :meth:`first_problem`
    names the first problem as a reader of the whole file reports it."""

    def __init__(self) -> None:
        # "" is a private database in a temporary file, deleted when the connection closes.
        # Any thread: an import's write may be run by the thread that commits a group of
        # writes (SqliteDatabase.write), not the one that began reading the file; one thread
        # uses it at a time.
        self._conn = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = OFF")
        self._conn.execute("PRAGMA synchronous = OFF")
        self._conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        self._conn.execute("CREATE TABLE ids (line INTEGER PRIMARY KEY, id TEXT, parent TEXT)")
        self._batch: list[tuple[int, str, str | None]] = []
        self.count = 0
        self.missing_parents: list[tuple[int, str]] = []
        self.missing_count = 0

    def add(self, line: int, entry_id: str, parent_id: str | None) -> None:
        self._batch.append((line, entry_id, parent_id))
        self.count += 1
        if len(self._batch) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            self._conn.executemany("INSERT INTO ids VALUES (?, ?, ?)", self._batch)
            self._batch.clear()

    def first_problem(self) -> tuple[int, str, str, int | None] | None:
        """The first problem: ``(line, kind, id, other line)`` with kind ``duplicate`` (id
        also at the other line) or ``cycle`` (id: the first entry whose parent chain does not
        reach a root); None when there is none. An entry whose parent is not in the file is a
        root, as pi shows it (pi writes such files when it branches from below a label): the
        first ``MISSING_NAMED`` of them are in ``missing_parents`` as (line, parent), and
        ``missing_count`` says how many there are."""
        self._flush()
        conn = self._conn
        conn.execute("CREATE INDEX ids_id ON ids (id, line)")
        found = conn.execute(_FIRST_DUPLICATE).fetchone()
        if found is not None:
            return found[0], "duplicate", found[1], found[2]
        self.missing_parents = conn.execute(_MISSING_PARENTS).fetchmany(MISSING_NAMED)
        if len(self.missing_parents) == MISSING_NAMED:
            self.missing_count = conn.execute(_MISSING_COUNT).fetchone()[0]
        else:
            self.missing_count = len(self.missing_parents)
        if conn.execute(_ANY_FORWARD_LINK).fetchone() is None:
            return None  # each parent comes before its children (none is its own): no cycle
        conn.execute("CREATE INDEX ids_parent ON ids (parent)")
        conn.execute("CREATE TEMP TABLE reached (id TEXT PRIMARY KEY) WITHOUT ROWID")
        conn.execute(_REACH_FROM_ROOTS)
        found = conn.execute(_FIRST_UNREACHED).fetchone()
        if found is not None:
            return found[0], "cycle", found[1], None
        return None

    def holds(self, entry_id: str) -> bool:
        """Whether an entry read so far has this id (after :meth:`first_problem`, indexed)."""
        self._flush()
        found = self._conn.execute("SELECT 1 FROM ids WHERE id = ? LIMIT 1", (entry_id,))
        return found.fetchone() is not None

    def close(self) -> None:
        self._conn.close()
