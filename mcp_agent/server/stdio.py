"""Serving MCP over stdin and stdout without a thread per message.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: every line read and
every message written is a hop to a worker thread and back, which is most of an MCP round
trip over stdio (and those threads contend with the request for the GIL). When stdin and
stdout are pipes or sockets (how MCP clients start a server) on POSIX, we give it streams over
them that wait for readiness in the event loop instead; framing, parsing and the message loop
stay the SDK's. A line the SDK cannot read gets its JSON-RPC error (``unreadable``), on either. A
terminal on stdin (``serve`` run by hand) is read in the event loop too, left blocking; its
output and other stdins (Windows, files) go through the SDK's own streams.

Like the SDK, we keep the wire to ourselves while serving: fd 0 reads the null device and fd 1
goes to stderr, so a stray ``print`` or a child process cannot corrupt the protocol stream.

When the client closes stdin, the requests already read are finished and answered before the
server stops (for up to ``DRAIN_SECONDS``): the SDK would cancel them at once, so that
``printf '…' | mcp-agent-sessions serve`` stored a session yet never said so.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)

from mcp_agent.pipes import READ_CHUNK, DroppedLine, LineReader, PeerGone, Writer, fd_reads
from mcp_agent.server.clients import MAX_IN_FLIGHT
from mcp_agent.server.spliced import SplicingStream, splicing
from mcp_agent.server.strict import ECHO_CHARS
from mcp_agent.server.unreadable import AnsweringStream, dropped_answer, undecodable_answer
from mcp_agent.sessions.entries import clip_long
from mcp_agent.streams import WrappedStream

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)

# How long the server goes on, once stdin is closed, with the requests it read before: long
# enough for any store operation (or one waiting out another process's lock); an agent run
# still going by then is stopped with the server, as before. A client that wants the server
# gone sooner sends SIGTERM, as the MCP spec has it.
DRAIN_SECONDS = 30.0
# Our requests to the client still waiting for its reply that are remembered at most (a
# client that never answers must not grow the set; the oldest is forgotten first).
MAX_ASKED = 1024


def _is_pipe_or_socket(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _dup_above_std(fd: int) -> int:
    # Never 0-2: with stderr closed, a plain dup could land on fd 2.
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def claim_wire() -> tuple[int, int, Callable[[], None]] | None:
    """Private non-blocking copies of fd 0 and 1, and the function that puts everything back;
    meanwhile fd 0 reads the null device and fd 1 writes to stderr.

    None, having changed nothing, unless both are pipes or sockets (what MCP clients give a
    server): a terminal shares its O_NONBLOCK with stderr and the shell, and regular files
    and the null device never block anyway. Also None when the descriptors cannot be copied.
    """
    try:
        if not (_is_pipe_or_socket(0) and _is_pipe_or_socket(1)):
            return None
    except OSError:  # fd 0 or 1 closed
        return None
    sys.stdout.flush()
    opened: list[int] = []
    try:
        for fd in (0, 1, 0, 1):
            opened.append(_dup_above_std(fd))
        opened.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        for fd in opened:
            os.close(fd)
        return None
    wire_in, wire_out, saved_in, saved_out, devnull = opened
    blocking = os.get_blocking(wire_in), os.get_blocking(wire_out)

    def release() -> None:
        # What a tool printed without flushing still goes to stderr, not to the client.
        with suppress(Exception):
            sys.stdout.flush()
        with suppress(OSError):
            os.set_blocking(wire_in, blocking[0])
            os.set_blocking(wire_out, blocking[1])
        with suppress(OSError):
            os.dup2(saved_in, 0)
            os.dup2(saved_out, 1)
        for fd in opened:
            with suppress(OSError):
                os.close(fd)

    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        # O_NONBLOCK belongs to the pipe's open file, which the saved descriptors (and the
        # client's end, for a socket) share: it is put back on release.
        os.set_blocking(wire_in, False)
        os.set_blocking(wire_out, False)
    except OSError:
        release()
        return None
    # A long answer then goes into the pipe in one or two writes, not in one per 64 KB the
    # client drains (Linux; elsewhere, or over the system's limit, the pipe stays as it is).
    with suppress(OSError, AttributeError):
        fcntl.fcntl(wire_out, fcntl.F_SETPIPE_SZ, 1 << 20)
    return wire_in, wire_out, release


def claim_terminal() -> tuple[int, Callable[[], None]] | None:
    """A private copy of fd 0 when it is a terminal, and the function that puts it back;
    meanwhile fd 0 reads the null device (a child process cannot take the user's lines).
    The copy stays blocking (the terminal's O_NONBLOCK is the shell's too): it is read only
    once the event loop says it is readable, so a read never blocks and waiting for a line
    can be cancelled (SIGTERM). The SDK's own reader waits in a worker thread that nothing
    can stop: ``serve`` in a terminal, sent SIGTERM, waited for the user's Enter. None,
    having changed nothing, when fd 0 is no terminal or cannot be copied."""
    try:
        if not os.isatty(0):
            return None
        terminal = _dup_above_std(0)
    except OSError:
        return None
    try:
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(terminal)
        return None

    def release() -> None:
        with suppress(OSError):
            os.dup2(terminal, 0)
        for fd in (terminal, devnull):
            with suppress(OSError):
                os.close(fd)

    try:
        os.dup2(devnull, 0)
    except OSError:
        release()
        return None
    return terminal, release


def ready_reads(fd: int, size: int = READ_CHUNK) -> Callable[[], Awaitable[bytes]]:
    """Reads of the blocking descriptor ``fd`` (a terminal: a line each, empty at Ctrl-D),
    each once the event loop says there is something to read."""

    async def read() -> bytes:
        await anyio.wait_readable(fd)
        return os.read(fd, size)

    return read


class _ToClient(Writer):
    """The client's pipe: once it is closed (the client went), ``gone`` is called, once, and
    what is written after is dropped; the SDK's writer would fail, cancelling the server mid
    work, its runs unrecorded."""

    def __init__(self, fd: int, gone: Callable[[], None]) -> None:
        super().__init__(fd)
        self._gone: Callable[[], None] | None = gone

    async def write(self, text: str) -> None:
        if self._gone is None:
            return
        try:
            await super().write(text)
        except PeerGone:
            gone, self._gone = self._gone, None
            log.info("the client closed the pipe; stopping")
            gone()


@asynccontextmanager
async def event_loop_stdio(
    gone: Callable[[], None] | None = None,
) -> AsyncIterator[tuple[Any, Any, deque[str] | None]]:
    """The SDK's stdio transport over event-loop streams when stdin and stdout are pipes or
    sockets (POSIX); a terminal on stdin read in the event loop, with the SDK's writes; else
    the SDK's own streams (Windows, files). With them, the lines read and not yet taken off
    the read stream, oldest first (None from the SDK's reader, which shows us no line)."""
    claimed = None if sys.platform == "win32" else claim_wire()
    terminal = None if claimed is not None or sys.platform == "win32" else claim_terminal()
    if claimed is None and terminal is None:
        async with stdio_server() as (read_stream, write_stream):
            yield read_stream, write_stream, None
        return
    if claimed is not None:
        wire_in, wire_out, release = claimed
        chunks = fd_reads(wire_in)
        writer = Writer(wire_out) if gone is None else _ToClient(wire_out, gone)
    else:
        assert terminal is not None
        wire_in, release = terminal
        chunks, writer = ready_reads(wire_in), None  # the SDK writes to a terminal
    # The transport reads a line only once the one before is taken off the read stream, so
    # two are waiting here at most; the bound only guards against losing step.
    lines: deque[str] = deque(maxlen=8)
    answer_to: list[Any] = []  # the write stream, once there is one

    async def dropped(line: DroppedLine) -> str | None:
        # Nothing waits for ever: a request too long to read is refused, and an answer (to a
        # request of ours) too long to read is read as an error answer to that request.
        answer = dropped_answer(line)
        if answer is not None and answer_to:
            await answer_to[0].send(SessionMessage(answer))
        return line.error_in_place()

    async def undecodable(error: UnicodeDecodeError) -> None:
        # Read with U+FFFD in place of its bytes, a request would store text the client never
        # sent: it is refused as the HTTP transport refuses such a body (-32700).
        if answer_to:
            await answer_to[0].send(SessionMessage(undecodable_answer(error)))

    try:
        reader = LineReader(
            wire_in, lines=lines, dropped=dropped, undecodable=undecodable, chunks=chunks
        )
        async with stdio_server(reader, writer) as (read_stream, write_stream):  # type: ignore[arg-type]
            answer_to.append(write_stream)
            yield read_stream, write_stream, lines
    finally:
        release()


def _counted_request(item: SessionMessage | Exception) -> JSONRPCRequest | None:
    """``item``'s request when it is one that ``Unanswered`` counts: a request of the client,
    but ``subscriptions/listen``, which lasts until the client goes."""
    if isinstance(item, SessionMessage) and isinstance(item.message, JSONRPCRequest):
        if item.message.method != "subscriptions/listen":
            return item.message
    return None


class Unanswered:
    """The requests read from the client and not yet answered, nor cancelled by it (a
    cancelled request gets no answer), counted by id as the SDK matches ids ("7" is 7); and
    the server's own requests to the client (sampling, elicitation) still waiting for its
    reply. Each is a request in flight, which the SDK holds a task for: the counts are as
    bounded as they are.

    A ``subscriptions/listen`` request is not counted: it lasts until the client goes."""

    def __init__(self) -> None:
        self._ids: Counter[RequestId] = Counter()
        self._asked: dict[RequestId, None] = {}  # our requests to the client, oldest first
        self._changed = anyio.Event()
        # The client's initialize: its id while under way, and whether one was answered with
        # a result (one answered with an error may be sent again).
        self._initializing: RequestId | None = None
        self._initialized = False

    def initialized(self, request: JSONRPCRequest) -> bool:
        """Whether ``request`` is an initialize sent again: another is under way or answered
        (MCP's initialization is a connection's first interaction). Before, the SDK answered
        it as a new handshake, and the client's capabilities became the new ones (a client
        that had declared sampling lost it)."""
        if request.method != "initialize":
            return False
        if self._initialized or self._initializing is not None:
            return True
        self._initializing = coerce_request_id(request.id)
        return False

    def __len__(self) -> int:
        return self._ids.total()

    def under_way(self, request_id: RequestId) -> bool:
        """Whether a request with this id (as the SDK matches ids) is read and unanswered."""
        return self._ids[coerce_request_id(request_id)] > 0

    def read(self, item: SessionMessage | Exception) -> None:
        if isinstance(item, Exception):
            return
        request = _counted_request(item)
        if request is not None:
            self._ids[coerce_request_id(request.id)] += 1
            return
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            if message.id is not None:
                self._asked.pop(coerce_request_id(message.id), None)
        elif (
            isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled"
        ):
            request_id = as_request_id((message.params or {}).get("requestId"))
            if request_id is not None:
                self._forget(request_id)

    def sent(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            if (
                self._initializing is not None
                and coerce_request_id(message.id) == self._initializing
            ):
                self._initialized = isinstance(message, JSONRPCResponse)
                self._initializing = None
            self._forget(message.id)
        elif isinstance(message, JSONRPCRequest):
            self._asked[coerce_request_id(message.id)] = None
            if len(self._asked) > MAX_ASKED:
                del self._asked[next(iter(self._asked))]
            self._wake()

    def _forget(self, request_id: RequestId) -> None:
        key = coerce_request_id(request_id)
        if self._ids[key] > 0:
            self._ids[key] -= 1
            if not self._ids[key]:
                del self._ids[key]
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def drained(self, seconds: float) -> None:
        """Once every request is answered, or after ``seconds``; at once when one of ours is
        waiting for the client (no reply can come any more: the SDK fails that request, and
        whatever waits for it, as soon as this returns)."""
        with anyio.move_on_after(seconds):
            while self._ids and not self._asked:
                await self._changed.wait()
        if self._ids:
            why = "waiting for the client" if self._asked else f"after {seconds:g} s"
            log.warning(
                "stdin closed; %d request(s) still unanswered %s are stopped", len(self), why
            )


class StdioStop:
    """Ends the server's reading as if its input had ended (``stop``), without waiting for
    the answers of requests under way: the server then stops as at the end of its input, its
    runs aborted and recorded as such, its downstream servers stopped in a hurry (a client
    that stops its server with SIGTERM sends SIGKILL soon after, the SDK's 2 s later, and a
    downstream server still running then would run on)."""

    def __init__(self) -> None:
        self.stopped = False
        # The read waiting for a line, or the wait for answers once the input has ended.
        self._reading: anyio.CancelScope | None = None

    def stop(self) -> None:
        from mcp_agent.proxy.child_stdio import hurry_stops

        self.stopped = True
        hurry_stops()
        if self._reading is not None:
            self._reading.cancel()


def id_under_way(request_id: RequestId) -> JSONRPCError:
    shown = clip_long(str(request_id), ECHO_CHARS)
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(
            code=INVALID_REQUEST,
            message=(
                f"Invalid Request: the id {shown!r} is that of a request still under way; each "
                "request needs an id of its own until it is answered (ids are told apart by "
                'their text: 7 and "7" are one)'
            ),
        ),
    )


def already_initialized(request_id: RequestId) -> JSONRPCError:
    said = (
        "Invalid Request: this connection is already initialized (initialize is a connection's"
        " first request, and its capabilities and version hold until it ends): for a new"
        " session, start the server again"
    )
    error = ErrorData(code=INVALID_REQUEST, message=said)
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def too_many_in_flight(request_id: RequestId, limit: int) -> JSONRPCError:
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(
            code=INTERNAL_ERROR,
            message=(
                f"Too many requests under way: this client has {limit} requests unanswered, "
                "the most one stdio client may have at once; read their answers (or cancel "
                "some) before sending more"
            ),
        ),
    )


class _Reading(WrappedStream):
    """The read stream, noting each request, refusing those past ``max_in_flight`` (on
    ``refuse_to``), and at its end waiting for the answers."""

    def __init__(
        self,
        inner: Any,
        unanswered: Unanswered,
        drain_seconds: float,
        stop: StdioStop | None = None,
        refuse_to: Any = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        super().__init__(inner)
        self._unanswered = unanswered
        self._drain_seconds = drain_seconds
        self._stop = stop
        self._refuse_to = refuse_to
        self._max_in_flight = max_in_flight

    def __aiter__(self) -> _Reading:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        while True:
            item = await self._next()
            request = _counted_request(item)
            full = len(self._unanswered) >= self._max_in_flight
            # The SDK keeps one request per id under way: of two, it answered both with one
            # id, and a cancel of that id reached only the newer (the older, no longer
            # counted, ran on beyond the bound).
            taken = request is not None and self._unanswered.under_way(request.id)
            again = request is not None and self._unanswered.initialized(request)
            self._unanswered.read(item)
            if request is None or not (full or taken or again) or self._refuse_to is None:
                return item
            # Counted as read and forgotten as its refusal is sent, like any other request.
            if taken:
                refusal = id_under_way(request.id)
            elif again:
                refusal = already_initialized(request.id)
            else:
                refusal = too_many_in_flight(request.id, self._max_in_flight)
            await self._refuse_to.send(SessionMessage(refusal))

    async def _next(self) -> SessionMessage | Exception:
        stop = self._stop
        try:
            if stop is None:
                item: SessionMessage | Exception = await self._inner.__anext__()
            else:
                with anyio.CancelScope() as stop._reading:
                    if not stop.stopped:
                        item = await self._inner.__anext__()
                stop._reading = None
                if stop.stopped:
                    raise StopAsyncIteration  # no drain: told to stop now
        except StopAsyncIteration:
            if stop is None:
                await self._unanswered.drained(self._drain_seconds)
            elif not stop.stopped:
                # Told to stop meanwhile (SIGTERM, the client gone), it waits no longer.
                with anyio.CancelScope() as stop._reading:
                    await self._unanswered.drained(self._drain_seconds)
                stop._reading = None
            raise
        return item

    async def receive(self) -> SessionMessage | Exception:
        return await self.__anext__()


class _Answering(WrappedStream):
    """The write stream, noting each answer (and each request of ours) once it is written."""

    def __init__(self, inner: Any, unanswered: Unanswered) -> None:
        super().__init__(inner)
        self._unanswered = unanswered

    async def send(self, item: SessionMessage) -> None:
        await self._inner.send(item)
        self._unanswered.sent(item)


async def run_stdio(
    server: MCPServer,
    drain_seconds: float = DRAIN_SECONDS,
    stop: StdioStop | None = None,
    max_in_flight: int | None = None,
) -> None:
    """``server.run_stdio_async()``, on the event-loop stdio transport; once stdin closes,
    the requests read before are answered (for up to ``drain_seconds``) before it returns;
    once ``stop`` is stopped, it returns as at the end of stdin, without waiting for them.
    A request read while ``max_in_flight`` (``MAX_IN_FLIGHT``) others are unanswered is
    refused."""
    if max_in_flight is None:
        max_in_flight = MAX_IN_FLIGHT
    if stop is None:
        stop = StdioStop()
    lowlevel = server._lowlevel_server
    unanswered = Unanswered()
    try:
        with splicing(server), anyio.CancelScope() as transport:
            # A client gone (its end of stdout closed) is stopped for as SIGTERM stops the
            # server: no answer can reach it, and its runs end recorded as aborted.
            async with event_loop_stdio(gone=stop.stop) as (read_stream, write_stream, lines):
                writer = _Answering(SplicingStream(write_stream), unanswered)
                # A line the transport cannot read is answered, not dropped (see unreadable).
                answering = AnsweringStream(read_stream, writer, lines)
                await lowlevel.run(
                    _Reading(answering, unanswered, drain_seconds, stop, writer, max_in_flight),
                    writer,
                    lowlevel.create_initialization_options(),
                )
                if stop.stopped:
                    # The transport's own reader waits for the next line or the end of stdin,
                    # and its exit waits for that reader: a client that stops its server with
                    # SIGTERM and keeps the pipe open would keep it running for good.
                    transport.cancel()
    except* PeerGone:
        log.info("the client closed the pipe; stopping")
    except* anyio.BrokenResourceError:
        # Told to stop, the server no longer takes what the transport read: a line it held
        # then fails to reach the closed read stream. A client that sent SIGTERM waits for
        # no answer to it.
        if not stop.stopped:
            raise
