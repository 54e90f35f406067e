"""Who is asking: the client a request comes from, for the limits kept per client (runs) and
for taking turns at the database's worker threads."""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp_agent.blocking import WORK_OWNER


def client_key(request: ServerRequestContext[Any, Any]) -> object:
    """On the 2025 handshake, the connection (a legacy HTTP session, a stdio client); on
    2026-07-28, where each request stands alone, the HTTP client's address, or this process's
    one client (stdio, in-process)."""
    if request.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        connection = getattr(request.session, "_connection", None)
        if connection is not None:
            return connection
    http = getattr(request.request, "client", None)
    if http is not None:
        return ("http", http.host)
    return "local"


class ClientsTakeTurns(ServerMiddleware[Any]):
    """Makes each request's database work (and that of a run it starts) its client's, so that
    one client's flood of work waits in a line of its own (``WorkerThreads``)."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        token = WORK_OWNER.set(client_key(ctx))
        try:
            return await call_next(ctx)
        finally:
            WORK_OWNER.reset(token)
