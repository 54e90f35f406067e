"""Who is asking: the client a request comes from, for the limits kept per client (runs) and
for taking turns at the database's worker threads, and where it may be asked back (sampling)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp_agent.blocking import WORK_OWNER
from mcp_agent.providers.sampling import ClientChannel

# Requests of one client (a stdio client, a 2025 HTTP session) under way at once: each holds a
# task, and then its answer until the client reads it, so a client that writes requests
# without reading answers (100,000 of them took 600 MB over stdio), or drops each call's
# stream and sends another (over HTTP a dropped stream is no cancel: its call goes on), would
# grow the server without end. Past the bound a request is refused at once (over stdio that
# refusal is written before the next line is read, so a client that reads nothing stops the
# reading too).
MAX_IN_FLIGHT = 1000

# Where an HTTP request's scope holds its AnswerStream (each request of a 2025 session has one).
ANSWER_STREAM = "mcp_agent.answer_stream"


@dataclass
class AnswerStream:
    """Whether a request's answer stream is open: until the request is answered, its POST's
    stream or one that took that one's place (a resume with Last-Event-ID, which carries the
    rest of the request's messages: MCP puts a server's requests that relate to a call on the
    call's stream). The SDK drops what is sent on a stream its client closed (a disconnect,
    which is no cancel) and no resume has replaced yet, so a request of ours sent then would
    wait for the client to come back for it."""

    answered: bool = False
    # Whether a stream of the request is open now (None: while it is not answered).
    on_stream: Callable[[], bool] | None = None
    # Whether the request's connection has its GET stream open, where requests go while no
    # stream of the request is, and how long they wait for either (``ClientChannel``).
    listening: Callable[[], bool] | None = None
    listen_wait: float = 30.0

    def is_open(self) -> bool:
        return not self.answered and (self.on_stream is None or self.on_stream())


def client_channel(request: ServerRequestContext[Any, Any], waited: bool) -> ClientChannel:
    """Where a run of ``request`` asks the client's model: on the request's own stream while
    the request waits for the run (``waited``) and the stream is open, else on the
    connection's."""
    scope = getattr(request.request, "scope", None)
    stream = scope.get(ANSWER_STREAM) if isinstance(scope, dict) else None
    if not isinstance(stream, AnswerStream):
        return ClientChannel(request.session, request.request_id if waited else None)
    return ClientChannel(
        request.session,
        request.request_id if waited else None,
        stream.is_open,
        stream.listening,
        stream.listen_wait,
    )


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
