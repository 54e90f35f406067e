"""Where sessions are stored by default (light: the command line reads it without the server)."""

from __future__ import annotations

import os
import re
from pathlib import Path

DB_ENV = "MCP_AGENT_DB"
# A password in a URL's query (libpq takes ``?password=…`` and ``?sslpassword=…``), shown as ***.
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)


def is_database_url(location: object) -> bool:
    """Whether ``location`` (a --db value) names a PostgreSQL database rather than a file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def default_db_url() -> str | None:
    """``$MCP_AGENT_DB`` when it is a PostgreSQL URL."""
    value = os.environ.get(DB_ENV)
    return value if is_database_url(value) else None


def default_db_path() -> Path:
    """``$MCP_AGENT_DB`` (unless a URL), else :func:`user_db_path`."""
    if (value := os.environ.get(DB_ENV)) and not is_database_url(value):
        return Path(value).expanduser()
    return user_db_path()


def user_db_path() -> Path:
    """``sessions.db`` in the per-user data directory (created when first needed)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("mcp-agent-sessions", appauthor=False)) / "sessions.db"


def shown_url(url: str) -> str:
    """A URL (a database's, a model API's base URL) without its password, for messages and
    logs: neither the one before the host nor one among the query's parameters."""
    from urllib.parse import urlsplit, urlunsplit

    url = _QUERY_PASSWORD.sub(r"\1***", url)
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:  # no URL (a stray bracket): still no password shown
        return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", url)
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))
