"""What other processes wrote to a session database: the command line's ``run``, ``chat`` and
``sessions`` commands, another server on the same file. A server notifies its own writes as
it makes them; these it learns of by looking.

Each look costs one ``PRAGMA data_version`` on a connection of its own (it changes only when
another connection committed) and, only then, a few queries in one read transaction: the
sessions whose ``modified`` stamp (indexed) passed the newest seen before, a page of them at
most; the sessions' count, and those created since (rowids above the highest seen before), to
tell creations and deletions; and, when another process changed sessions, whether it named
one among them (a ``session_info`` entry above the highest entry rowid seen before: a name is
what ``resources/list`` shows, as a rename here says). The rows this process wrote itself
(``OwnWrites``) are left out: they were notified when written. Call it from a worker thread,
one look at a time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field

from mcp_agent.sessions.sqlite.database import OwnWrites, SqliteDatabase

# Sessions another process changed that one look notifies one by one; past it, a list change
# (and the watched sessions among them) instead of thousands of updates.
WATCH_PAGE = 100
# Changed rows one look reads, as pages: this process's own among them are passed over (a
# burst of its own appends must not pass for another's).
_PAGES_READ = 10
# Watched sessions (those a client subscribed to or listens for) one look checks are still
# there, once it knows another process deleted sessions.
MAX_WATCHED = 2000
# Ids in one ``IN (...)``: SQLite allows 32,766 variables, older builds 999.
_CHUNK = 500


@dataclass
class ForeignChanges:
    """What other processes changed since the last look: sessions whose resources changed
    (deleted ones too: reading them now says they are gone), and whether the list did."""

    sessions: list[str] = field(default_factory=list)
    list_changed: bool = False


class DatabaseWatch:
    """Looks at one session database for the writes of other processes (see the module)."""

    def __init__(self, database: SqliteDatabase, page: int = WATCH_PAGE) -> None:
        self.database = database
        self.page = max(1, page)
        self.own: OwnWrites = database.record_own_writes()
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        self._mark = ""  # the newest modified stamp seen
        self._top = 0  # the highest session rowid seen
        self._entries_top = 0  # the highest entry rowid seen
        self._count = 0  # sessions there were
        self._gone: set[str] = set()  # watched sessions already said to be gone
        self._due = False  # another connection committed since the last look

    def rebase(self) -> None:
        """Take what is there now as seen (the server starts: what is older is no one's
        news)."""
        if self._conn is None:
            self._conn = self.database.watch_connection()
        conn = self._conn
        self._version = None  # until this rebase is done
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        conn.execute("BEGIN")
        try:
            with self.own.gate:  # what this process committed is known as far as read
                self._count, self._top, self._mark = self._figures(conn)
                self._entries_top = self._entries_max(conn)
                self.own.take_news()
        finally:
            conn.execute("COMMIT")
        self._gone.clear()
        self._due = False
        self._version = version

    def committed(self) -> bool:
        """Whether another connection committed since the last look (one pragma): the next
        ``look`` reads what. The caller may then gather what ``look`` needs."""
        if self._conn is None or self._version is None:  # never rebased, or it failed
            self.rebase()
            return False
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._version = version
            self._due = True
        return self._due

    def look(self, watched: Iterable[str] = ()) -> ForeignChanges | None:
        """The changes of other processes since the last look (or ``rebase``), or None when
        none committed. ``watched``: the sessions someone subscribed to, checked for deletion."""
        if not self.committed():
            return None
        assert self._conn is not None  # committed() opened it
        conn = self._conn
        changes = ForeignChanges()
        conn.execute("BEGIN")
        # From the snapshot's first read to the last: this process's writes are known (own)
        # exactly as far as the snapshot holds them (a commit of ours waits meanwhile).
        self.own.gate.acquire()
        try:
            count, top, newest = self._figures(conn)
            entries_top = self._entries_max(conn)
            own_created, own_deletions = self.own.take_news()
            read = self.page * _PAGES_READ
            rows = conn.execute(
                "SELECT id, modified FROM sessions WHERE modified > ? ORDER BY modified LIMIT ?",
                (self._mark, read + 1),
            ).fetchall()
            theirs = [row[0] for row in rows if not self.own.is_own(row[0], row[1])]
            created = conn.execute(
                "SELECT count(*) FROM sessions WHERE rowid > ?", (self._top,)
            ).fetchone()[0]
            watched = sorted(set(watched))[:MAX_WATCHED]
            if len(theirs) > self.page or len(rows) > read:
                changes.list_changed = True
                changes.sessions = self._changed_among(conn, watched)
            else:
                changes.sessions = theirs
                changes.list_changed = self._named_among(conn, theirs, entries_top)
            # A session of ours another process wrote to since is not new to the list: the
            # counts tell, not the rows.
            new_here, there = self._own_among(conn, own_created)
            changes.list_changed |= created > len(new_here)
            # Made here since the last look and gone, not deleted here: another process
            # deleted it before this look (the counts alone cancel the two out).
            gone = [s for s in own_created if s not in there]
            theirs_gone = [s for s in gone if not self.own.deleted_here(s)]
            if theirs_gone:
                changes.list_changed = True
                told = set(watched) - self._gone
                changes.sessions.extend(s for s in theirs_gone if s in told)
                self._gone.update(theirs_gone)
            deleted = self._count + created - count
            if deleted > own_deletions - (len(gone) - len(theirs_gone)):
                changes.list_changed = True
                changes.sessions.extend(self._gone_among(conn, watched))
        finally:
            self.own.gate.release()
            conn.execute("COMMIT")
        self._count, self._top, self._mark = count, top, max(newest, self._mark)
        self._entries_top = entries_top
        self._due = False  # only now: a look that failed is made again
        if not changes.sessions and not changes.list_changed:
            return None
        return changes

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @staticmethod
    def _figures(conn: sqlite3.Connection) -> tuple[int, int, str]:
        # Three statements: max() alone walks one edge of an index; with count(*) beside it,
        # SQLite would scan for both.
        count = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        top = conn.execute("SELECT max(rowid) FROM sessions").fetchone()[0] or 0
        newest = conn.execute("SELECT max(modified) FROM sessions").fetchone()[0] or ""
        return count, top, newest

    @staticmethod
    def _entries_max(conn: sqlite3.Connection) -> int:
        return conn.execute("SELECT max(n) FROM entries").fetchone()[0] or 0

    def _named_among(self, conn: sqlite3.Connection, sessions: list[str], top: int) -> bool:
        """Whether one of ``sessions`` got a name since the last look (a ``session_info``
        entry among the entries appended since: a range of rowids, at most a page's
        sessions). One of this process's own renames among them is told again: harmless."""
        for start in range(0, len(sessions), _CHUNK):
            chunk = sessions[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            if conn.execute(
                f"SELECT 1 FROM entries WHERE n > ? AND n <= ? AND type = 'session_info'"
                f" AND session_id IN ({marks}) LIMIT 1",
                (self._entries_top, top, *chunk),
            ).fetchone():
                return True
        return False

    def _changed_among(self, conn: sqlite3.Connection, watched: list[str]) -> list[str]:
        """The watched sessions another process changed since the last look."""
        found: list[str] = []
        for start in range(0, len(watched), _CHUNK):
            chunk = watched[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            for session_id, modified in conn.execute(
                f"SELECT id, modified FROM sessions WHERE id IN ({marks}) AND modified > ?",
                (*chunk, self._mark),
            ):
                if not self.own.is_own(session_id, modified):
                    found.append(session_id)
        return found

    def _own_among(self, conn: sqlite3.Connection, created: list[str]) -> tuple[set[str], set[str]]:
        """Of the sessions this process created since the last look: those new to the list
        since (rowid above the highest seen before), and those there at all."""
        new: set[str] = set()
        there: set[str] = set()
        for start in range(0, len(created), _CHUNK):
            chunk = created[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            for session_id, is_new in conn.execute(
                f"SELECT id, rowid > ? FROM sessions WHERE id IN ({marks})", (self._top, *chunk)
            ):
                there.add(session_id)
                if is_new:
                    new.add(session_id)
        return new, there

    def _gone_among(self, conn: sqlite3.Connection, watched: list[str]) -> list[str]:
        """The watched sessions another process deleted (each told once)."""
        present: set[str] = set()
        for start in range(0, len(watched), _CHUNK):
            chunk = watched[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            present.update(
                row[0]
                for row in conn.execute(f"SELECT id FROM sessions WHERE id IN ({marks})", chunk)
            )
        # A session made again under its id is there once more: its deletion is news again.
        self._gone &= set(watched) - present
        gone = [
            session_id
            for session_id in watched
            if session_id not in present
            and session_id not in self._gone
            and not self.own.deleted_here(session_id)
        ]
        self._gone.update(gone)
        return gone
