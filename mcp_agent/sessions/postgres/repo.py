"""The repo over a PostgreSQL session database: create, open, list, search, delete."""

from __future__ import annotations

import builtins
import threading
from collections import OrderedDict
from typing import Any

from mcp_agent.sessions.context import SessionContextBuildOptions
from mcp_agent.sessions.entries import SessionEntry, SessionHeader
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.postgres.database import Durability, PostgresDatabase, SessionGuard
from mcp_agent.sessions.postgres.storage import Conn, PostgresSessionStorage
from mcp_agent.sessions.repo import (
    BaseSessionRepo,
    SessionPage,
    SessionSummary,
    decode_cursor,
    encode_cursor,
    query_words,
)

# Sessions a repo keeps open between opens (their parsed entries share the parse cache).
OPEN_SESSIONS = 4

_SUMMARY_COLUMNS = (
    "id, name, cwd, created, modified, entry_count, message_count, first_user_message,"
    " parent_session, total_tokens, cost_total"
)


class PostgresSessionRepo(BaseSessionRepo):
    """Every session in one PostgreSQL database, shared by any number of server replicas."""

    def __init__(
        self,
        url: str,
        context_build_options: SessionContextBuildOptions | None = None,
        durability: Durability = "full",
        session_guard: SessionGuard | None = None,
        max_connections: int = 10,
    ) -> None:
        super().__init__(context_build_options)
        self.database = PostgresDatabase(
            url, durability, session_guard, max_connections=max_connections
        )
        self._opened: OrderedDict[str, PostgresSessionStorage] = OrderedDict()
        self._opened_lock = threading.Lock()

    @property
    def where(self) -> str:
        return self.database.where

    def _create_storage(
        self, header: SessionHeader, entries: builtins.list[SessionEntry]
    ) -> PostgresSessionStorage:
        return self._keep_open(PostgresSessionStorage.create(self.database, header, entries))

    def _import_storage(self, stream: SessionStream) -> PostgresSessionStorage:
        return self._keep_open(PostgresSessionStorage.import_stream(self.database, stream))

    def _open_storage(self, session_id: str) -> PostgresSessionStorage:
        with self._opened_lock:
            storage = self._opened.get(session_id)
            if storage is not None:
                self._opened.move_to_end(session_id)
                return storage
        return self._keep_open(PostgresSessionStorage(self.database, session_id))

    def _keep_open(self, storage: PostgresSessionStorage) -> PostgresSessionStorage:
        with self._opened_lock:
            self._opened[storage.session_id] = storage
            while len(self._opened) > OPEN_SESSIONS:
                self._opened.popitem(last=False)
        return storage

    def exists(self, session_id: str) -> bool:
        return bool(self.database.read("SELECT 1 FROM sessions WHERE id = %s", (session_id,)))

    def summary(self, session_id: str) -> SessionSummary:
        rows = self.database.read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions WHERE id = %s", (session_id,)
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
            conditions.append("(modified, id) < (%(modified)s, %(after_id)s)")
        # Every word must start a word somewhere in the session, not necessarily in one entry.
        # A word is a quoted prefix term: user text never reaches tsquery syntax.
        for index, word in enumerate(query_words(query)):
            params[f"w{index}"] = word
            conditions.append(
                "id IN (SELECT session_id FROM entries WHERE search @@"
                f" to_tsquery('simple', quote_literal(%(w{index})s) || ':*'))"
            )
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = self.database.read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions {where}"
            " ORDER BY modified DESC, id DESC LIMIT %(limit)s",
            params,
        )
        items = [SessionSummary(*row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            next_cursor = encode_cursor(items[-1].modified, items[-1].id)
        return SessionPage(items, next_cursor)

    def delete(self, session_id: str) -> None:
        def work(conn: Conn) -> None:
            # Entries and labels go with the row (ON DELETE CASCADE).
            gone = conn.execute("DELETE FROM sessions WHERE id = %s", (session_id,)).rowcount
            if not gone:
                raise SessionError("not_found", f"session {session_id} not found")

        self.database.write(work)
        with self._opened_lock:
            self._opened.pop(session_id, None)

    def close(self) -> None:
        self.database.close()
