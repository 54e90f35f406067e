"""The SQLite backend: every session in one database file (the default store).

``database`` holds the connection, the schema and the full-text index; ``storage`` one session
(its entries, its leaf, the counters of its row); ``repo`` the repo over the file."""

from mcp_agent.sessions.sqlite.database import (
    BUSY_TIMEOUT_S,
    Durability,
    SessionGuard,
    SqliteDatabase,
)
from mcp_agent.sessions.sqlite.repo import SqliteSessionRepo
from mcp_agent.sessions.sqlite.storage import SqliteSessionStorage

__all__ = [
    "BUSY_TIMEOUT_S",
    "Durability",
    "SessionGuard",
    "SqliteDatabase",
    "SqliteSessionRepo",
    "SqliteSessionStorage",
]
