"""The PostgreSQL backend: every session in one PostgreSQL database, which any number of server
replicas share (``--db postgresql://…``).

``database`` holds the connection pool, the schema and its migrations; ``storage`` one session;
``repo`` the repo over the database; ``row_lock`` how a change waits for a session's row. psycopg is imported only when this package is."""

from mcp_agent.sessions.postgres.database import (
    PostgresDatabase,
    SessionGuard,
)
from mcp_agent.sessions.postgres.repo import PostgresSessionRepo
from mcp_agent.sessions.postgres.storage import PostgresSessionStorage

__all__ = [
    "PostgresDatabase",
    "PostgresSessionRepo",
    "PostgresSessionStorage",
    "SessionGuard",
]
