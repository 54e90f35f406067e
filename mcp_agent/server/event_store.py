"""What each 2025 HTTP session's event streams sent, kept so that a client whose stream dropped
gets what it missed by reconnecting with Last-Event-ID (the SDK's ``EventStore``; the transport
that replays it is ``resumable.ResumableTransport``).

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
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import (
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic_core import from_json

log = logging.getLogger(__name__)

CANCELLED = "notifications/cancelled"

# What one stream keeps (its newest events), and what all sessions' streams keep together.
STREAM_EVENTS = 1_000
STREAM_CHARS = 10 * 1024 * 1024
TOTAL_EVENTS = 50_000
TOTAL_CHARS = 32 * 1024 * 1024
# How long a request's events are kept once its answer came (a client whose stream dropped
# comes back within seconds: its retry is 1 s, and the SDKs' clients try twice).
ANSWERED_KEEP_S = 60.0
# The least a sleep until the next answered stream is due lasts (a clock's rounding never
# makes it a busy loop).
EXPIRY_STEP_S = 0.01
# Texts of events just stored, held for the transport to send as they are.
SENT_TEXTS = 4
# The most requests to its client sent on a session's streams and not answered yet that are
# kept, to send again on its next GET stream or to fail once their stream closed and the
# client did not come back (past it the oldest is given up: failed, saying why).
ASKED_KEPT = 64
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
    """One HTTP session's kept events, by stream (a request's, or the session's GET stream),
    and the requests to its client sent on its streams that it has not answered yet."""

    def __init__(self, budget: EventBudget) -> None:
        self._budget = budget
        self._by_key: dict[StreamId, _Stream] = {}
        self._by_number: dict[int, _Stream] = {}
        self._next_number = GET_STREAM_NUMBER + 1
        self._next_sequence = 1
        self._texts: dict[EventId, str] = {}  # the last few, for the transport to send as is
        # The requests to the client not answered yet, by id as text, oldest first: the
        # stream each was sent on, the request and its text.
        self._asked: OrderedDict[str, tuple[StreamId, JSONRPCRequest, str]] = OrderedDict()
        # What to call once the answer to a client's request (by its stream) is stored, or the
        # session ends: one each of its requests under way (``when_answered``).
        self._answer_waits: dict[StreamId, Callable[[], None]] = {}
        # Told the stream of each request to the client stored, and each such request given
        # up past ``ASKED_KEPT`` (the transport's).
        self.asked: Callable[[StreamId], None] | None = None
        self.given_up: Callable[[JSONRPCRequest], None] | None = None

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
            answered = self._answer_waits.pop(stream_id, None)
            if answered is not None:
                answered()
            if kept and stream.events:
                self._budget.answered(stream)
            else:
                # Its answer is not kept: a replay of the rest would only send its client
                # round again. Forgotten at once, a resume is told the stream is not kept.
                self.forget(stream)
        elif isinstance(message, JSONRPCRequest) and text:
            self._asked[str(message.id)] = (stream_id, message, text)
            while len(self._asked) > ASKED_KEPT:
                _, (_, oldest, _) = self._asked.popitem(last=False)
                if self.given_up is not None:
                    self.given_up(oldest)
            if self.asked is not None:
                self.asked(stream_id)
        elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
            # The server no longer waits for it (the SDK tells the client so).
            self._asked.pop(str((message.params or {}).get("requestId")), None)
        if text is not None:
            # The transport sends the event next: it takes the text made here (one dump, not
            # two). Only the latest few are held for that (one whose stream has no client is
            # never taken).
            self._texts[event_id] = text
            while len(self._texts) > SENT_TEXTS:
                del self._texts[next(iter(self._texts))]
        return event_id

    def when_answered(self, stream_id: StreamId, answered: Callable[[], None] | None) -> None:
        """Calls ``answered`` once the answer on ``stream_id`` (a request's) is stored, or the
        session ends; None: no longer."""
        if answered is None:
            self._answer_waits.pop(stream_id, None)
        else:
            self._answer_waits[stream_id] = answered

    def unanswered(self, stream_id: StreamId) -> list[tuple[JSONRPCRequest, str]]:
        """The requests sent on ``stream_id`` that the client has not answered, oldest first,
        each with its text."""
        return [(asked, text) for key, asked, text in self._asked.values() if key == stream_id]

    def answered_in(self, body: bytes) -> None:
        """Notes the answer to a request to the client, if ``body`` (a POST's) is one."""
        if not self._asked or (b'"result"' not in body and b'"error"' not in body):
            return
        try:
            message = from_json(body)
        except ValueError:
            return
        if isinstance(message, dict) and "method" not in message and "id" in message:
            self._asked.pop(str(message["id"]), None)

    def take_unanswered(self, stream_id: StreamId) -> list[JSONRPCRequest]:
        """The requests sent on ``stream_id`` that the client has not answered, which are
        then forgotten."""
        taken = [asked for asked, _ in self.unanswered(stream_id)]
        for asked in taken:
            del self._asked[str(asked.id)]
        return taken

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

    def forget_stream_of(self, event_id: EventId) -> None:
        """Lets go of the request stream ``event_id`` is an event of: its answer went as one
        JSON body, so no client holds an id of it to resume from."""
        parts = event_id_parts(event_id)
        stream = self._by_number.get(parts[0]) if parts is not None else None
        if stream is not None and stream.number != GET_STREAM_NUMBER:
            self.forget(stream)

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
        self._asked.clear()
        waits, self._answer_waits = self._answer_waits, {}
        for answered in waits.values():
            answered()


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
