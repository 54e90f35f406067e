"""What each 2025 HTTP session's event streams sent, kept so that a client whose stream dropped
gets what it missed by reconnecting with Last-Event-ID (the SDK's ``EventStore``), and the
transport that replays it (``ResumableTransport``).

Each HTTP session has a store of its own (``SessionEvents``): a replay never reaches another
session's events, and the store goes with its session; a request's events go
``ANSWERED_KEEP_S`` after its answer. What all of them keep is bounded together
(``EventBudget``): per stream the newest ``STREAM_EVENTS`` events and ``STREAM_CHARS``
characters of JSON, in all ``TOTAL_EVENTS`` and ``TOTAL_CHARS``; past a bound the oldest events
go first. An event's id is ``STREAM.SEQUENCE``: the stream it belongs to is
known even once that event is gone, so a client that comes back late gets the newest events of
its stream (the answer among them) and no other stream's."""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    SSEEvent,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp_types import (
    INVALID_REQUEST,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from mcp_types.version import is_version_at_least
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.types import Send

from mcp_agent.server.unreadable import error_response

log = logging.getLogger(__name__)

# What one stream keeps (its newest events), and what all sessions' streams keep together.
STREAM_EVENTS = 1_000
STREAM_CHARS = 10 * 1024 * 1024
TOTAL_EVENTS = 50_000
TOTAL_CHARS = 32 * 1024 * 1024
# How long a client waits before reconnecting a dropped stream (the SSE retry field, sent with
# the priming event that opens each request's stream for 2025-11-25 clients).
RETRY_MS = 1_000
# How long a request's events are kept once its answer came (a client whose stream dropped
# comes back within seconds: its retry is 1 s, and the SDKs' clients try twice).
ANSWERED_KEEP_S = 60.0
# The least a sleep until the next answered stream is due lasts (a clock's rounding never
# makes it a busy loop).
EXPIRY_STEP_S = 0.01
# Texts of events just stored, held for the transport to send as they are.
SENT_TEXTS = 4
# Marks a GET that opens the session's stream afresh (in its ASGI scope).
FRESH_GET = "mcp_agent.fresh_get"
# The number of a session's standalone (GET) stream in its event ids.
GET_STREAM_NUMBER = 0


@dataclass(eq=False)
class _Stream:
    """One stream's kept events, oldest first: (sequence, JSON text or None for a priming
    event, size)."""

    key: StreamId
    number: int
    events: deque[tuple[int, str | None, int]] = field(default_factory=deque)
    chars: int = 0
    finished: bool = False  # its request's answer is among its events


class EventBudget:
    """The bound on what every session's store keeps together: past it the oldest event of
    any session goes. It also lets go of the events of every request answered over
    ``keep_s`` ago (``expire_answered``), whether its session is used again or not."""

    def __init__(
        self,
        max_events: int = TOTAL_EVENTS,
        max_chars: int = TOTAL_CHARS,
        keep_s: float = ANSWERED_KEEP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events = max_events
        self.max_chars = max_chars
        self.keep_s = keep_s
        self.clock = clock
        self.chars = 0
        self._order: OrderedDict[tuple[_Stream, int], int] = OrderedDict()
        self._stores: dict[_Stream, SessionEvents] = {}
        # Streams that have their answer, in the order it came (so the first is due first),
        # with when it came.
        self._answered: OrderedDict[_Stream, float] = OrderedDict()
        self._answer_came: anyio.Event | None = None

    @property
    def events(self) -> int:
        return len(self._order)

    def added(self, store: SessionEvents, stream: _Stream, sequence: int, size: int) -> None:
        self._order[(stream, sequence)] = size
        self._stores[stream] = store
        self.chars += size
        while self._order and (len(self._order) > self.max_events or self.chars > self.max_chars):
            (oldest, _), _ = next(iter(self._order.items()))
            self._stores[oldest].drop_oldest(oldest)

    def removed(self, stream: _Stream, sequence: int) -> None:
        self.chars -= self._order.pop((stream, sequence))

    def answered(self, stream: _Stream) -> None:
        """``stream`` (which keeps events) has its answer: its events go ``keep_s`` from now."""
        self._answered[stream] = self.clock()
        if self._answer_came is not None:
            self._answer_came.set()

    def let_go_of_answered(self) -> None:
        """Forgets the streams whose answer came over ``keep_s`` ago."""
        since = self.clock() - self.keep_s
        while self._answered:
            stream, came = next(iter(self._answered.items()))
            if came > since:
                break
            self._stores[stream].forget(stream)

    async def expire_answered(self) -> None:
        """Lets go of answered streams' events on time, for as long as it runs: it sleeps
        until the first is due, or, with none answered, until one is."""
        while True:
            self.let_go_of_answered()
            if self._answered:
                came = next(iter(self._answered.values()))
                await anyio.sleep(max(came + self.keep_s - self.clock(), EXPIRY_STEP_S))
            else:
                self._answer_came = anyio.Event()
                await self._answer_came.wait()

    def forget(self, stream: _Stream) -> None:
        self._stores.pop(stream, None)
        self._answered.pop(stream, None)


class SessionEvents(EventStore):
    """One HTTP session's kept events, by stream (a request's, or the session's GET stream)."""

    def __init__(self, budget: EventBudget) -> None:
        self._budget = budget
        self._by_key: dict[StreamId, _Stream] = {}
        self._by_number: dict[int, _Stream] = {}
        self._next_number = GET_STREAM_NUMBER + 1
        self._next_sequence = 1
        self._texts: dict[EventId, str] = {}  # the last few, for the transport to send as is

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._budget.let_go_of_answered()
        stream = self._by_key.get(stream_id)
        if stream is None or stream.finished:  # a request id used again: a stream of its own
            number = GET_STREAM_NUMBER if stream_id == GET_STREAM_KEY else self._next_number
            if number != GET_STREAM_NUMBER:
                self._next_number += 1
            if stream is not None:
                self.forget(stream)
            stream = self._by_key[stream_id] = self._by_number[number] = _Stream(stream_id, number)
        sequence = self._next_sequence
        self._next_sequence += 1
        text = (
            None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)
        )
        size = 0 if text is None else len(text)
        event_id = f"{stream.number}.{sequence}"
        kept = size <= STREAM_CHARS
        if not kept:
            log.info("event %s (%d characters) is too large to keep for a replay", event_id, size)
        else:
            stream.events.append((sequence, text, size))
            stream.chars += size
            self._budget.added(self, stream, sequence, size)
            while len(stream.events) > STREAM_EVENTS or stream.chars > STREAM_CHARS:
                self.drop_oldest(stream)
        if isinstance(message, JSONRPCResponse | JSONRPCError) and stream_id != GET_STREAM_KEY:
            stream.finished = True
            if kept and stream.events:
                self._budget.answered(stream)
            else:
                # Its answer is not kept: a replay of the rest would only send its client
                # round again. Forgotten at once, a resume is told the stream is not kept.
                self.forget(stream)
        if text is not None:
            # The transport sends the event next: it takes the text made here (one dump, not
            # two). Only the latest few are held for that (one whose stream has no client is
            # never taken).
            self._texts[event_id] = text
            while len(self._texts) > SENT_TEXTS:
                del self._texts[next(iter(self._texts))]
        return event_id

    def get_stream_cursor(self) -> EventId:
        """An id of the session's GET stream after every event stored so far: what a GET
        stream opened now is primed with, so its client can resume it from the start."""
        return f"{GET_STREAM_NUMBER}.{self._next_sequence - 1}"

    def take_text(self, event_id: EventId) -> str | None:
        return self._texts.pop(event_id, None)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        found = self.after(last_event_id)
        if found is None:
            return None
        stream, events = found
        for event_id, text in events:
            await send_callback(EventMessage(_parsed(text), event_id))
        return stream.key

    def after(self, last_event_id: EventId) -> tuple[_Stream, list[tuple[str, str]]] | None:
        """The stream ``last_event_id`` belongs to and its kept events after it (as ids and
        texts), or None for an id of no stream this session keeps. The session's GET stream
        is always known (empty until something is sent on it)."""
        self._budget.let_go_of_answered()
        parts = event_id_parts(last_event_id)
        if parts is None:
            return None
        number, sequence = parts
        stream = self._by_number.get(number)
        if stream is None and number == GET_STREAM_NUMBER:
            stream = self._by_key[GET_STREAM_KEY] = self._by_number[number] = _Stream(
                GET_STREAM_KEY, number
            )
        if stream is None:
            return None
        events = [
            (f"{number}.{seq}", text)
            for seq, text, _ in stream.events
            if seq > sequence and text is not None
        ]
        return stream, events

    def drop_oldest(self, stream: _Stream) -> None:
        sequence, _, size = stream.events.popleft()
        stream.chars -= size
        self._budget.removed(stream, sequence)
        if not stream.events and stream.number != GET_STREAM_NUMBER:
            self.forget(stream)

    def forget(self, stream: _Stream) -> None:
        """Lets go of ``stream`` and its events."""
        while stream.events:
            sequence, _, _ = stream.events.popleft()
            self._budget.removed(stream, sequence)
        stream.chars = 0
        self._budget.forget(stream)
        if self._by_number.get(stream.number) is stream:
            del self._by_number[stream.number]
        if self._by_key.get(stream.key) is stream:
            del self._by_key[stream.key]

    def close(self) -> None:
        """Lets go of every event (the session ended)."""
        for stream in list(self._by_number.values()):
            self.forget(stream)
        self._texts.clear()


# An event id of ours: two numbers of ASCII digits (a header may carry any Latin-1 text, '²'
# among str.isdigit's digits, and int() refuses over 4,300 digits), each within a 64-bit count.
_EVENT_ID = re.compile(r"([0-9]{1,18})\.([0-9]{1,18})")


def event_id_parts(event_id: str) -> tuple[int, int] | None:
    """The stream number and sequence of an event id of ours, or None for any other text."""
    matched = _EVENT_ID.fullmatch(event_id)
    if matched is None:
        return None
    return int(matched[1]), int(matched[2])


def not_kept_message(last_event_id: str) -> str:
    """Why a Last-Event-ID of ours gets no replay, and what to do."""
    return (
        f"Bad Request: the {LAST_EVENT_ID_HEADER} {last_event_id[:100]!r} names no event stream"
        f" this session keeps (a request's events are kept until {ANSWERED_KEEP_S:g} s after"
        " its answer, the newest of them only past the server's bounds, and none of a request"
        f" whose answer alone is over {STREAM_CHARS:,} characters): send the request again"
    )


def _parsed(text: str) -> JSONRPCMessage:
    return jsonrpc_message_adapter.validate_json(text)


class ResumableTransport(StreamableHTTPServerTransport):
    """The SDK's 2025 transport, with a replay that ends once it has sent its request's
    answer (the SDK's kept the resumed stream open for good, holding its session open too),
    that misses nothing stored while it starts, and that refuses an id of no stream the
    session keeps (the SDK's sent an empty stream, which clients reconnect to again and
    again; a text that is no id of ours opens the GET stream afresh), and a new GET stream
    of a 2025-11-25 client that opens with a priming event, so it can be resumed from its
    start. Each session's transport is made this class with a ``SessionEvents`` of its own."""

    # The protocol version the session's initialize asked for.
    _session_version: str | None = None

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
        # A new GET stream of a 2025-11-25 client opens as a resumed one, from the newest
        # event: it starts with a priming event, so a client whose stream drops before any
        # notification came can still resume it (the SDK's opened with nothing to resume from,
        # and what was sent while the client was away was lost).
        store = self._event_store
        version = self._session_version
        if (
            isinstance(store, SessionEvents)
            and version is not None
            and is_version_at_least(version, "2025-11-25")
            and request.headers.get(LAST_EVENT_ID_HEADER) is None
        ):
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
        fresh = bool(request.scope.get(FRESH_GET))
        if fresh and key in self._request_streams:
            said = "Conflict: Only one SSE stream is allowed per session"
            await error_response(409, said, INVALID_REQUEST)(request.scope, request.receive, send)
            return
        # Taken with no await between: nothing stored meanwhile is missed, or sent twice.
        tail = None
        if not stream.finished and key not in self._request_streams:
            tail = anyio.create_memory_object_stream[EventMessage](REQUEST_STREAM_BUFFER_SIZE)
            self._request_streams[key] = tail
        writer, reader = anyio.create_memory_object_stream[SSEEvent](0)
        if tail is not None:
            self._sse_stream_writers[key] = writer

        async def sender() -> None:
            try:
                async with writer:
                    if fresh:
                        await writer.send({"id": last_event_id, "data": "", "retry": RETRY_MS})
                    for event_id, text in events:
                        await writer.send({"event": "message", "data": text, "id": event_id})
                    if tail is None:
                        return
                    async with tail[1]:
                        async for event_message in tail[1]:
                            await writer.send(self._create_event_data(event_message))
                            if isinstance(event_message.message, JSONRPCResponse | JSONRPCError):
                                break
            except anyio.ClosedResourceError:
                log.debug("replayed stream %s closed", key)
            finally:
                if tail is not None and self._request_streams.get(key) is tail:
                    del self._request_streams[key]
                    tail[0].close()
                if self._sse_stream_writers.get(key) is writer:
                    del self._sse_stream_writers[key]

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
