"""Answers whose structured content goes to the wire as the JSON text the server already has.

A long answer (a whole context, a page of entries) is built from the entries' stored JSON
texts. Handed to the SDK as Python values it is parsed, then checked and dumped three times
on its way out (the tool result, the protocol's result check, the JSON-RPC line): for a
1 MB context that is most of the server's time. On a transport that splices, the tool hands
the text over in its result's ``_meta`` instead, with a structured content of the answer's
small fields only (the SDK still checks those against the output schema); the transport's
write stream puts the text in as the structured content when it writes the line. The
client receives the same message either way.

Only a connection served by ``splicing`` (ours over stdio) and a request of the 2026 protocol
over streamable HTTP (``SplicingHttp``, which rewrites the response body) get such results; any
other (the 2025 HTTP sessions, an in-process client) gets every result whole, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.shared.message import SessionMessage
from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError, JSONRPCMessage, JSONRPCResponse
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic_core import from_json, to_json
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_agent.server.unreadable import body_request_id
from mcp_agent.streams import WrappedStream

log = logging.getLogger(__name__)

# The key in a result's _meta that holds its structured content as JSON text, on its way to
# the splicing write stream (which takes it out again: a client never sees it).
KEY = "mcp-agent-sessions/structuredContent"

_splicing: ContextVar[MCPServer | None] = ContextVar("splicing", default=None)


class HttpAnswer:
    """The structured contents (JSON texts) of one HTTP request's answer, by the token its
    result's ``_meta`` carries in their place: the text itself would be escaped into a JSON
    string, and dumped, by the SDK."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.texts: dict[str, str] = {}


_http_answer: ContextVar[HttpAnswer | None] = ContextVar("http_answer", default=None)


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
    if _splicing.get() is ctx.mcp_server:
        return True
    answer = _http_answer.get()
    return answer is not None and answer.server is ctx.mcp_server


def carried(text: str) -> str:
    """What a spliced result's ``_meta`` holds under ``KEY`` for its structured content
    ``text``: over stdio the text; over HTTP a token for it, kept for ``SplicingHttp``."""
    answer = _http_answer.get()
    if answer is None or _splicing.get() is not None:
        return text
    token = f"splice-{len(answer.texts)}"
    answer.texts[token] = text
    return token


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
    if "structuredContent" not in message.result:  # a result shape that does not carry it
        result = _without_text(message.result, meta)
        return SessionMessage(message.model_copy(update={"result": result}), item.metadata)
    line = _line(message.id, message.result, meta, meta[KEY])
    return SessionMessage(cast(JSONRPCMessage, _Rendered(line)), item.metadata)


def _without_text(result: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """``result`` without its structured content and without ``KEY`` in its ``_meta``."""
    kept = {k: v for k, v in result.items() if k not in ("_meta", "structuredContent")}
    rest = {k: v for k, v in meta.items() if k != KEY}
    if rest:
        kept["_meta"] = rest
    return kept


def _line(message_id: Any, result: dict[str, Any], meta: dict[str, Any], text: str) -> str:
    """The JSON-RPC response ``message_id`` → ``result`` with ``text`` as its structured
    content and ``KEY`` gone from its ``_meta``."""
    kept = _without_text(result, meta)
    head = to_json(kept).decode()
    # Joined once: the text is most of the line (a megabyte for a whole context), and each
    # copy of it is a megabyte more to write, fresh memory the first time.
    return "".join(
        (
            '{"jsonrpc":"2.0","id":',
            to_json(message_id).decode(),
            ',"result":',
            head[:-1],
            "," if kept else "",
            '"structuredContent":',
            text,
            "}}",
        )
    )


class SplicingStream(WrappedStream):
    """A transport's write stream, with each message passed through ``spliced`` first (in
    the sender's task, so messages keep their order)."""

    async def send(self, item: SessionMessage) -> None:
        await self._inner.send(spliced(item))


# --- streamable HTTP ------------------------------------------------------------------------

_SSE_DATA = b"event: message\r\ndata: "
_SSE_END = b"\r\n\r\n"


def is_modern(scope: Scope) -> bool:
    """Whether the SDK answers this request on its 2026 path (``handle_modern_request``),
    which writes the response to this request's own ``send``: a protocol version header that
    is not one of the 2025 handshake's (the SDK's own test). The 2025 sessions run tools in
    tasks of their own, which never see the request's ``HttpAnswer``."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return False
    versions = [v for k, v in scope["headers"] if k == b"mcp-protocol-version"]
    return bool(versions) and versions[0].decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS


class SplicingHttp:
    """Streamable HTTP's side of splicing: a 2026 request's tools may hand their structured
    content over as text (``carried``), and this puts the text into the response body, as
    ``SplicingStream`` does into a stdio line. The body is a JSON reply (its length header
    set anew) or, once the reply went over to an event stream, the stream's last event."""

    def __init__(self, app: ASGIApp, server: MCPServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_modern(scope):
            await self.app(scope, receive, send)
            return
        answer = HttpAnswer(self.server)
        held: list[Message] = []

        async def splice(message: Message) -> None:
            if not answer.texts and not held:
                await send(message)
            elif message["type"] == "http.response.start":
                if is_event_stream(message):
                    await send(message)
                else:
                    held.append(message)  # until the body shows its length
            elif message["type"] != "http.response.body":
                await send(message)
            elif held:
                held.append(message)
                if not message.get("more_body", False):
                    body = b"".join(m.get("body", b"") for m in held[1:])
                    start, body = held[0], _spliced_body(body, answer)
                    held.clear()
                    headers = [(k, v) for k, v in start["headers"] if k != b"content-length"]
                    headers.append((b"content-length", str(len(body)).encode()))
                    await send({**start, "headers": headers})
                    await send({"type": "http.response.body", "body": body})
            else:
                body = message.get("body", b"")
                if body.startswith(_SSE_DATA) and body.endswith(_SSE_END):
                    data = _spliced_body(body[len(_SSE_DATA) : -len(_SSE_END)], answer)
                    message = {**message, "body": _SSE_DATA + data + _SSE_END}
                await send(message)

        token = _http_answer.set(answer)
        try:
            await self.app(scope, receive, splice)
        finally:
            _http_answer.reset(token)
            if answer.texts:  # a reply shaped otherwise than the SDK's, or never written
                log.warning("%d answers were not spliced into their reply", len(answer.texts))
            # Tasks started by this request (an agent run) keep the context: not the texts.
            answer.texts.clear()


def is_event_stream(start: Message) -> bool:
    return any(
        k == b"content-type" and v.startswith(b"text/event-stream") for k, v in start["headers"]
    )


def _spliced_body(body: bytes, answer: HttpAnswer) -> bytes:
    """``body`` (a JSON-RPC message) with the structured content its result's ``_meta``
    names by token put in place; any other body as it is. A result that names a token that
    cannot be put in place becomes an internal error: sent as it is, it would carry the token
    for its structured content, which the client would take for the answer."""
    try:
        message = from_json(body)
    except ValueError:
        return _unspliced(body) if _KEY_BYTES in body else body
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or not isinstance(meta := result.get("_meta"), dict):
        return body
    token = meta.get(KEY)
    if token is None:
        return body
    if not isinstance(token, str) or token not in answer.texts:
        return _unspliced(body)
    text = answer.texts.pop(token)
    if "structuredContent" not in result:
        return to_json({**message, "result": _without_text(result, meta)})
    return _line(message.get("id"), result, meta, text).encode()


_KEY_BYTES = to_json(KEY)


def _unspliced(body: bytes) -> bytes:
    """The internal error answered in place of ``body``, a result whose structured content
    could not be put in place (with its id, when one can be read back)."""
    request_id = body_request_id(body)
    log.error(
        "an answer (to request %r) could not be spliced into its reply; an internal error was "
        "sent instead",
        request_id,
    )
    error = ErrorData(
        code=INTERNAL_ERROR, message="Internal error: the server could not write this answer"
    )
    return to_json(
        JSONRPCError(jsonrpc="2.0", id=request_id, error=error).model_dump(
            by_alias=True, exclude_unset=True
        )
    )
