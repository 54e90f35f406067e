"""The repo over a session database: create, open (keeping the last few open), list, search, delete."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from mcp_agent.sessions.context import SessionContextBuildOptions
from mcp_agent.sessions.sql.repo import SqlSessionRepo
from mcp_agent.sessions.sqlite.database import (
    BUSY_TIMEOUT_S,
    Durability,
    SessionGuard,
    SqliteDatabase,
)
from mcp_agent.sessions.sqlite.storage import SqliteSessionStorage


def _fts_query(words: Iterable[str]) -> str:
    # Each word as a quoted prefix term: user text never reaches FTS5 query syntax.
    return " ".join('"' + word.replace('"', '""') + '"*' for word in words)


def _marks(sessions: int) -> str:
    return ", ".join(f":s{index}" for index in range(sessions))


def _matched(sessions: int, also: str = "", words: str = "any") -> str:
    """The entries of the sessions ``:s0`` .. that hold any of the words (``:any``), or every
    one (``:every``)."""
    return (
        f"SELECT d.session_id AS session_id, f.rowid AS place{also}"
        " FROM entries_fts f JOIN fts_docs d ON d.n = f.rowid"
        f" WHERE entries_fts MATCH :{words} AND d.session_id IN ({_marks(sessions)})"
    )


class SqliteSessionRepo(SqlSessionRepo[SqliteSessionStorage]):
    """Every session in one SQLite file (the default store)."""

    storage_class = SqliteSessionStorage

    def __init__(
        self,
        path: str | Path,
        context_build_options: SessionContextBuildOptions | None = None,
        busy_timeout: float = BUSY_TIMEOUT_S,
        durability: Durability = "full",
        session_guard: SessionGuard | None = None,
    ) -> None:
        self.database: SqliteDatabase = SqliteDatabase(
            path, busy_timeout, durability, session_guard
        )
        super().__init__(self.database, context_build_options)

    @property
    def path(self) -> Path:
        return self.database.path

    def word_condition(self, param: str) -> str:
        return (
            "id IN (SELECT d.session_id FROM entries_fts f"
            f" JOIN fts_docs d ON d.n = f.rowid WHERE entries_fts MATCH :{param})"
        )

    def search_term(self, word: str) -> str:
        return _fts_query([word])

    def walk_condition(self, param: str) -> str:
        # The word's matches read from the text index once (SQLite keeps a subquery that
        # refers to no row as a set), each walked session's entries looked up in them.
        return (
            "EXISTS (SELECT 1 FROM entries e WHERE e.session_id = sessions.id AND e.n IN"
            f" (SELECT rowid FROM entries_fts WHERE entries_fts MATCH :{param}))"
        )

    def matches_sql(self, param: str) -> str:
        return f"SELECT count(*) FROM entries_fts WHERE entries_fts MATCH :{param}"

    # The rowid: a session's entries are inserted in the order appended (see storage.py).
    place_column = "n"

    def search_params(self, words: builtins.list[str]) -> dict[str, str]:
        # Also every word at once, for the entries that hold any (``matched_sql``).
        return {
            **super().search_params(words),
            "any": " OR ".join(_fts_query([word]) for word in words),
            "every": _fts_query(words),
        }

    def hits_sql(self, words: int, sessions: int, every: bool = False) -> str:
        if every or words == 1:  # one score for all: nothing to group (60,000: 0.1 s less)
            return _matched(sessions, f", {words} AS score", "every" if every else "any")
        found = " UNION ALL ".join(
            f"SELECT rowid AS n FROM entries_fts WHERE entries_fts MATCH :w{index}"
            for index in range(words)
        )
        # Each hit's session from fts_docs, whose rows are small: from entries (the entry's
        # JSON on the same pages), a word common in other sessions took 3 times as long.
        return (
            f"SELECT d.session_id AS session_id, f.n AS place, count(*) AS score"
            f" FROM ({found}) f JOIN fts_docs d ON d.n = f.n"
            f" WHERE d.session_id IN ({_marks(sessions)}) GROUP BY f.n"
        )

    def matched_sql(self, words: int, sessions: int) -> str:
        return _matched(sessions)

    # An append committed after the search indexed the text is not in the index yet.
    indexed_sql = (
        "(SELECT value FROM meta WHERE key = 'fts_indexed_upto')"
        " >= coalesce((SELECT max(n) FROM entries), 0)"
    )

    def before_search(self) -> None:
        self.database.index_pending_text()

    def index_search_text(self) -> bool:
        return self.database.index_text_batch()

    def delete_rows(self, conn: sqlite3.Connection, session_id: str) -> None:
        self.database.delete_session_rows(conn, session_id)
