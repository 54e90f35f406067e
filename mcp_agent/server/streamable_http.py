"""Streamable HTTP: the SDK's ASGI app with our limits and answers, behind the bearer-token
check (``http_auth``), served by uvicorn."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import anyio
from mcp.server import MCPServer
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import (
    CONTENT_TYPE_JSON,
    GET_STREAM_KEY,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import (
    RequestBodyLimitMiddleware,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic_core import from_json
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_agent.runtime.descriptors import connections_that_fit, descriptor_limit
from mcp_agent.runtime.settings import (
    MAX_HTTP_SESSIONS_ENV,
    ServerSettings,
    is_loopback,
)
from mcp_agent.server.clients import ANSWER_STREAM, MAX_IN_FLIGHT, AnswerStream
from mcp_agent.server.event_store import EventBudget, SessionEvents
from mcp_agent.server.http_auth import (
    WILDCARD_ADDRESSES,
    BearerTokenMiddleware,
    UnsafeBindError,
    check_bind,
)
from mcp_agent.server.http_connections import http_protocol
from mcp_agent.server.resumable import DEFERRED, RETRY_MS, ResumableTransport
from mcp_agent.server.spliced import SplicingHttp, is_modern
from mcp_agent.server.strict import ECHO_CHARS
from mcp_agent.server.unreadable import (
    body_request_id,
    error_response,
    refused_body,
    surrogate_body,
)
from mcp_agent.server.viewer.page import MCP_ENDPOINT, ViewerPage, not_the_endpoint
from mcp_agent.sessions.entries import clip_long

log = logging.getLogger(__name__)

PROTOCOL_VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)


# The SDK's refusal at its session limit: a 503 whose JSON-RPC error says only this.
SDK_SESSION_LIMIT_MESSAGE = b"Too many open sessions"
SDK_BODY_LIMIT_MESSAGE = b"Request body too large"
SDK_NO_SESSION_MESSAGE = b'"Session not found"'
# The SDK's 2025 transport's refusals of a method it does not take and of a request of no
# session: JSON-RPC errors that say no more than these words.
SDK_METHOD_MESSAGE = b'"message":"Method Not Allowed"'
SDK_MISSING_SESSION_MESSAGE = b'"message":"Bad Request: Missing session ID"'
# A POST's body, put in its scope once read, for ``SdkRefusals`` to echo the request's id in a
# refusal of the SDK's (parsed only then: a body may be megabytes).
REQUEST_BODY = "mcp_agent.request_body"


def no_session_message(scope: Scope, settings: ServerSettings) -> str:
    """What a client whose session this server no longer has (or never had) is told: a
    client shows this, and "Session not found" alone gave no hint that a new one is made by
    initializing again, nor why it went."""
    idle = settings.http_session_idle_timeout
    closes = [f"after {idle:g} s without a request" if idle else "", "when the server restarts"]
    if settings.max_http_sessions:
        closes.insert(1, "when a new client needs room (the one idle the longest)")
    return (
        f"Session not found: this server has no HTTP session {_quoted(scope, b'mcp-session-id')}"
        f" (it closes a session {', '.join(c for c in closes if c)}, or when the client ends"
        " it): initialize again, without an Mcp-Session-Id header, for a new session"
    )


def session_limit_message(settings: ServerSettings) -> str:
    text = (
        f"Too many open sessions: this server holds at most {settings.max_http_sessions} HTTP "
        f"sessions at once (--max-http-sessions or {MAX_HTTP_SESSIONS_ENV}; restart the server "
        "with a higher value to allow more)"
    )
    if settings.http_session_idle_timeout:
        text += (
            ", and each of them has a request or an event stream open right now (an idle one "
            "would have made room). Retry once a request ends."
        )
    else:
        text += (
            ". With --http-session-idle-timeout 0 sessions never expire and none is closed to "
            "make room."
        )
    return text + " A client that is done should end its session (HTTP DELETE)."


# Tools that send nothing before their result and answer soon. A 2026 request calling one
# (without asking for progress) is answered on the SDK's JSON-response path: one JSON body,
# as the SDK's own event-stream path answers a call done within its deferral window anyway,
# but without that path's task group, stream and timer (about 0.2 ms of CPU per call, in
# process). Every other request keeps the event-stream path, which can carry notifications,
# keeps a slow call's connection alive with pings, and cancels the call when the client
# goes: so does a search (``session_list`` with a query: its first one indexes the text
# stored since) and the whole tree (``session_get`` view tree), which can take long. A write
# that waits out another process's lock still answers, or says busy, within the lock's
# timeout.
PLAIN_TOOLS = frozenset(
    {
        "session_create",
        "session_list",
        "session_get",
        "session_delete",
        "session_append",
        "session_context",
        "session_stats",
    }
)
# The largest body looked into (a plain call is a few hundred bytes; an append's entry may be
# megabytes, and the SDK parses the body again).
PLAIN_BODY_BYTES = 16 * 1024


def plain_call(body: bytes) -> bool:
    """Whether ``body`` is a JSON-RPC call of one of ``PLAIN_TOOLS`` that asks for no
    progress and is not a search or the whole tree."""
    if len(body) > PLAIN_BODY_BYTES or b'"tools/call"' not in body:
        return False
    try:
        message = from_json(body)
    except ValueError:
        return False
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    params = message.get("params")
    if not isinstance(params, dict):
        return False
    name = params.get("name")
    if not isinstance(name, str) or name not in PLAIN_TOOLS:
        return False
    meta = params.get("_meta")
    if isinstance(meta, dict) and "progressToken" in meta:
        return False
    arguments = params.get("arguments")
    if not isinstance(arguments, dict):
        return True  # refused as the other path would refuse it, straight away
    if name == "session_list":
        return not arguments.get("query")
    return not (name == "session_get" and arguments.get("view") == "tree")


# Tools that may take long and send before their answer: they run a model (progress while
# the client waits, a request for the client's model on the call's own event stream) or wait
# for a run to end (progress beats). A 2025 session's call of one opens its event stream at
# once, so a 2025-11-25 client can resume it from its start.
STREAMING_TOOLS = frozenset({"agent_run", "agent_status", "session_compact", "session_move_to"})
# Every other tool of the server: it answers soon and sends nothing to the client before. A
# 2025 session's call of one, or a read of a resource, is answered as one JSON body when its
# answer comes before its event stream's first ping (``json_answers``): the Python SDK's
# client refuses an event over 1 MiB, and a whole session read (``limit=0``) is up to 8 MiB.
QUIET_TOOLS = frozenset(
    {
        *PLAIN_TOOLS,
        "session_search",  # a search: as session_list with a query, kept off the plain path
        "session_export",
        "session_fork",
        "session_import",
        "agent_cancel",
        "agent_steer",
        "agent_follow_up",
        "agent_runs",
        "agent_list",
    }
)


def quiet_request(body: bytes) -> bool:
    """Whether ``body`` is a JSON-RPC request that gets its answer before anything else: a
    call of one of ``QUIET_TOOLS`` (asking for progress or not: none is sent), or a read of a
    resource."""
    if len(body) > PLAIN_BODY_BYTES:
        return False
    try:
        message = from_json(body)
    except ValueError:
        return False
    if not isinstance(message, dict):
        return False
    if message.get("method") == "resources/read":
        return True
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return message.get("method") == "tools/call" and isinstance(name, str) and name in QUIET_TOOLS


class EvictingSessionManager(StreamableHTTPSessionManager):
    """At the session limit, closes the session idle the longest to admit a new one, so sessions
    that clients opened and abandoned never lock new clients out. A session with a request in
    flight or an open event stream is never closed this way; only when every session is busy is
    a new one refused. A client whose idle session was closed gets 404 on its next request and,
    as the MCP spec asks of it, initializes again.

    Idleness is read from the SDK's idle-timeout scope (its deadline is infinite while a request
    is in flight, and the end of the last request plus the timeout once none is), so this needs
    an idle timeout; without one it refuses at the limit as the SDK does.

    It also answers plain calls (``PLAIN_TOOLS``) as JSON."""

    # Set on a named replica: its legacy session ids begin with "NAME.", so that a load
    # balancer can send every request of a session to the replica that holds it.
    session_prefix = ""
    # How long a request for the client's model waits for a GET stream to go on.
    client_stream_wait = 30.0
    # How long an event stream whose client reads nothing holds up its session's messages.
    stalled_send_timeout = 5.0
    # The ids of each 2025 session's requests under way, as text (made on first use: the
    # SDK's manager is turned into this class, not built as one).
    _ids_in_flight: dict[str, set[str]] | None = None
    # What every session's event streams keep for a client that reconnects (made on first use).
    _event_budget: EventBudget | None = None

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        # Reached only by a request that opens a session (``_opens_session``): one the SDK
        # would refuse never costs an idle client its session.
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            self._close_longest_idle()
        transport = super()._admit_session(requestor)
        if transport is None:
            return None
        if self._event_budget is None:
            self._event_budget = EventBudget()
            # Answered requests' events go on time, whether their sessions are used again.
            assert self._task_group is not None
            self._task_group.start_soon(self._event_budget.expire_answered)
        # Resumable: its events are kept (bounded) for a client whose stream drops.
        transport.__class__ = ResumableTransport
        assert isinstance(transport, ResumableTransport)
        transport.make_resumable(SessionEvents(self._event_budget))
        transport._retry_interval = RETRY_MS
        transport.client_stream_wait = self.client_stream_wait
        transport.stalled_send_timeout = self.stalled_send_timeout
        if self.session_prefix:
            # Renamed before the opening request is served (which sends the id).
            old = transport.mcp_session_id
            assert old is not None
            transport.mcp_session_id = self.session_prefix + old
            self._server_instances[transport.mcp_session_id] = self._server_instances.pop(old)
            if old in self._session_owners:
                self._session_owners[transport.mcp_session_id] = self._session_owners.pop(old)
        return transport

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        await super()._discard_session(session_id, transport)
        if isinstance(transport._event_store, SessionEvents):
            transport._event_store.close()  # its events go with it

    async def _handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        body: bytes | None = None  # a POST's, once it came whole
        if scope["method"] == "POST":
            # The body limit in front (the SDK's) has read the body: all of it, unless the
            # client went before it ended.
            first = await receive()
            receive = _replaying(first, receive)
            if first["type"] != "http.request" or first.get("more_body", False):
                # Its client went before the body ended: there is no one to answer (the SDK
                # logged an error with a traceback, and told the session of it).
                log.debug("a POST's client went before its body ended")
                return
            body = first.get("body", b"")
            scope[REQUEST_BODY] = body
        session_id = _header(scope, b"mcp-session-id")
        legacy = not _is_modern_version(scope)
        if body is not None:
            version = _header(scope, b"mcp-protocol-version")
            if version is not None and version not in PROTOCOL_VERSIONS and session_id:
                # The SDK takes any version it does not know for a 2026 one, and would ask
                # this 2025 session's request for the 2026 envelope's keys.
                unsupported = _unsupported_version(body, version)
                await _error_response(unsupported, 400)(scope, receive, send)
                return
            send = _refusing(body, scope, receive, send)
            # pydantic's parser (the 2025 transport) cannot read a lone surrogate, and the
            # standard library's (the 2026 one) takes it even where no middleware looks (the
            # id): both get stdio's refusal. A session the SDK does not know gets its 404.
            if not legacy or session_id is None or session_id in self._server_instances:
                refused, answer = surrogate_body(body)
                if refused:
                    # An answer in a 2025 session's stream is a 200; the others are refusals.
                    opened = legacy and session_id is not None
                    await _surrogate_response(answer, 200 if opened else 400)(scope, receive, send)
                    return
            request_id = (
                body_request_id(body, requests_only=True)
                if legacy and session_id is not None
                else None
            )
            if session_id is not None and request_id is not None:
                if session_id in self._server_instances and _is_initialize(body):
                    refusal = error_response(400, ALREADY_INITIALIZED, INVALID_REQUEST, request_id)
                    await refusal(scope, receive, send)
                    return
                if quiet_request(body):
                    scope[DEFERRED] = str(request_id)
                await self._answer_once(session_id, request_id, scope, receive, send)
                return
            if (
                self._task_group is not None
                and is_modern(scope)
                and _accepts_both(scope)
                and plain_call(body)
            ):
                await handle_modern_request(
                    self.app,
                    self.security_settings,
                    True,
                    self._lifespan_state,
                    scope,
                    receive,
                    send,
                )
                return
        if legacy and session_id is None and not self.stateless:
            if not await self._opens_session(scope, body):
                await self._refuse_sessionless(scope, receive, send)
                return
        await super()._handle_request(scope, receive, send)

    async def _answer_once(
        self, session_id: str, request_id: int | str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Serves a 2025 session's request unless a request of the session still under way
        has its id. The SDK routes each answer by its request's id (as text): of two such
        requests one was never answered, and its client waited for good."""
        if self._ids_in_flight is None:
            self._ids_in_flight = {}
        held = self._ids_in_flight.setdefault(session_id, set())
        key = str(request_id)
        if key in held:
            shown = clip_long(key, ECHO_CHARS)
            said = (
                f"Invalid Request: the id {shown!r} is that of a request of this session still"
                " under way; each request needs an id of its own until it is answered (ids are"
                ' told apart by their text: 7 and "7" are one)'
            )
            refusal = error_response(409, said, INVALID_REQUEST, request_id)
            await refusal(scope, receive, send)
            return
        if len(held) >= MAX_IN_FLIGHT:
            said = (
                f"Too many requests under way: this session has {len(held):,} requests"
                f" unanswered (a call whose stream was dropped goes on until it ends), the most"
                f" one session may have at once; wait for their answers (or cancel some with"
                f" notifications/cancelled) before sending more"
            )
            await error_response(429, said, INTERNAL_ERROR, request_id)(scope, receive, send)
            return
        held.add(key)
        in_flight = self._ids_in_flight
        released = False
        transport = self._server_instances.get(session_id)
        events = transport._event_store if transport is not None else None
        # Open until answered while a stream of it is (its POST's, or a resume's that took
        # that one's place): a run the request waits on asks the client's model there
        # (``client_channel``), else on the GET stream.
        stream = scope[ANSWER_STREAM] = AnswerStream(
            on_stream=(lambda: key in transport._request_streams) if transport else None,
            listening=lambda: self._listening(session_id),
            listen_wait=self.client_stream_wait,
        )

        def release() -> None:  # once: a request with the id may come once it is answered
            nonlocal released
            if not released:
                released = True
                stream.answered = True
                held.discard(key)
                if not held and in_flight.get(session_id) is held:
                    del in_flight[session_id]

        # Under way until its answer goes (a dropped or replaced stream is no answer: the
        # request goes on, and its client may resume its stream), or the session ends.
        dispatched = False
        if isinstance(events, SessionEvents):
            events.when_answered(key, release)

        async def answering(message: Message) -> None:
            nonlocal dispatched
            if message["type"] == "http.response.start":
                # An event stream: the SDK has passed the request on (its refusals are JSON).
                dispatched = isinstance(events, SessionEvents) and message["status"] == 200
                dispatched &= (_header(message, b"content-type") or "").startswith("text/event")
            await send(message)

        try:
            await super()._handle_request(scope, receive, answering)
        finally:
            # Answered as JSON (or refused): released here, unless its stored answer did
            # already, when the next request with its id may be under way, its wait for its
            # answer registered in this one's place.
            if not dispatched and not released:
                if isinstance(events, SessionEvents):
                    events.when_answered(key, None)
                release()

    def _listening(self, session_id: str) -> bool:
        """Whether the 2025 session has its GET stream open (the SDK keeps it among its
        request streams, under its own key)."""
        transport = self._server_instances.get(session_id)
        return transport is not None and GET_STREAM_KEY in transport._request_streams

    async def _opens_session(self, scope: Scope, body: bytes | None) -> bool:
        """Whether the SDK, given this request without a session id, opens a session: a POST
        of an initialize request that passes its checks (the same checks, in its order). Any
        other it refuses, and the session it admitted first would have been for nothing."""
        if body is None:  # not a POST
            return False
        request = Request(scope)
        security = TransportSecurityMiddleware(self.security_settings)
        if await security.validate_request(request, is_post=True) is not None:
            return False
        has_json, has_sse = check_accept_headers(request)
        if not has_json or not (has_sse or self.json_response):
            return False
        content_type = request.headers.get("content-type", "").split(";")[0].split(",")
        if CONTENT_TYPE_JSON not in (part.strip() for part in content_type):
            return False
        try:
            message = jsonrpc_message_adapter.validate_python(from_json(body), by_name=False)
        except ValueError:  # pydantic's ValidationError too
            return False
        return isinstance(message, JSONRPCRequest) and message.method == "initialize"

    async def _refuse_sessionless(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The SDK's own refusal of a request that opens no session, from a transport that is
        never admitted: it counts against no limit, closes no idle session, and the id it was
        made with is not sent (no session stands behind it)."""
        transport = StreamableHTTPServerTransport(
            mcp_session_id=uuid4().hex,
            is_json_response_enabled=self.json_response,
            event_store=None,
            security_settings=self.security_settings,
        )
        async with transport.connect() as (read_stream, _), anyio.create_task_group() as tasks:
            # Nothing it refuses reaches the server; were anything to, it is dropped, not
            # left waiting for a server that is not there.
            tasks.start_soon(_drop_all, read_stream)
            try:
                await transport.handle_request(scope, receive, _without_session_id(send))
            finally:
                with anyio.CancelScope(shield=True):
                    await transport.terminate()
                tasks.cancel_scope.cancel()

    def _close_longest_idle(self) -> None:
        idle = [
            (transport.idle_scope.deadline, session_id)
            for session_id, transport in self._server_instances.items()
            if transport.idle_scope is not None
            and not transport.idle_scope.cancel_called
            and math.isfinite(transport.idle_scope.deadline)
        ]
        if not idle:
            return
        _, session_id = min(idle)
        transport = self._server_instances.pop(session_id)
        self._session_owners.pop(session_id, None)
        log.info("closing HTTP session %s, idle the longest, to admit a new one", session_id)
        # Its server task ends on this and terminates the transport (the SDK's own idle path).
        assert transport.idle_scope is not None
        transport.idle_scope.cancel()


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of the request's header ``name`` (lower case)."""
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


# An initialize in a session that has one (the SDK answered it as a new handshake, and the
# session took the new client capabilities and version: a client that had declared sampling
# lost it). MCP's initialization is a session's first interaction; the TypeScript SDK's server
# refuses it the same way.
ALREADY_INITIALIZED = (
    "Invalid Request: this HTTP session is already initialized (initialize is a session's first"
    " request): for a new session, send initialize without the Mcp-Session-Id header (and end"
    " this one with HTTP DELETE once done with it)"
)


def _is_initialize(body: bytes) -> bool:
    """Whether ``body`` is an initialize request."""
    if b'"initialize"' not in body:
        return False
    try:
        message = from_json(body)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


def _unsupported_version(body: bytes, version: str) -> JSONRPCError:
    shown = clip_long(version, ECHO_CHARS)
    message = (
        f"Bad Request: unsupported MCP-Protocol-Version header {shown!r}; this server speaks "
        + ", ".join(PROTOCOL_VERSIONS)
    )
    error = ErrorData(code=INVALID_REQUEST, message=message)
    return JSONRPCError(jsonrpc="2.0", id=body_request_id(body), error=error)


def _is_modern_version(scope: Scope) -> bool:
    """Whether the SDK answers the request on its 2026 path: one with a protocol version header
    that is not one of the 2025 handshake's (any method; see ``is_modern`` for POSTs)."""
    version = _header(scope, b"mcp-protocol-version")
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


def _accepts_both(scope: Scope) -> bool:
    """Whether the client accepts JSON and event streams, as the event-stream path requires:
    a client that does not gets the same refusal whichever tool it calls."""
    has_json, has_sse = check_accept_headers(Request(scope))
    return has_json and has_sse


def _surrogate_response(answer: JSONRPCError | None, status: int) -> Response:
    """The answer to a message holding a lone surrogate (see ``surrogate_body``): the
    request's refusal, or nothing (202) for a notification."""
    return Response(status_code=202) if answer is None else _error_response(answer, status)


async def _drop_all(stream: Any) -> None:
    with contextlib.suppress(anyio.ClosedResourceError, anyio.EndOfStream):
        async for item in stream:
            # The SDK passed on a request judged to open no session (its checks changed?):
            # dropped, but said, as its client waits for an answer that will not come.
            log.warning(
                "a request that opened no session reached the server: %s dropped",
                type(item).__name__,
            )


def _without_session_id(send: Send) -> Send:
    """``send``, with no Mcp-Session-Id header in the response."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message["headers"] if k.lower() != b"mcp-session-id"]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _error_response(answer: JSONRPCError, status: int = 200) -> Response:
    return error_response(status, answer.error.message, answer.error.code, answer.id)


def _refusing(body: bytes, scope: Scope, receive: Receive, send: Send) -> Send:
    """``send``, but where the SDK refuses ``body`` (400) or takes it for a notification (202)
    and it is no JSON-RPC message MCP reads, the answer is the refusal that says what is wrong
    with it (``refused_body``). Only those answers wait to be looked at; the rest pass."""
    held: list[Message] = []

    async def refusing(message: Message) -> None:
        if message["type"] == "http.response.start" and (
            message["status"] == 400 or (message["status"] == 202 and b'"id"' in body)
        ):
            held.append(message)
            return
        if held and message["type"] == "http.response.body":
            start = held.pop()
            answer = None if message.get("more_body") else refused_body(body)
            if answer is not None:
                await _error_response(answer, status=400)(scope, receive, send)
                return
            await send(start)
        await send(message)

    return refusing


def _replaying(first: Message, receive: Receive) -> Receive:
    """``receive`` with ``first`` (read from it already) given back first."""
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


# One refusal of the SDK's: whether a body is it, and ours in its place (the message and
# JSON-RPC code for the request's scope) with the headers it goes with.
Refusal = tuple[Callable[[bytes], bool], Callable[[Scope], tuple[str, int]], dict[str, str]]


class SdkRefusals:
    """The SDK's bare refusals as JSON-RPC errors that say what was wrong and what to do (a
    client shows a JSON-RPC error's message; the Python SDK's showed "Server returned an error
    response" for the plain-text ones): its 503 when every session is busy names the flag that
    raises the limit, its 413 for a body too large the size and the command line's import, its
    421 for a Host and its 403 for an Origin it does not serve the names it does serve, a
    404 for a path that is not the MCP endpoint names the endpoint, and its bare 400 for a body
    not said to be JSON, its empty 406 and 405 (2026), its bare 405 (2025) and its 400 for a
    request of no session say what the request must be."""

    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app = app
        hosts = ", ".join(served_host_names(settings))
        # Room frees up when a busy session's request ends: a retry soon may well get in.
        retry = {"Retry-After": "1"} if settings.http_session_idle_timeout else {}
        # Each status: the SDK's refusals with it, each as whether a body is that refusal,
        # and ours in its place (its message and JSON-RPC code) with its headers.
        self.refusals: dict[int, list[Refusal]] = {
            503: [
                (
                    lambda body: SDK_SESSION_LIMIT_MESSAGE in body,
                    lambda _: (session_limit_message(settings), INTERNAL_ERROR),
                    retry,
                )
            ],
            413: [
                (
                    lambda body: body == SDK_BODY_LIMIT_MESSAGE,
                    lambda _: (
                        f"Invalid Request: the request body is over {settings.max_request_bytes:,}"
                        " bytes, the most this server reads (a session file that large can be"
                        " imported with the command line: mcp-agent-sessions sessions import FILE)",
                        INVALID_REQUEST,
                    ),
                    {},
                )
            ],
            421: [
                (
                    lambda body: body == b"Invalid Host header",
                    lambda scope: (
                        f"Misdirected Request: this server answers for {hosts}, not for the Host"
                        f" {_quoted(scope, b'host')} (serve --allowed-host NAME adds a name, for a"
                        " proxy or a DNS name of this machine)",
                        INVALID_REQUEST,
                    ),
                    {},
                )
            ],
            403: [
                (
                    lambda body: body == b"Invalid Origin header",
                    lambda scope: (
                        f"Forbidden: a web page from {_quoted(scope, b'origin')} may not call this"
                        f" server, which takes pages from {hosts} (serve --allowed-host NAME adds a"
                        " name)",
                        INVALID_REQUEST,
                    ),
                    {},
                )
            ],
            # The SDK's security check, for a POST whose body is not said to be JSON.
            400: [
                (
                    lambda body: body == b"Invalid Content-Type header",
                    lambda scope: (
                        "Unsupported Media Type: a request's body is JSON, sent with Content-Type:"
                        f" application/json, not {_quoted(scope, b'content-type')}",
                        INVALID_REQUEST,
                    ),
                    {},
                ),
                (
                    lambda body: SDK_MISSING_SESSION_MESSAGE in body,
                    lambda scope: (
                        "Bad Request: Missing session ID: on protocol "
                        f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)} a client first sends initialize"
                        " (a POST without Mcp-Session-Id), then the Mcp-Session-Id header its answer"
                        f" gave with each request; on {', '.join(MODERN_PROTOCOL_VERSIONS)} it sends"
                        " the MCP-Protocol-Version header instead, and holds no session",
                        INVALID_REQUEST,
                    ),
                    {},
                ),
            ],
            # The SDK's 2026 path says nothing more (its 2025 path answers a JSON-RPC error).
            406: [
                (
                    lambda body: body == b"",
                    lambda scope: (
                        "Not Acceptable: a client must accept both application/json and"
                        " text/event-stream (an answer may come as an event stream), not"
                        f" {_quoted(scope, b'accept')}",
                        INVALID_REQUEST,
                    ),
                    {},
                )
            ],
            405: [
                (
                    lambda body: body == b"",
                    lambda scope: (
                        f"Method Not Allowed: on protocol {', '.join(MODERN_PROTOCOL_VERSIONS)} every"
                        f" request is a POST, not a {scope['method']}",
                        INVALID_REQUEST,
                    ),
                    {"Allow": "POST"},
                ),
                (
                    lambda body: SDK_METHOD_MESSAGE in body,
                    lambda scope: (
                        f"Method Not Allowed: {MCP_ENDPOINT} takes POST (a request), GET (a 2025"
                        " session's event stream) and DELETE (ending that session), not a"
                        f" {clip_long(scope['method'], ECHO_CHARS)}",
                        INVALID_REQUEST,
                    ),
                    {"Allow": "GET, POST, DELETE"},
                ),
            ],
            # Starlette's, for a path no route serves, and the SDK's for a session it does
            # not know (a JSON-RPC error that says no more than that).
            404: [
                (
                    lambda body: body == b"Not Found" or SDK_NO_SESSION_MESSAGE in body,
                    lambda scope: (
                        (no_session_message(scope, settings), INVALID_REQUEST)
                        if scope["path"] == MCP_ENDPOINT and _header(scope, b"mcp-session-id")
                        else (f"Not Found: {not_the_endpoint(scope['path'])}", INVALID_REQUEST)
                    ),
                    {},
                )
            ],
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def watch(message: Message) -> None:
            # Only those statuses are held back, until the body shows whether it is the SDK's.
            if message["type"] == "http.response.start" and message["status"] in self.refusals:
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                body = b"".join(m.get("body", b"") for m in held[1:])
                ours = next(
                    (
                        (answer, headers)
                        for is_sdks, answer, headers in self.refusals[held[0]["status"]]
                        if is_sdks(body)
                    ),
                    None,
                )
                if ours is not None:
                    answer, headers = ours
                    said, code = answer(scope)
                    asked = scope.get(REQUEST_BODY)
                    request_id = body_request_id(asked, requests_only=True) if asked else None
                    refusal = error_response(
                        held[0]["status"], said, code, request_id, headers=headers
                    )
                    await refusal(scope, receive, send)
                else:
                    for each in held:
                        await send(each)
                held.clear()

        await self.app(scope, receive, watch)


def _quoted(scope: Scope, name: bytes) -> str:
    """The request's header ``name`` as a refusal quotes it."""
    return repr(clip_long(_header(scope, name) or "", ECHO_CHARS))


# --- the app ----------------------------------------------------------------------------------


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def served_host_names(settings: ServerSettings) -> list[str]:
    """The names a request's Host may give (with any port): the bound address, loopback, and
    the hosts given with --allowed-host."""
    names = [*LOOPBACK_NAMES, *settings.allowed_hosts]
    if settings.host not in WILDCARD_ADDRESSES and settings.host not in names:
        names.append(f"[{settings.host}]" if ":" in settings.host else settings.host)
    return names


def transport_security(settings: ServerSettings) -> TransportSecuritySettings:
    """DNS rebinding protection for any address: the Host header must name the bound address,
    loopback, or a host given with --allowed-host (the SDK turns it off off loopback)."""
    names = served_host_names(settings)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for name in names for pattern in (name, f"{name}:*")],
        allowed_origins=[
            f"{scheme}://{name}{port}"
            for name in names
            for scheme in ("http", "https")
            for port in ("", ":*")
        ],
    )


def build_http_app(server: MCPServer, settings: ServerSettings) -> ASGIApp:
    """The SDK's app with our limits, behind the token check. ``settings.token`` must be set
    (see ``http_auth``) unless ``settings.no_auth`` on a loopback address."""
    if not settings.token and not (settings.no_auth and is_loopback(settings.host)):
        check_bind(settings)
        raise UnsafeBindError(
            "no token for HTTP: set settings.token (http_auth generates one) or, on loopback, "
            "settings.no_auth"
        )
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_ENDPOINT,
        max_request_body_size=settings.max_request_bytes,
        max_sessions=settings.max_http_sessions or None,
        session_idle_timeout=settings.http_session_idle_timeout or None,
        host=settings.host,
        transport_security=transport_security(settings),
    )
    # Swapped in before the app serves its first request: only the admission step and the
    # plain calls' path differ.
    manager = server.session_manager
    manager.__class__ = EvictingSessionManager
    # The SDK's body limit in front of the manager calls the method it was built with.
    assert isinstance(manager.asgi_app, RequestBodyLimitMiddleware), manager.asgi_app
    manager.asgi_app.app = manager._handle_request
    manager.client_stream_wait = settings.client_stream_wait  # type: ignore[attr-defined]
    manager.stalled_send_timeout = settings.notification_timeout  # type: ignore[attr-defined]
    if settings.replica_name:
        server.session_manager.session_prefix = settings.replica_name + "."  # type: ignore[attr-defined]
    app = SdkRefusals(SplicingHttp(app, server), settings)
    if settings.token:
        app = BearerTokenMiddleware(app, settings.token)
    return ViewerPage(app, settings.token, transport_security(settings))


def _serving_server(
    config: Any, send_buffer: int, on_shutdown: Callable[[], None] | None = None
) -> Any:
    """A uvicorn server whose listening sockets hand a fixed send buffer of ``send_buffer``
    bytes (``--http-send-buffer``) to every connection they accept (accepted sockets inherit it
    on Linux and the BSDs), and that calls ``on_shutdown`` as its shutdown begins. Left to
    autotuning the buffer grows to 4 MiB on Linux: a client that stops reading its event stream
    pins that much, and is noticed (its send blocks, and the notifier drops it) only once it is
    full. Fixed, a stuck client is found after this much, and loopback throughput is unchanged
    at the default; the kernel doubles the figure for its overhead."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            for listening in self.servers:
                for sock in listening.sockets:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if on_shutdown is not None:
                on_shutdown()
            await super().shutdown(sockets)

    return Server(config)


def end_listen_streams(server: MCPServer) -> Callable[[], None]:
    """What ends every open ``subscriptions/listen`` stream gracefully. uvicorn waits for open
    responses before it stops, and a listen stream (a viewer page left open) never ends of
    itself: without this, stopping the server would wait for every such client to go."""
    entry = server._lowlevel_server.get_request_handler("subscriptions/listen")
    close = getattr(entry.handler, "close", None) if entry is not None else None
    return close if callable(close) else (lambda: None)


def event_loop_options() -> dict[str, Any]:
    """anyio's options for the HTTP server's event loop: uvloop when it is installed and not
    turned off with MCP_AGENT_UVLOOP=0 (uvicorn picks it for itself the same way). Paired load
    runs (20 clients x 50 operations) measured 10-15% less server CPU per operation with it;
    over stdio it made no difference."""
    if os.environ.get("MCP_AGENT_UVLOOP") == "0":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


async def serve_http(server: MCPServer, settings: ServerSettings, **uvicorn_options: Any) -> None:
    import uvicorn

    app = build_http_app(server, settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        # Its records go to the root logger's handler (``serve``'s writes stderr off the event
        # loop), not to a handler of uvicorn's own, which would write there on it: a client
        # sending what is not HTTP gets a warning each, and stderr nobody reads then froze
        # the server once the pipe was full.
        log_config=None,
        lifespan="on",
        # Beyond the connections that fit in the file descriptors: 503, not a failing accept.
        limit_concurrency=connections_that_fit(descriptor_limit()),
        # Those connections are never held by clients that send no request.
        http=http_protocol(),
        **uvicorn_options,
    )
    close_listen_streams = end_listen_streams(server)

    def on_shutdown() -> None:
        from mcp_agent.sessions.sqlite.database import stop_waiting_for_locks

        close_listen_streams()
        # uvicorn waits for the requests under way: one waiting for another process's lock
        # on the database ends at once, nothing written, not after the busy timeout.
        stop_waiting_for_locks()

    await _serving_server(config, settings.http_send_buffer, on_shutdown).serve()
