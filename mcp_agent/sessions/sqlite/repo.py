"""The repo over a session database: create, open (keeping the last few open), list, search, delete."""

from __future__ import annotations

import builtins
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mcp_agent.sessions.context import SessionContextBuildOptions
from mcp_agent.sessions.entries import SessionEntry, SessionHeader
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.repo import (
    BaseSessionRepo,
    SessionPage,
    SessionSummary,
    decode_cursor,
    encode_cursor,
    query_words,
)
from mcp_agent.sessions.sqlite.database import (
    BUSY_TIMEOUT_S,
    Durability,
    SessionGuard,
    SqliteDatabase,
)
from mcp_agent.sessions.sqlite.storage import SqliteSessionStorage

# --- the repo ---------------------------------------------------------------------------------

# Sessions a repo keeps open between opens (their parsed entries share the database's parse
# cache, see storage.EntryCache).
OPEN_SESSIONS = 4

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
        self._opened_lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self.database.path

    def _create_storage(
        self, header: SessionHeader, entries: builtins.list[SessionEntry]
    ) -> SqliteSessionStorage:
        return self._keep_open(SqliteSessionStorage.create(self.database, header, entries))

    def _import_storage(self, stream: SessionStream) -> SqliteSessionStorage:
        return self._keep_open(SqliteSessionStorage.import_stream(self.database, stream))

    def _open_storage(self, session_id: str) -> SqliteSessionStorage:
        with self._opened_lock:
            storage = self._opened.get(session_id)
            if storage is not None:
                self._opened.move_to_end(session_id)
                return storage
        return self._keep_open(SqliteSessionStorage(self.database, session_id))

    def _keep_open(self, storage: SqliteSessionStorage) -> SqliteSessionStorage:
        with self._opened_lock:
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
        with self._opened_lock:
            self._opened.pop(session_id, None)

    def close(self) -> None:
        self.database.close()
