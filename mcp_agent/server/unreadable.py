"""Requests the SDK cannot read, answered as JSON-RPC says instead of dropped.

Three things here:

- Params the SDK refuses: ``DescribedParams`` says what is wrong with them.
- A text that is not valid Unicode: JSON's grammar lets a string hold a lone surrogate escape
  (``"\\ud800"``), which names no character and cannot be stored, written as UTF-8 or sent
  back. pydantic's JSON parser (stdio and the legacy HTTP transport) refuses such a line;
  the standard library's (the 2026 HTTP transport) takes it, and an in-process client can
  pass one as a Python string. ``UnpairedSurrogates``, a server middleware, refuses every
  request whose params hold one, whatever its method, before any handler sees it; over stdio
  ``AnsweringStream`` (below), and in a 2025 HTTP session ``surrogate_body``, give the same
  refusal to what pydantic's parser could not read.
- A stdio line the SDK's transport cannot parse or validate: it hands the error to the
  message loop, which logs it at debug level and drops it, so the client waits for an answer
  that never comes. ``AnsweringStream`` answers it: -32602 naming the unpaired surrogate of a
  request that is JSON but not valid Unicode, -32600 for JSON that is no JSON-RPC message,
  -32700 (id null) for a line that is no JSON at all.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
)
from mcp_types.methods import SPEC_CLIENT_METHODS, validate_client_request
from pydantic import ValidationError

from mcp_agent.server.spliced import WrappedStream
from mcp_agent.server.strict import MAX_ERRORS
from mcp_agent.sessions.entries import clip_long
from mcp_agent.wire import SURROGATE, SURROGATE_ESCAPE, lone_surrogate, validation_problems

log = logging.getLogger(__name__)


def unpaired_surrogate(value: Any, where: str = "params") -> tuple[str, str] | None:
    """Where in ``value`` (a parsed JSON value) the first lone surrogate is, and which one:
    a dict key or a string holding a code point from U+D800 to U+DFFF. A pair of surrogate
    escapes in JSON text parses into one character, so any left over was unpaired."""
    if lone_surrogate(value) is None:  # every request passes here: no paths built for it
        return None
    for path, text in _strings(value, where):
        if not text.isascii():  # constant time; the search below only for other text
            found = SURROGATE.search(text)
            if found is not None:
                return path, found.group()
    return None


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    pending: list[tuple[str, Any]] = [(where, value)]
    while pending:
        path, node = pending.pop()
        if isinstance(node, str):
            yield path, node
        elif isinstance(node, dict):
            for key, item in node.items():
                key_path = f"{path}.{_printable(key) if isinstance(key, str) else key}"
                if isinstance(key, str):
                    yield f"{key_path} (the key)", key
                pending.append((key_path, item))
        elif isinstance(node, list | tuple):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(node))


def _printable(text: str) -> str:
    """``text`` with its surrogates written as escapes (so a message can hold it)."""
    return SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def surrogate_message(path: str, char: str) -> str:
    return (
        f"{path} holds an unpaired surrogate (\\u{ord(char):04x}), which is not valid Unicode: "
        "every string must be valid UTF-8 text (a surrogate escape only as half of a pair)"
    )


class UnpairedSurrogates(ServerMiddleware[Any]):
    """Refuses (invalid params) a request whose params hold a lone surrogate, before the
    SDK or a handler looks at them; drops such a notification (with a warning)."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        found = unpaired_surrogate(ctx.params) if ctx.params else None
        if found is None:
            return await call_next(ctx)
        message = f"{_printable(ctx.method)}: {surrogate_message(*found)}"
        if ctx.request_id is None:
            log.warning("a notification was dropped: %s", message)
            return None
        raise MCPError(INVALID_PARAMS, message)


class DescribedParams(ServerMiddleware[Any]):
    """Says what is wrong with a request's params: the SDK refuses params that fail its check
    (a tool's name that is not a string, arguments that are no object) with "Invalid request
    parameters" and nothing more, which leaves a client's author, or an LLM, guessing. Only
    params that fail that same check again are described (a ValidationError from a handler is
    the server's own, and keeps the SDK's answer), in a bounded message: the first few
    problems, each path cut short (a client's keys are in it)."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await call_next(ctx)
        except ValidationError:
            if ctx.method not in SPEC_CLIENT_METHODS:
                raise
            try:
                validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
            except ValidationError as refused:
                message = f"{_printable(ctx.method)}: {_described(refused, ctx.params)}"
                raise MCPError(INVALID_PARAMS, f"Invalid request parameters: {message}") from None
            except KeyError:  # a method this protocol version has not
                pass
            raise


# The longest a refusal says about each problem (a client's keys are in the paths).
_PROBLEM_CHARS = 200


def _described(error: ValidationError, params: Any) -> str:
    # The SDK checks the request as a whole ({"method", "params"}): paths start at params.
    problems = validation_problems(error, data={"params": params})
    shown = [clip_long(problem, _PROBLEM_CHARS) for problem in problems[:MAX_ERRORS]]
    more = len(problems) - MAX_ERRORS
    return _printable("; ".join(shown) + (f" (and {more} more)" if more > 0 else ""))


# --- stdio lines the SDK's transport could not read -------------------------------------------

_SHAPE = (
    'a JSON-RPC 2.0 message is an object with "jsonrpc": "2.0" and either a "method" (a '
    'request, with an "id", or a notification) or a "result" or "error" (a response)'
)


def unreadable_answer(error: Exception) -> JSONRPCError | None:
    """The answer to a line the SDK's stdio transport failed to read with ``error`` (what it
    puts on the read stream in place of a message); None when none is due: a blank line, or
    what JSON-RPC never answers (a notification, a response)."""
    details = error.errors(include_url=False) if isinstance(error, ValidationError) else []
    if not details:
        return _error(None, PARSE_ERROR, "Parse error")
    given = details[0]["input"]
    if details[0]["type"] == "json_invalid":
        if isinstance(given, str | bytes) and not given.strip():
            return None
        try:
            parsed = json.loads(given)
        except (ValueError, RecursionError):
            reason = str(details[0]["msg"]).removeprefix("Invalid JSON: ")
            return _error(None, PARSE_ERROR, f"Parse error: {reason}")
        return _surrogate_answer(parsed)
    return _invalid_request(given, _SHAPE)


# ``wire.SURROGATE_ESCAPE`` in bytes: a lone one is what pydantic's parser refuses.
_SURROGATE_ESCAPE = re.compile(SURROGATE_ESCAPE.pattern.encode())


def surrogate_body(body: bytes) -> tuple[bool, JSONRPCError | None]:
    """Whether ``body`` (an HTTP request's, on the legacy transport, which parses it with
    pydantic) is a JSON message holding a lone surrogate escape, and the answer due to it
    (None: none, a notification or a response, dropped with a warning). The SDK would say
    only "Parse error" about a bad hex escape, with no id to match the answer to."""
    if b"\\u" not in body or not _SURROGATE_ESCAPE.search(body):
        return False, None
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if unpaired_surrogate(parsed, "message") is None:  # pairs only: the SDK reads it
        return False, None
    return True, _surrogate_answer(parsed)


def _surrogate_answer(message: Any) -> JSONRPCError | None:
    """The answer to JSON that pydantic's parser refused and the standard library's read:
    a lone surrogate somewhere."""
    if not isinstance(message, dict):
        found = unpaired_surrogate(message, "message")
        what = surrogate_message(*found) if found else "not JSON"
        return _error(None, INVALID_REQUEST, f"Invalid Request: {what}")
    params = unpaired_surrogate(message.get("params"))
    if params is not None and isinstance(message.get("method"), str):
        request_id = _request_id(message)
        method = _printable(message["method"])
        if request_id is None:
            return _invalid_request(message, f"{method}: {surrogate_message(*params)}")
        return _error(request_id, INVALID_PARAMS, f"{method}: {surrogate_message(*params)}")
    found = unpaired_surrogate(message, "message")
    if found is None:  # what else only the standard library reads
        return _error(None, PARSE_ERROR, "Parse error")
    return _invalid_request(message, surrogate_message(*found))


def _invalid_request(message: Any, why: str) -> JSONRPCError | None:
    if isinstance(message, dict) and "id" not in message and "method" in message:
        log.warning("a notification the server cannot read was dropped: %s", why)
        return None
    if (
        isinstance(message, dict)
        and "method" not in message
        and message.keys()
        & {
            "result",
            "error",
        }
    ):
        log.warning("a response the server cannot read was dropped: %s", why)
        return None
    return _error(_request_id(message), INVALID_REQUEST, f"Invalid Request: {why}")


def _request_id(message: Any) -> int | str | None:
    """The message's id, if it is one the answer can carry back."""
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    if isinstance(request_id, str) and unpaired_surrogate(request_id) is not None:
        return None
    return request_id


def _error(request_id: int | str | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


class AnsweringStream(WrappedStream):
    """A transport's read stream that answers, on ``write_stream``, each line the transport
    could not read (see ``unreadable_answer``) instead of passing the error on to be dropped.
    Everything else (messages, the sender's context) passes through unchanged."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        super().__init__(inner)
        self._write = write_stream

    def __aiter__(self) -> AnsweringStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.__anext__()
            if not isinstance(item, Exception):
                return item
            answer = unreadable_answer(item)
            if answer is not None:
                log.info("answered a message the server could not read: %s", answer.error.message)
                await self._write.send(SessionMessage(answer))

    async def receive(self) -> SessionMessage | Exception:
        return await self.__anext__()
