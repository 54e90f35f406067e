"""The transport of each 2025 HTTP session: the SDK's, with its event streams resumable from
what the session's ``SessionEvents`` keeps (``event_store.py``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventMessage,
    SSEEvent,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from mcp_types.version import is_version_at_least
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp_agent.server.event_store import (
    ASKED_KEPT,
    SessionEvents,
    event_id_parts,
    not_kept_message,
)
from mcp_agent.server.json_answers import DeferredAnswer
from mcp_agent.server.unreadable import error_response

log = logging.getLogger(__name__)

# How long a client waits before reconnecting a dropped stream (the SSE retry field, sent with
# the priming event that opens each request's stream for 2025-11-25 clients).
RETRY_MS = 1_000
# Marks a GET that opens the session's stream afresh (in its ASGI scope).
FRESH_GET = "mcp_agent.fresh_get"
# Marks a POST whose answer goes as one JSON body if it comes first (``json_answers``), in its
# ASGI scope: the request's id, as text.
DEFERRED = "mcp_agent.deferred"
# The first version whose clients read a priming event (an event with an id and no data).
PRIMING_VERSION = "2025-11-25"


class _Streams(dict[Any, Any]):
    """The transport's request streams by key. A stream a resume took over (``taken_over``)
    stays registered through the SDK's message router's pop: the router may have been
    sending to the stream it replaced (at a checkpoint of that send, or waiting for room),
    and when that send fails as the old stream closes it pops the key, which unregistered the
    new stream, so the answer never reached it and the resumed stream waited for good (the
    event that failed is in the store, and in the new stream's replay, already). The SDK's
    other removals close the registered streams first, or pop with no default."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.taken_over: set[Any] = set()

    def pop(self, key: Any, *default: Any) -> Any:
        registered = self.get(key)
        if default and key in self.taken_over and registered is not None:
            send_side = registered[0].statistics()
            if send_side.open_send_streams and send_side.open_receive_streams:
                return None  # the router's, for the stream this one replaced
        self.taken_over.discard(key)
        return super().pop(key, *default)


class ResumableTransport(StreamableHTTPServerTransport):
    """The SDK's 2025 transport, with a replay that ends once it has sent its request's
    answer (the SDK's kept the resumed stream open for good, holding its session open too),
    that misses nothing stored while it starts, and that refuses an id of no stream the
    session keeps (the SDK's sent an empty stream, which clients reconnect to again and
    again; a text that is no id of ours opens the GET stream afresh). A new GET stream of a
    2025-11-25 client opens with a priming event, so it can be resumed from its start. A
    stream opened again (a resume, or a new GET stream) takes the place of the one it
    replaces at once, if the server has not yet seen that one's connection drop. Each
    session's transport is made this class with a ``SessionEvents`` of its own.

    A request to the client (a run's for the client's model) that the client has not answered
    when the stream it went on closes waits for the client to come back for it: a resume of
    that stream replays it, if the client had not seen it, and one sent on the GET stream is
    sent again on the next GET stream opened afresh. Once the client has not come back for
    ``client_stream_wait`` seconds it fails, saying why: before, it waited for good (and the
    run with it, its session busy)."""

    # The protocol version the session's initialize asked for.
    _session_version: str | None = None
    # How long a request to the client whose stream closed waits for the client to come back.
    client_stream_wait = 30.0
    # How long a resumable stream's client may leave its events unread while the session's
    # other messages wait behind them, before the stream is closed (--notification-timeout).
    stalled_send_timeout = 5.0
    # The streams that closed with requests to the client unanswered, each with when (in the
    # order they closed; made on first use), whether a task watches for their wait to end,
    # and the task group such a task runs in (the session's, while it is connected).
    _closed: dict[RequestId, float] | None = None
    _watching = False
    _tasks: TaskGroup | None = None
    # The answers of the requests under way marked ``DEFERRED``, by id (made on first use).
    _deferred: dict[RequestId, DeferredAnswer] | None = None

    def make_resumable(self, events: SessionEvents) -> None:
        """Readies a transport made as the SDK's and given this class, keeping its streams'
        events in ``events``."""
        self._request_streams = _Streams(self._request_streams)
        self._event_store = events
        events.asked = self._asked_on
        events.given_up = self._give_up

    def _asked_on(self, key: StreamId) -> None:
        """A request to the client was stored to go on the stream ``key``. One whose stream
        is closed (it closed as the request was sent: the SDK keeps the request for a resume
        and sends it nowhere) waits for the client to come back, as do those left unanswered
        when it closed (before, no wait began, and it waited for good)."""
        if key not in self._request_streams:
            self._stream_closed(key)

    @asynccontextmanager
    async def connect(self) -> AsyncGenerator[tuple[Any, Any], None]:
        async with super().connect() as streams, anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield streams
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def _handle_post_request(
        self, scope: Scope, request: Request, receive: Receive, send: Send
    ) -> None:
        store = self._event_store
        if isinstance(store, SessionEvents):
            store.answered_in(await request.body())  # (kept: the SDK reads it again)
        key = scope.get(DEFERRED)
        if not isinstance(key, str):
            await super()._handle_post_request(scope, request, receive, send)
            return
        if self._deferred is None:
            self._deferred = {}
        deferred = self._deferred[key] = DeferredAnswer()
        try:
            await super()._handle_post_request(scope, request, receive, deferred.sending(send))
        finally:
            if self._deferred.get(key) is deferred:
                del self._deferred[key]

    async def _mint_priming_event(
        self, stream_id: StreamId, protocol_version: str
    ) -> SSEEvent | None:
        # The first stream is the initialize's, with the version it asks for. A later request
        # whose header names an older version (the conformance suite's do) comes from that
        # same client, which reads priming events: the newer of the two decides.
        if self._session_version is None:
            self._session_version = protocol_version
        elif is_version_at_least(self._session_version, protocol_version):
            protocol_version = self._session_version
        return await super()._mint_priming_event(stream_id, protocol_version)

    def _create_event_data(self, event_message: EventMessage) -> SSEEvent:
        store = self._event_store
        text = (
            store.take_text(event_message.event_id)
            if isinstance(store, SessionEvents) and event_message.event_id
            else None
        )
        if text is None:
            return super()._create_event_data(event_message)
        return {"event": "message", "data": text, "id": event_message.event_id or ""}

    async def _handle_get_request(self, request: Request, send: Send) -> None:
        # A new GET stream opens as a resumed one, from the newest event (``_replay_events``):
        # it takes the place of one whose connection dropped unseen (the SDK's refused it
        # with 409 until the server noticed), and a 2025-11-25 client's starts with a priming
        # event, so a client whose stream drops before any notification came can still resume
        # it (the SDK's opened with nothing to resume from, and what was sent while the client
        # was away was lost).
        store = self._event_store
        if isinstance(store, SessionEvents) and request.headers.get(LAST_EVENT_ID_HEADER) is None:
            cursor = (LAST_EVENT_ID_HEADER.encode(), store.get_stream_cursor().encode())
            scope = {**request.scope, "headers": [*request.scope["headers"], cursor]}
            scope[FRESH_GET] = True
            request = Request(scope, request.receive)
        await super()._handle_get_request(request, send)

    async def _replay_events(self, last_event_id: str, request: Request, send: Send) -> None:
        store = self._event_store
        found = store.after(last_event_id) if isinstance(store, SessionEvents) else None
        if found is None and event_id_parts(last_event_id) is None:
            # No id of ours (junk, or another server's): the session's GET stream, afresh.
            kept = [(k, v) for k, v in request.scope["headers"] if k != b"last-event-id"]
            anew = Request({**request.scope, "headers": kept}, request.receive)
            await self._handle_get_request(anew, send)
            return
        if found is None:
            said = not_kept_message(last_event_id)
            await error_response(400, said, INVALID_REQUEST)(request.scope, request.receive, send)
            return
        stream, events = found
        key = stream.key
        version = self._session_version
        primed = bool(request.scope.get(FRESH_GET)) and (
            version is not None and is_version_at_least(version, PRIMING_VERSION)
        )
        # Taken with no await between: nothing stored meanwhile is missed, or sent twice.
        tail = None
        writer, reader = anyio.create_memory_object_stream[SSEEvent](0)
        if not stream.finished:
            # A stream still sent on is one whose client has come back before the server
            # saw its connection drop: this one takes its place (before, this one ended
            # after the replay, and its client came back each second until the server saw).
            self.close_sse_stream(key)
            tail = anyio.create_memory_object_stream[EventMessage](REQUEST_STREAM_BUFFER_SIZE)
            self._request_streams[key] = tail
            self._sse_stream_writers[key] = writer
            if isinstance(self._request_streams, _Streams):
                self._request_streams.taken_over.add(key)
        again: list[str] = []
        if tail is not None and isinstance(store, SessionEvents):
            if self._closed is not None:
                self._closed.pop(key, None)  # the client came back for it
            if request.scope.get(FRESH_GET):
                # Opened afresh, it may never have had them: sent again, with no id (so a
                # resume of this stream goes on from where it starts).
                again = [text for _, text in store.unanswered(key)]

        sent = [0]  # events the client took: a watch closes the stream once it takes none

        async def send_all() -> None:
            if primed:
                await writer.send({"id": last_event_id, "data": "", "retry": RETRY_MS})
            for text in again:
                await writer.send({"event": "message", "data": text})
                sent[0] += 1
            for event_id, text in events:
                await writer.send({"event": "message", "data": text, "id": event_id})
                sent[0] += 1
            if tail is None:
                return
            async with tail[1]:
                async for event_message in tail[1]:
                    await writer.send(self._create_event_data(event_message))
                    sent[0] += 1
                    if _answers(event_message, key):
                        break

        async def sender() -> None:
            try:
                async with writer, anyio.create_task_group() as watch:
                    if tail is not None:
                        watch.start_soon(self._close_when_stalled, key, writer, tail[1], sent)
                    try:
                        await send_all()
                    except anyio.ClosedResourceError:
                        log.debug("replayed stream %s closed", key)
                    watch.cancel_scope.cancel()
            finally:
                if tail is not None and self._let_go(key, tail[1], writer):
                    self._stream_closed(key)

        headers = {
            "Cache-Control": "no-cache, no-transform",
            "Connection": "keep-alive",
            "Content-Type": "text/event-stream",
        }
        if self.mcp_session_id:
            headers[MCP_SESSION_ID_HEADER] = self.mcp_session_id
        response = EventSourceResponse(content=reader, data_sender_callable=sender, headers=headers)
        try:
            await response(request.scope, request.receive, send)
        finally:
            await writer.aclose()
            await reader.aclose()

    async def _close_when_stalled(
        self,
        key: RequestId,
        writer: MemoryObjectSendStream[SSEEvent],
        reader: MemoryObjectReceiveStream[EventMessage],
        sent: list[int],
    ) -> None:
        """Closes the stream ``key`` (its ``writer``) once its client has read nothing for
        ``stalled_send_timeout`` seconds (``sent`` counts what it took) while the events
        waiting for it (``reader``) fill its buffer. The SDK's router, which passes on every
        message of the session in turn, then waits for room there: before, a client that
        stopped reading its GET stream (or a call's) got no answer to any request of its
        session until it closed that stream. What it did not read is kept for a resume with Last-Event-ID; a
        slow reader with nothing waiting behind it is waited for."""
        seen = -1
        while True:
            await anyio.sleep(self.stalled_send_timeout)
            used = reader.statistics()
            if sent[0] == seen and used.current_buffer_used >= used.max_buffer_size:
                break
            seen = sent[0]
        log.warning(
            "closed event stream %s of HTTP session %s: its client read nothing for %g s while"
            " the session's other messages waited behind it (it may resume it with %s)",
            key,
            self.mcp_session_id,
            self.stalled_send_timeout,
            LAST_EVENT_ID_HEADER,
        )
        writer.close()

    async def _run_sse_writer(
        self,
        request_id: RequestId,
        sse_stream_writer: MemoryObjectSendStream[SSEEvent],
        request_stream_reader: MemoryObjectReceiveStream[EventMessage],
        priming_event: SSEEvent | None,
    ) -> None:
        # The SDK's sender of a POST's stream, which at its end let go of whatever stream of
        # its request was registered: a resume's that took its place among them. A deferred
        # request's stream waits for its first message: its answer goes as JSON (nothing is
        # sent here), else the stream goes on, primed (by the deferred send, if a ping came
        # first). It had no watch: a client that stopped reading its call's stream (a run's
        # progress) held up every other message of its session, answers included, until it
        # read again.
        deferred = self._deferred.get(request_id) if self._deferred else None
        if deferred is not None and priming_event is not None:
            deferred.priming = ServerSentEvent(**priming_event).encode()
        sent = [0]
        try:
            async with sse_stream_writer, request_stream_reader:
                first = await request_stream_reader.receive() if deferred else None
                if first is not None and self._answered_whole(first, request_id, deferred):
                    return
                async with anyio.create_task_group() as watch:
                    watch.start_soon(
                        self._close_when_stalled,
                        request_id,
                        sse_stream_writer,
                        request_stream_reader,
                        sent,
                    )
                    try:
                        await self._send_stream(
                            request_id,
                            sse_stream_writer,
                            request_stream_reader,
                            priming_event,
                            deferred,
                            first,
                            sent,
                        )
                    except anyio.ClosedResourceError:
                        log.debug("stream %s closed", request_id)
                    watch.cancel_scope.cancel()
        except (anyio.ClosedResourceError, anyio.EndOfStream):
            log.debug("stream %s closed", request_id)
        finally:
            if self._let_go(request_id, request_stream_reader, sse_stream_writer):
                self._stream_closed(request_id)

    async def _send_stream(
        self,
        request_id: RequestId,
        sse_stream_writer: MemoryObjectSendStream[SSEEvent],
        request_stream_reader: MemoryObjectReceiveStream[EventMessage],
        priming_event: SSEEvent | None,
        deferred: DeferredAnswer | None,
        first: EventMessage | None,
        sent: list[int],
    ) -> None:
        """A POST's event stream: its priming event, ``first`` (a deferred request's first
        message, already read), then every message up to the answer; ``sent`` counts them."""
        if priming_event is not None and (deferred is None or deferred.take_priming()):
            await sse_stream_writer.send(priming_event)
        if first is not None:
            await sse_stream_writer.send(self._create_event_data(first))
            sent[0] += 1
            if _answers(first, request_id):
                return
        async for event_message in request_stream_reader:
            await sse_stream_writer.send(self._create_event_data(event_message))
            sent[0] += 1
            if _answers(event_message, request_id):
                break

    def _answered_whole(
        self, first: EventMessage, request_id: RequestId, deferred: DeferredAnswer | None
    ) -> bool:
        """Whether ``first``, the first message of the deferred request ``request_id``, was
        its answer, taken for a JSON body (its stream's events are then let go: no client
        has an id of them to resume from)."""
        if deferred is None or deferred.streaming or not _answers(first, request_id):
            return False
        deferred.take(self._create_event_data(first)["data"])
        store = self._event_store
        if isinstance(store, SessionEvents) and first.event_id:
            store.forget_stream_of(first.event_id)
        return True

    def _let_go(
        self,
        key: RequestId,
        reader: MemoryObjectReceiveStream[EventMessage],
        writer: MemoryObjectSendStream[SSEEvent],
    ) -> bool:
        """Unregisters the stream ``key`` sent from ``reader`` to ``writer``, unless another
        connection's has taken its place; whether it was still registered."""
        if self._sse_stream_writers.get(key) is writer:
            del self._sse_stream_writers[key]
        registered = self._request_streams.get(key)
        reader.close()
        if registered is None or registered[1] is not reader:
            return False
        del self._request_streams[key]
        if isinstance(self._request_streams, _Streams):
            self._request_streams.taken_over.discard(key)
        registered[0].close()
        return True

    def _stream_closed(self, key: RequestId) -> None:
        """The stream ``key`` closed (no other took its place): the requests to the client
        sent there and not answered wait ``client_stream_wait`` seconds for it to come back."""
        store = self._event_store
        if (
            not isinstance(store, SessionEvents)
            or not store.unanswered(str(key))
            or not self._tasks
        ):
            return
        if self._closed is None:
            self._closed = {}
        self._closed.pop(key, None)
        self._closed[key] = anyio.current_time()
        if not self._watching:
            self._watching = True
            self._tasks.start_soon(self._fail_unheard, self._closed)

    async def _fail_unheard(self, closed: dict[RequestId, float]) -> None:
        """Fails the requests to the client sent on a stream that closed once the client has
        not come back for them in ``client_stream_wait`` seconds, the first closed first."""
        try:
            while closed:
                key, at = next(iter(closed.items()))
                due = at + self.client_stream_wait
                if anyio.current_time() < due:
                    await anyio.sleep(due - anyio.current_time())
                    continue
                del closed[key]
                await self._fail(key)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("session ended before its unanswered requests were failed")
        finally:
            self._watching = False

    def _give_up(self, asked: JSONRPCRequest) -> None:
        """The session keeps no more of its client's unanswered requests: ``asked``, the
        oldest, fails saying so (before, it was forgotten without a word, and were its stream
        to close, its run waited for good)."""
        if self._tasks is None:
            return  # the session is ending: every request of it under way fails
        said = (
            f"no answer came in time: this session had {ASKED_KEPT} requests to its client"
            " unanswered, the most it keeps, when the server sent another, and this one, the"
            " oldest, was given up (answer the client's requests as they come, or run fewer"
            " of them at once with the client's model)"
        )
        self._tasks.start_soon(self._answer_with_error, [asked], said)

    async def _fail(self, key: RequestId) -> None:
        """Answers the server's requests to the client sent on ``key`` and not answered with
        an error that says why no answer came."""
        store = self._event_store
        assert isinstance(store, SessionEvents)
        where = "the session's GET stream" if key == GET_STREAM_KEY else "its call's stream"
        said = (
            f"no answer came: the event stream the request was sent on ({where}) closed"
            " before the client answered it, and the client did not come back for it in"
            f" {self.client_stream_wait:g} s (a new GET stream, or that stream resumed with"
            f" {LAST_EVENT_ID_HEADER})"
        )
        await self._answer_with_error(store.take_unanswered(str(key)), said)

    async def _answer_with_error(self, requests: list[JSONRPCRequest], said: str) -> None:
        """Answers the server's ``requests`` to the client, for the client, with an error that
        says ``said``."""
        writer = self._read_stream_writer
        assert writer is not None
        error = ErrorData(code=INTERNAL_ERROR, message=said)
        try:
            for asked in requests:
                answer = JSONRPCError(jsonrpc="2.0", id=asked.id, error=error)
                await writer.send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("session ended before its requests to the client were failed")


def _answers(event_message: EventMessage, key: RequestId) -> bool:
    """Whether ``event_message`` ends the stream ``key``: a request's answer (an error with
    no id, which the SDK sends on the GET stream, ends no stream)."""
    return key != GET_STREAM_KEY and isinstance(
        event_message.message, JSONRPCResponse | JSONRPCError
    )
