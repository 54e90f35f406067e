"""What the server's lifespan owns: the session repo, manifests, tool hub, runs, notifications."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from mcp.server.mcpserver import Context
from mcp.server.subscriptions import SubscriptionBus

from mcp_agent.manifests import (
    AgentManifest,
    ServerConfig,
    load_agents,
    load_servers,
    shipped_manifests_dir,
)
from mcp_agent.server.notify import Notifier
from mcp_agent.server.settings import ServerSettings
from mcp_agent.sessions.repo import SessionRepo

if TYPE_CHECKING:
    from mcp_agent.proxy.hub import ToolHub
    from mcp_agent.server.runs import RunManager


@dataclass
class AppState:
    settings: ServerSettings
    repo: SessionRepo
    agents: dict[str, AgentManifest]
    servers: dict[str, ServerConfig]
    notifier: Notifier
    task_group: TaskGroup
    hub: ToolHub | None = None
    runs: RunManager | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def app_state(ctx: Context) -> AppState:
    # One look-up of the request: each of Context's properties costs microseconds (pydantic's
    # private attributes), on every tool call.
    request = ctx.request_context
    state = request.lifespan_context
    assert isinstance(state, AppState)
    # Every request tells us about its connection, so legacy clients get list changes.
    state.notifier.remember(request.session, request.protocol_version)
    return state


def open_repo(settings: ServerSettings) -> SessionRepo:
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteSessionRepo(settings.db_path, durability=settings.durability)  # type: ignore[arg-type]


@asynccontextmanager
async def open_state(
    settings: ServerSettings, bus: SubscriptionBus | None
) -> AsyncIterator[AppState]:
    """The repo, manifests, notifier and task group (without tool hub and runs: see app.open_app)."""
    manifests = settings.manifests_dir or shipped_manifests_dir()
    agents = load_agents(manifests)
    servers = load_servers(manifests)
    repo = open_repo(settings)
    notifier = Notifier(bus)
    repo.listeners.append(notifier.session_changed)
    try:
        async with anyio.create_task_group() as group:
            state = AppState(settings, repo, agents, servers, notifier, group)
            group.start_soon(notifier.run)
            yield state
            group.cancel_scope.cancel()
    finally:
        repo.close()
