"""The MCP server: session operations and agent runs as tools, sessions as resources."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp.server import MCPServer
from mcp.server.subscriptions import SubscriptionBus

from mcp_agent import __version__
from mcp_agent.proxy.hub import ToolHub
from mcp_agent.server import (
    agent_tools,
    compact_tools,
    prompts,
    protocol,
    resources,
    session_tools,
)
from mcp_agent.server.builtin import build_builtin_server
from mcp_agent.server.leases import SessionLeases
from mcp_agent.server.models import ModelOverrides
from mcp_agent.server.notify import WatchedBus
from mcp_agent.server.runs import RunManager
from mcp_agent.server.settings import ServerSettings
from mcp_agent.server.state import AppState, open_state

INSTRUCTIONS = """\
Agent sessions: every conversation is a tree of entries you can browse, branch, fork and resume.
Run an agent with agent_run (a new session, or session_id to continue one). Read sessions with
session_list / session_get, or as resources session://{id}. Move to an earlier entry with
session_move_to to branch; copy a branch into a new session with session_fork."""


@asynccontextmanager
async def open_app(
    settings: ServerSettings,
    bus: SubscriptionBus | None = None,
    models: ModelOverrides | None = None,
) -> AsyncIterator[AppState]:
    """Everything a server (or the command line) needs to run agents in sessions: the repo,
    manifests, tool hub, run manager and notifications. Leaving it aborts running runs and
    stops downstream servers."""
    async with open_state(settings, bus) as state:
        if models:
            state.extra["models"] = models
        from mcp_agent.sessions.sqlite import SqliteSessionRepo  # loaded by open_state already

        leases = SessionLeases(settings.db_path)
        if isinstance(state.repo, SqliteSessionRepo):
            state.repo.database.session_guard = leases.guard
        state.runs = RunManager(state.task_group, leases)
        state.task_group.start_soon(state.runs.keep_leases)
        async with ToolHub(state.servers, builtin=build_builtin_server(state)) as hub:
            state.hub = hub
            try:
                yield state
            finally:
                await state.runs.close()
                leases.close()


def build_server(
    settings: ServerSettings | None = None, models: ModelOverrides | None = None
) -> MCPServer:
    settings = settings or ServerSettings()
    bus = WatchedBus()

    @asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[AppState]:
        async with open_app(settings, bus, models) as state:
            yield state

    server = MCPServer(
        "mcp-agent-sessions",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        subscriptions=bus,
        log_level="WARNING",
    )
    session_tools.register(server)
    agent_tools.register(server)
    compact_tools.register(server)
    resources.register(server)
    prompts.register(server)
    protocol.register(server)
    return server


def banner(settings: ServerSettings, transport: str) -> str:
    where = f" on http://{settings.host}:{settings.port}/mcp" if transport == "http" else ""
    return f"mcp-agent-sessions {__version__}: sessions stored in {settings.db_path}{where}"


def print_banner(settings: ServerSettings, transport: str) -> None:
    if sys.stderr is not None:  # with stderr closed, print would write to stdout: the wire
        print(banner(settings, transport), file=sys.stderr, flush=True)
