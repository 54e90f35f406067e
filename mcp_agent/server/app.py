"""The MCP server: session operations and agent runs as tools, sessions as resources."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from mcp.server import MCPServer
from mcp_types import SubscriptionsListenRequestParams

from mcp_agent import __version__
from mcp_agent.runtime.application import open_app
from mcp_agent.runtime.models import ModelOverrides
from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server import (
    agent_tools,
    compact_tools,
    protocol,
    resources,
    session_prompts,
    session_tools,
)
from mcp_agent.server.clients import ClientsTakeTurns
from mcp_agent.server.http_auth import url_host
from mcp_agent.server.lifespan import ServerState
from mcp_agent.server.notify import ListenStreams, Notifier, WatchedBus
from mcp_agent.server.strict import SessionsServer
from mcp_agent.server.tool_list import KeptToolList, OnePageLists
from mcp_agent.server.unreadable import (
    DescribedNotifications,
    DescribedParams,
    UnpairedSurrogates,
)
from mcp_agent.server.viewer import apps as viewer_apps
from mcp_agent.sessions.repo import SessionRepo
from mcp_agent.sessions.sqlite import SqliteSessionRepo
from mcp_agent.sessions.sqlite.watch import DatabaseWatch

if TYPE_CHECKING:
    from mcp_agent.server.pg_bus import PostgresBus

INSTRUCTIONS = """\
Agent sessions: every conversation is a tree of entries you can browse, branch, fork and resume.
Run an agent with agent_run (a new session, or session_id to continue one). Read sessions with
session_list / session_get, or as resources session://{id}. Move to an earlier entry with
session_move_to to branch; copy a branch into a new session with session_fork."""


def build_server(
    settings: ServerSettings | None = None, models: ModelOverrides | None = None
) -> MCPServer:
    settings = settings or ServerSettings()
    bus = WatchedBus()
    shared: PostgresBus | None = None
    if settings.db_url:
        from mcp_agent.server.pg_bus import PostgresBus

        # Replicas on one PostgreSQL database hear each other's changes.
        bus = shared = PostgresBus(settings.db_url)

    @asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[ServerState]:
        notifier = Notifier(
            bus,
            max_subscriptions=settings.max_subscriptions,
            send_timeout=settings.notification_timeout,
        )
        async with open_app(settings, models) as app:
            app.repo.listeners.append(notifier.session_changed)
            app.list_listeners.append(notifier.list_changed)
            app.deleted_listeners.append(notifier.session_changed)
            app.task_group.start_soon(notifier.run)
            watch = database_watch(app.repo)
            if watch is not None:
                app.task_group.start_soon(notifier.follow, watch)
            if shared is not None:
                shared.remote_listeners.append(notifier.remote_event)
                app.task_group.start_soon(shared.run)
            yield ServerState(app, notifier)

    server = SessionsServer(
        "mcp-agent-sessions",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        subscriptions=bus,
        log_level="WARNING",
    )
    # The SDK's listen handler, with a refusal at its limits that says which.
    server._lowlevel_server.add_request_handler(
        "subscriptions/listen",
        SubscriptionsListenRequestParams,
        ListenStreams(bus, max_uris=settings.max_subscriptions),
    )
    # Text that is not valid Unicode is refused before any handler sees it, whatever the method;
    # params the SDK refuses get an answer that says what is wrong with them.
    server._lowlevel_server.middleware.append(UnpairedSurrogates())
    server._lowlevel_server.middleware.append(DescribedParams())
    # A notification with params MCP does not allow is dropped saying what is wrong with them.
    server._lowlevel_server.middleware.append(DescribedNotifications())
    # One client's flood of database work waits in its own line, not ahead of everyone.
    server._lowlevel_server.middleware.append(ClientsTakeTurns())
    session_tools.register(server)
    agent_tools.register(server)
    compact_tools.register(server)
    resources.register(server)
    session_prompts.register(server)
    protocol.register(server)
    viewer_apps.register(server)
    server.make_tools_strict()
    server._lowlevel_server.middleware.append(OnePageLists())
    # Innermost, once every tool is registered: the checks above still see each listing.
    server._lowlevel_server.middleware.append(KeptToolList())
    return server


def database_watch(repo: SessionRepo) -> DatabaseWatch | None:
    """A watch for what other processes write to the repo's SQLite file (the command line, a
    second server on it); None for a store that has none (PostgreSQL replicas hear each other
    through pg_bus, JSONL folders and in-memory databases are not watched)."""
    if not isinstance(repo, SqliteSessionRepo) or str(repo.database.path) == ":memory:":
        return None
    return DatabaseWatch(repo.database)


def banner(settings: ServerSettings, transport: str) -> str:
    where = (
        f" on http://{url_host(settings.host)}:{settings.port}/mcp" if transport == "http" else ""
    )
    store = settings.db_location
    if settings.sessions_dir is not None:
        store = f"{settings.sessions_dir} (JSONL files)"
    return f"mcp-agent-sessions {__version__}: sessions stored in {store}{where}"


def print_banner(settings: ServerSettings, transport: str) -> None:
    if sys.stderr is not None:  # with stderr closed, print would write to stdout: the wire
        print(banner(settings, transport), file=sys.stderr, flush=True)
