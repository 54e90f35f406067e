"""Where sessions are stored by default (light: the command line reads it without the server)."""

from __future__ import annotations

import os
from pathlib import Path

DB_ENV = "MCP_AGENT_DB"


def default_db_path() -> Path:
    """``$MCP_AGENT_DB``, else ``sessions.db`` in the per-user data directory."""
    if value := os.environ.get(DB_ENV):
        return Path(value).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("mcp-agent-sessions", appauthor=False)) / "sessions.db"
