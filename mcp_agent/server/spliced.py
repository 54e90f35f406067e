"""Answers whose structured content goes to the wire as the JSON text the server already has.

A long answer (a whole context, a page of entries) is built from the entries' stored JSON
texts. Handed to the SDK as Python values it is parsed, then checked and dumped three times
on its way out (the tool result, the protocol's result check, the JSON-RPC line): for a
1 MB context that is most of the server's time. On a transport that splices, the tool hands
the text over in its result's ``_meta`` instead, with a structured content of the answer's
small fields only (the SDK still checks those against the output schema); the transport's
write stream puts the text in as the structured content when it writes the line. The
client receives the same message either way.

Only a connection served by ``splicing`` (ours over stdio) gets such results; any other
(HTTP, an in-process client) gets every result whole, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Self, cast

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCMessage, JSONRPCResponse
from pydantic_core import to_json

# The key in a result's _meta that holds its structured content as JSON text, on its way to
# the splicing write stream (which takes it out again: a client never sees it).
KEY = "mcp-agent-sessions/structuredContent"

_splicing: ContextVar[MCPServer | None] = ContextVar("splicing", default=None)


@contextmanager
def splicing(server: MCPServer) -> Iterator[None]:
    """Within: requests to ``server`` are answered over a write stream that splices (see
    ``SplicingStream``)."""
    token = _splicing.set(server)
    try:
        yield
    finally:
        _splicing.reset(token)


def wanted(ctx: Context) -> bool:
    """Whether the request behind ``ctx`` is answered through a splicing write stream: the
    server it came to is the one being served so (a server called in process from inside a
    handler, with the same context variables, is not)."""
    return _splicing.get() is ctx.mcp_server


def usable(text: str) -> bool:
    """Whether ``text`` can go into a JSON-RPC line as it is: stored JSON is compact, so a
    line break in it would mean a row that is not what the server wrote."""
    return "\n" not in text and "\r" not in text


class _Rendered:
    """A JSON-RPC message already written out, where the transport expects a model."""

    def __init__(self, text: str) -> None:
        self.text = text

    def model_dump_json(self, **_: Any) -> str:
        return self.text


def spliced(item: SessionMessage) -> SessionMessage:
    """``item`` as it goes to the wire: a response carrying its structured content as text
    (``KEY`` in its ``_meta``) is written out with that text in place."""
    message = item.message
    if not isinstance(message, JSONRPCResponse):
        return item
    meta = message.result.get("_meta")
    if not isinstance(meta, dict) or not isinstance(meta.get(KEY), str):
        return item
    result = {k: v for k, v in message.result.items() if k not in ("_meta", "structuredContent")}
    rest = {k: v for k, v in meta.items() if k != KEY}
    if rest:
        result["_meta"] = rest
    if "structuredContent" not in message.result:  # a result shape that does not carry it
        return SessionMessage(message.model_copy(update={"result": result}), item.metadata)
    head = to_json(result).decode()
    body = f'{head[:-1]}{"," if result else ""}"structuredContent":{meta[KEY]}}}'
    line = f'{{"jsonrpc":"2.0","id":{to_json(message.id).decode()},"result":{body}}}'
    return SessionMessage(cast(JSONRPCMessage, _Rendered(line)), item.metadata)


class WrappedStream:
    """A transport's stream with a few methods of its own; everything else (closing, the
    sender's context) is the wrapped stream's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return cast("bool | None", await self._inner.__aexit__(*exc))


class SplicingStream(WrappedStream):
    """A transport's write stream, with each message passed through ``spliced`` first (in
    the sender's task, so messages keep their order)."""

    async def send(self, item: SessionMessage) -> None:
        await self._inner.send(spliced(item))
