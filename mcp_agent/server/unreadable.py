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
  request that is JSON but not valid Unicode, -32600 saying what is wrong with JSON that is no
  JSON-RPC message (``message_problem``), -32700 (id null) for a line that is no JSON at all,
  and for one that is not UTF-8 (``undecodable_answer``: refused as the reader meets it, never
  read with U+FFFD in place of its bytes).
  A request whose id is neither a string nor an integer (1.5, true, null) is worse: the SDK
  reads it as a notification (its model ignores the id) and nothing ever answers it; it gets
  -32600 too. Over HTTP, ``refused_body`` gives the same refusals where the SDK's say only
  "Body must be a single JSON-RPC request or notification object", or hand over pydantic's
  raw report as invalid params, or take such a request for a notification (202).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
)
from mcp_types.methods import (
    SPEC_CLIENT_METHODS,
    SPEC_CLIENT_NOTIFICATION_METHODS,
    validate_client_notification,
    validate_client_request,
)
from pydantic import ValidationError
from starlette.responses import JSONResponse

from mcp_agent.pipes import DroppedLine
from mcp_agent.server.strict import ECHO_CHARS, MAX_ERRORS
from mcp_agent.sessions.entries import clip_long
from mcp_agent.streams import WrappedStream
from mcp_agent.wire import (
    SURROGATE,
    SURROGATE_ESCAPE,
    json_kind,
    lone_surrogate,
    validation_problems,
)

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


def _method(method: str) -> str:
    """A request's method as an answer or a log line names it: printable, and cut short (a
    client may send megabytes of text as a method)."""
    return clip_long(_printable(method), ECHO_CHARS)


def surrogate_message(path: str, char: str) -> str:
    # A client's key is in the path, and a key may be megabytes long.
    path = clip_long(path, _PROBLEM_CHARS)
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
        message = f"{_method(ctx.method)}: {surrogate_message(*found)}"
        if ctx.request_id is None:
            log.warning("a notification was dropped: %s", message)
            return None
        raise MCPError(INVALID_PARAMS, message)


# What the SDK says, and nothing more, to params it refuses and to a request before the
# connection is initialized.
SDK_INVALID_PARAMS = "Invalid request parameters"


def not_initialized_message(method: str) -> str:
    return (
        f"{_method(method)}: the connection is not initialized: send initialize first "
        "(then notifications/initialized); only ping may come before it"
    )


class DescribedParams(ServerMiddleware[Any]):
    """Says what is wrong with a request's params: the SDK refuses params that fail its check
    (a tool's name that is not a string, arguments that are no object) with "Invalid request
    parameters" and nothing more, which leaves a client's author, or an LLM, guessing. Only
    params that fail that same check again are described (a ValidationError from a handler is
    the server's own, and keeps the SDK's answer), in a bounded message: the first few
    problems, each path cut short (a client's keys are in it). The SDK gives the same words
    to a request sent before ``initialize`` (whose params may be right): that one is told to
    initialize first, as over HTTP."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await call_next(ctx)
        except MCPError as error:
            refused = error.error
            if refused.code == METHOD_NOT_FOUND and isinstance(refused.data, str):
                # The SDK repeats the method whole: megabytes, for a client that sent them.
                if len(refused.data) > ECHO_CHARS:
                    raise MCPError(
                        METHOD_NOT_FOUND, refused.message, _method(refused.data)
                    ) from None
                raise
            if (
                ctx.session.client_params is None
                and refused.code == INVALID_PARAMS
                and (refused.message, refused.data) == (SDK_INVALID_PARAMS, "")
            ):
                raise MCPError(INVALID_PARAMS, not_initialized_message(ctx.method)) from None
            raise
        except ValidationError:
            if ctx.method not in SPEC_CLIENT_METHODS:
                raise
            try:
                validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
            except ValidationError as refused:
                message = f"{_method(ctx.method)}: {_described(refused, ctx.params)}"
                raise MCPError(INVALID_PARAMS, f"{SDK_INVALID_PARAMS}: {message}") from None
            except KeyError:  # a method this protocol version has not
                pass
            raise


class DescribedNotifications(ServerMiddleware[Any]):
    """Drops a notification whose params MCP does not allow (a notifications/cancelled whose
    requestId is a list or a fraction, a reason that is no text) with one line that says
    what is wrong with them; the SDK said only "dropped 'notifications/cancelled': malformed
    params". A notification gets no answer: the line is for whoever reads the server's log."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.request_id is None and ctx.method in SPEC_CLIENT_NOTIFICATION_METHODS:
            try:
                validate_client_notification(ctx.method, ctx.protocol_version, ctx.params)
            except ValidationError as refused:
                log.warning(
                    "a %s notification was dropped: %s",
                    _method(ctx.method),
                    _described(refused, ctx.params),
                )
                return None
            except (KeyError, ValueError):  # not of this protocol version: the SDK's to say
                pass
        return await call_next(ctx)


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


def message_problem(message: Any) -> str | None:
    """What keeps ``message`` (parsed JSON) from being a JSON-RPC 2.0 message as MCP has them:
    the first thing found, said so that a client's author can mend it; None for a message of
    the right shape (whether its method and params are right is for the server to say)."""
    if isinstance(message, list):
        return (
            "a batch (a JSON array of messages) is not accepted: MCP has none since protocol "
            "2025-06-18, so send each message by itself"
        )
    if not isinstance(message, dict):
        return f"a JSON-RPC message is an object, not {json_kind(message)}"
    if message.get("jsonrpc") != "2.0":
        if "jsonrpc" not in message:
            return '"jsonrpc": "2.0" is missing'
        return f'"jsonrpc" must be "2.0", not {_shown(message["jsonrpc"])}'
    if "method" in message:
        if not isinstance(message["method"], str):
            return f'"method" must be a string, not {_shown(message["method"])}'
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return f'"params" must be an object (MCP names each parameter), not {json_kind(params)}'
        return _id_problem(message["id"]) if "id" in message else None
    if "result" in message:
        if not isinstance(message["result"], dict):
            return f'a response\'s "result" must be an object, not {json_kind(message["result"])}'
        return _id_problem(message.get("id"))
    if "error" in message:
        error = message["error"]
        if not (
            isinstance(error, dict)
            and _is_id(error.get("code"), strings=False)
            and isinstance(error.get("message"), str)
        ):
            return 'an error response\'s "error" must be an object with an integer "code" and a string "message"'
        return None if message.get("id") is None else _id_problem(message["id"])
    return _SHAPE


def _id_problem(value: Any) -> str | None:
    if _is_id(value):
        return None
    if value is None:
        return '"id" must be a string or an integer, not null (a notification has no "id" at all)'
    return f'"id" must be a string or an integer, not {_shown(value)}'


def _is_id(value: Any, strings: bool = True) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        strings and isinstance(value, str)
    )


def _shown(value: Any) -> str:
    """``value`` (parsed JSON) as a refusal quotes it: a scalar as JSON, cut short; a
    container by its type alone."""
    if isinstance(value, dict | list):
        return json_kind(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "a number beyond a 64-bit float"
    return clip_long(json.dumps(value), ECHO_CHARS)


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
        reason = str(details[0]["msg"]).removeprefix("Invalid JSON: ")
        try:
            parsed = json.loads(given)
        except (ValueError, RecursionError):
            return _error(None, PARSE_ERROR, f"Parse error: {reason}")
        return _surrogate_answer(parsed, reason)
    # pydantic reports each model of the union apart, at the field that failed; the whole
    # message is the input of an error about the message itself (not an object, or a key
    # missing), which one of them has unless every key each model needs is there.
    for detail in details:
        if len(detail["loc"]) == 1 or (len(detail["loc"]) == 2 and detail["type"] == "missing"):
            whole = detail["input"]
            return _invalid_request(whole, message_problem(whole) or _SHAPE)
    return _invalid_request(None, _SHAPE)


def undecodable_answer(error: UnicodeDecodeError) -> JSONRPCError:
    """The answer to a stdio line that is not UTF-8 (``error`` says where): a parse error,
    with no id, as JSON-RPC has it for a message that cannot be read."""
    log.warning("a message that is not UTF-8 was refused: %s", error.reason)
    return _error(
        None,
        PARSE_ERROR,
        f"Parse error: the message is not valid UTF-8 (byte 0x{error.object[error.start]:02x}"
        f" at offset {error.start:,}: {error.reason}); every message must be UTF-8 text",
    )


def body_request_id(body: bytes, requests_only: bool = False) -> int | str | None:
    """The id of the request in an HTTP ``body``, if it has one an answer can carry back
    (``requests_only``: None for a client's answer to a request of the server's, whose id is
    the server's)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if requests_only and not (isinstance(message, dict) and "method" in message):
        return None
    return _request_id(message)


def refused_body(body: bytes) -> JSONRPCError | None:
    """The refusal (-32600, with the request's id where it has a usable one) of an HTTP
    request's ``body`` that is JSON but not a JSON-RPC message (``message_problem``); None
    when it is one, or is no JSON at all (the SDK's parse error stands)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    why = message_problem(parsed)
    if why is None:
        return None
    return _error(_request_id(parsed), INVALID_REQUEST, f"Invalid Request: {why}")


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


def _surrogate_answer(message: Any, reason: str | None = None) -> JSONRPCError | None:
    """The answer to JSON that pydantic's parser refused (saying ``reason``) and the standard
    library's read: a lone surrogate somewhere, or what else pydantic's refuses (JSON nested
    deeper than it reads)."""
    if not isinstance(message, dict):
        found = unpaired_surrogate(message, "message")
        if found is None:
            return _parse_error(reason)
        return _error(None, INVALID_REQUEST, f"Invalid Request: {surrogate_message(*found)}")
    params = unpaired_surrogate(message.get("params"))
    if params is not None and isinstance(message.get("method"), str):
        request_id = _request_id(message)
        method = _method(message["method"])
        if request_id is None:
            return _invalid_request(message, f"{method}: {surrogate_message(*params)}")
        return _error(request_id, INVALID_PARAMS, f"{method}: {surrogate_message(*params)}")
    found = unpaired_surrogate(message, "message")
    if found is None:
        return _parse_error(reason)
    return _invalid_request(message, surrogate_message(*found))


def _parse_error(reason: str | None) -> JSONRPCError:
    """The answer to what only the standard library's parser reads, but for a surrogate:
    pydantic's ``reason`` (JSON nested deeper than it reads), as the HTTP transport says it.
    Said as a bare "Parse error" over stdio, JSON nested 300 levels deep gave no hint why."""
    return _error(None, PARSE_ERROR, f"Parse error: {reason}" if reason else "Parse error")


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


def error_response(
    status: int,
    message: str,
    code: int = INVALID_REQUEST,
    request_id: int | str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An HTTP answer at ``status`` that is a JSON-RPC error: its message is what MCP clients
    show of a refusal (of a body of another shape the Python SDK's showed only "Server
    returned an error response")."""
    error = {"code": code, "message": message}
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return JSONResponse(body, status_code=status, headers=headers)


def dropped_request_id(line: DroppedLine) -> int | str | None:
    """The id of the request on a line too long to read, when its edges say it and it is one
    an answer can carry back."""
    return _request_id({"id": line.request_id()})


def dropped_answer(line: DroppedLine) -> JSONRPCError | None:
    """The refusal of a request on a line too long to read, or None when its id cannot be
    found in its edges (a notification has none, and gets no answer)."""
    request_id = dropped_request_id(line)
    log.error(
        "a message of over %s bytes from the client was dropped%s",
        f"{line.limit:,}",
        "" if request_id is None else f" (request {request_id!r}, refused)",
    )
    if request_id is None:
        return None
    return _error(
        request_id,
        INVALID_REQUEST,
        f"Invalid Request: the message is over {line.limit:,} bytes, the most this server reads"
        " on one line, and was not read (a session file that large can be imported with the"
        " command line: mcp-agent-sessions sessions import FILE)",
    )


class AnsweringStream(WrappedStream):
    """A transport's read stream that answers, on ``write_stream``, each line the transport
    could not read (see ``unreadable_answer``) instead of passing the error on to be dropped.

    Given ``lines``, the lines the transport read and has not yet been matched to what it made
    of them (one item on the read stream per line, in order), it also answers a request the
    SDK took for a notification because its id is not one MCP allows; such a request is not
    passed on. Everything else (messages, the sender's context) passes through unchanged."""

    def __init__(self, inner: Any, write_stream: Any, lines: deque[str] | None = None) -> None:
        super().__init__(inner)
        self._write = write_stream
        self._lines = lines

    def __aiter__(self) -> AnsweringStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.__anext__()
            line = self._lines.popleft() if self._lines else None
            if isinstance(item, Exception):
                answer = unreadable_answer(item)
            elif isinstance(item.message, JSONRPCNotification) and line is not None:
                answer = _notification_with_id(item.message, line)
            else:
                return item
            if answer is not None:
                log.info("answered a message the server could not read: %s", answer.error.message)
                await self._write.send(SessionMessage(answer))
            elif not isinstance(item, Exception):
                return item

    async def receive(self) -> SessionMessage | Exception:
        return await self.__anext__()


def _notification_with_id(message: JSONRPCNotification, line: str) -> JSONRPCError | None:
    """The refusal of ``line``, read as the notification ``message``, when it is a request
    whose id the SDK could not take (the notification's model drops it); None for a true
    notification (a line with no "id" is not parsed again)."""
    if '"id"' not in line:
        return None
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(parsed, dict) and "id" in parsed and parsed.get("method") == message.method):
        return None  # not the line this message was read from
    why = message_problem(parsed)
    return None if why is None else _error(None, INVALID_REQUEST, f"Invalid Request: {why}")
