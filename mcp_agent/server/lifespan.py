"""What a tool or resource handler reaches through its request context: the application
(runtime) and the server's notification fan-out."""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.mcpserver import Context

from mcp_agent.runtime.application import AppState
from mcp_agent.server.notify import Notifier


@dataclass
class ServerState:
    """The server lifespan's context."""

    app: AppState
    notifier: Notifier


def server_state(ctx: Context) -> ServerState:
    # One look-up of the request: each of Context's properties costs microseconds (pydantic's
    # private attributes), on every tool call.
    request = ctx.request_context
    state = request.lifespan_context
    assert isinstance(state, ServerState)
    # Every request tells us about its connection, so legacy clients get list changes.
    state.notifier.remember(request.session, request.protocol_version)
    return state


def app_state(ctx: Context) -> AppState:
    return server_state(ctx).app
