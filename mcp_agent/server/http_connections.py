"""HTTP connections that never finish sending a request are closed.

uvicorn starts no timer when a connection opens, and the keep-alive timer it starts after each
answer is put off by every byte that arrives: a connection that sends nothing, or its request's
head a byte every few seconds, held one of the connections the server serves at once
(``limit_concurrency``, what fits in the file descriptors) for ever, and once a client had
opened that many, every other client got 503. Here a connection has ``REQUEST_HEAD_SECONDS``
to send a request's line and headers, from the moment it opens or its last answer ends,
however its bytes trickle in. Its body then has as long again, and after that must keep
coming at ``MIN_BYTES_PER_SECOND`` on average (a head followed by a body a byte at a time held
the connection as a trickled head did). A request whose body has come is not timed: its answer
(an agent run, an event stream) takes what it takes, but a client must take what it is sent:
once the connection's send buffer is full, it has ``REQUEST_HEAD_SECONDS`` and after that
must read ``MIN_BYTES_PER_SECOND`` on average, else the connection is dropped with what it held. A client
that stopped reading kept its answers (an export of megabytes, about three times its size
as sent) in the server's memory for as long as it kept the connection: fifty of them, 1.4 GB.

A request's line and headers hold at most ``MAX_HEAD_BYTES``: uvicorn's httptools parser keeps
a head however long it grows, each piece of a long header joined to what came before (bytes
copied again and again on the event loop), so one client sending a header without end, as
fast as loopback carries it, grew the server by hundreds of megabytes in the head's 30 s and
slowed every other client's answers. Past the bound the client is answered 431 and the
connection closed. The same bound holds for what a request sends besides its body (a chunked
body's framing, allowed to grow with the body, and its trailers, kept as headers are).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Longer than any client on any link takes to send a few KB of headers; short enough that
# a client holding connections open without a word frees them soon.
REQUEST_HEAD_SECONDS = 30.0
# The slowest a request's body may come past its first REQUEST_HEAD_SECONDS, and an answer be
# read: a link this slow moves the largest body taken (4 MiB) in about an hour; a client that
# moves less holds a connection, and the memory of its answers, for nothing.
MIN_BYTES_PER_SECOND = 1024
# How long a connection is kept open for a client's next request: well past what clients keep
# theirs for (httpx, under the Python SDK's client, 5 s; Node's fetch 4 s). At uvicorn's own 5 s
# a client reusing its connection at 4 to 5 s met the server closing it, on a loaded machine
# ("other side closed", and a POST is not sent again); a connection that says nothing for
# REQUEST_HEAD_SECONDS is closed anyway.
KEEP_ALIVE_SECONDS = 20.0
# The most a request's line and headers may hold, in bytes: four times what h11 (uvicorn's
# other parser) and Node take, room for any token or cookie a client sends.
MAX_HEAD_BYTES = 64 * 1024
# What a chunked body's framing may add to it: a chunk's size line and its end, for chunks of
# a few bytes each (clients send far larger ones).
FRAMING_PER_BODY_BYTE = 8


def head_too_long_response() -> bytes:
    """The answer to a request whose head (or what it sent besides its body) passed
    ``MAX_HEAD_BYTES``: a 431 whose JSON-RPC error says why, as MCP clients show refusals."""
    message = (
        f"Request Header Fields Too Large: a request's line and headers may hold at most "
        f"{MAX_HEAD_BYTES:,} bytes; this connection is closed"
    )
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    ).encode()
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n" + body
    )


def unsent(transport: asyncio.WriteTransport) -> int:
    """The bytes written to ``transport`` that its client has not taken: those waiting in the
    event loop's buffer, and on Linux those in the kernel's send queue. The kernel lets the
    loop refill its queue only once a third of it is free, so the loop's buffer alone can stand
    still for minutes while a slow client reads steadily."""
    queued = 0
    with contextlib.suppress(ImportError, OSError, AttributeError, ValueError):
        import fcntl
        import termios

        sock = transport.get_extra_info("socket")
        answer = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        queued = struct.unpack("i", answer)[0]
    return transport.get_write_buffer_size() + queued


def waiting(transport: asyncio.BaseTransport) -> bool:
    """Whether bytes from the client wait in the kernel, not yet read (Linux)."""
    with contextlib.suppress(ImportError, OSError, AttributeError, ValueError):
        import fcntl
        import termios

        sock = transport.get_extra_info("socket")
        answer = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        return bool(struct.unpack("i", answer)[0])
    return False


def http_protocol(seconds: float | None = None) -> type[asyncio.Protocol]:
    """uvicorn's protocol (``http="auto"``) with a deadline of ``seconds``
    (``REQUEST_HEAD_SECONDS``) for each request's head, for its body and for reading the
    answers, as above."""
    deadline = REQUEST_HEAD_SECONDS if seconds is None else seconds
    keep_alive = KEEP_ALIVE_SECONDS
    base: Any = AutoHTTPProtocol
    # h11 bounds a head itself (16 KiB), and hands over no body as it comes to count.
    counts_heads = issubclass(base, HttpToolsProtocol)

    # uvicorn's protocols (httptools, h11) share these names: the request being served is
    # ``cycle``, replaced as each new request's head is parsed; its ``more_body`` holds until
    # the body has come whole; ``flow.read_paused`` while the app has not taken what came.
    class Deadlines(base):
        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        # Since the head of the request whose body is awaited: when it came, the bytes since.
        _body_started = 0.0
        _body_bytes = 0
        # While the send buffer is full (uvicorn paused writing): the check of the client's
        # reading, when the buffer filled and what was waiting to be sent then.
        _send_timer: asyncio.TimerHandle | None = None
        _reading_started = 0.0
        _unsent = 0
        # Since the last head was parsed, or the body after it ended (or the connection
        # opened): the bytes received, and those of them that were a body.
        _received = 0
        _body_received = 0
        # Answered 431 (``_head_too_long``): what the client still sends is let go of.
        _refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self.timeout_keep_alive = keep_alive
            self._await_head()

        def timeout_keep_alive_handler(self) -> None:
            """Closes a kept-alive connection that sent nothing more, unless its next request
            waits unread: one that came while the server was stopped (SIGSTOP, its machine
            paused). Woken from such a stop, asyncio's loop (without uvloop) reads nothing in
            its first turn (Python's epoll gives no events when a wait interrupted so is past
            its deadline) and runs the timers then due, so closing dropped a request sent in
            time, unanswered (an MCP client's transport, and the client, failed with it)."""
            if waiting(self.transport):
                self.timeout_keep_alive_task = self.loop.call_later(
                    keep_alive, self.timeout_keep_alive_handler
                )
                return
            super().timeout_keep_alive_handler()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # answered 431: read and let go until the connection closes
            before = self.cycle
            in_body = before is not None and before.more_body
            super().data_received(data)
            if self.cycle is not before:
                self._received = self._body_received = 0
                self._stop_timer()
                self._stop_body_timer()
                if self.cycle.more_body:
                    self._await_body()
                return
            if self._body_timer is not None:
                self._body_bytes += len(data)
                if not self.cycle.more_body:
                    self._stop_body_timer()
            if not counts_heads or self.transport.is_closing():
                return
            if in_body and not self.cycle.more_body:
                # The body ended in this piece: what comes next is the next request's head.
                self._received = self._body_received = 0
            else:
                self._received += len(data)
                besides_body = self._received - self._body_received
                if besides_body > MAX_HEAD_BYTES + FRAMING_PER_BODY_BYTE * self._body_received:
                    self._head_too_long()

        def on_body(self, body: bytes) -> None:
            self._body_received += len(body)
            super().on_body(body)

        def _head_too_long(self) -> None:
            """Answers 431 and ends the connection's sending, then reads on and lets go of
            what still comes until the deadline closes it: closed at once, with the client's
            bytes still unread, the connection would be reset, and the client lose the answer.
            An answer already under way on the connection (its client sent the next request's
            head meanwhile) cannot be followed by another: the connection is closed."""
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete and cycle.response_started:
                self.transport.close()
                return
            if cycle is not None and not cycle.response_complete:
                # Its app, waiting for the rest of the body, answers no more here.
                cycle.disconnected = True
                cycle.message_event.set()
            self._refused = True
            self._stop_body_timer()
            self.transport.write(head_too_long_response())
            with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
                self.transport.write_eof()
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()
            self._stop_timer()
            self._head_timer = self.loop.call_later(deadline, self.transport.close)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._idle():  # not when a pipelined request is already under way
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()
            self._stop_body_timer()
            self._stop_send_timer()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._send_timer is None:
                self._await_reading()

        def resume_writing(self) -> None:
            self._stop_send_timer()
            super().resume_writing()

        def _idle(self) -> bool:
            return self.cycle is None or bool(self.cycle.response_complete)

        def _await_head(self) -> None:
            self._stop_timer()
            self._head_timer = self.loop.call_later(deadline, self._head_late)

        def _stop_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if waiting(self.transport):  # came while the server was stopped: read it first
                self._await_head()
            elif self._idle() and not self.transport.is_closing():
                self.transport.close()

        def _await_body(self) -> None:
            self._body_started = self.loop.time()
            self._body_bytes = 0
            self._body_timer = self.loop.call_later(deadline, self._body_due)

        def _stop_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_due(self) -> None:
            """Past the body's time so far: closes the connection unless what came since
            earns it more time, or the app is the one not reading (uvicorn paused reading)."""
            self._body_timer = None
            if self.cycle is None or not self.cycle.more_body or self.transport.is_closing():
                return
            earned = self._body_started + deadline + self._body_bytes / MIN_BYTES_PER_SECOND
            now = self.loop.time()
            if self.flow.read_paused or now < earned or waiting(self.transport):
                self._body_timer = self.loop.call_at(max(earned, now + 1.0), self._body_due)
                return
            self.transport.close()

        def _await_reading(self) -> None:
            self._reading_started = self.loop.time()
            self._unsent = unsent(self.transport)
            self._send_timer = self.loop.call_later(deadline, self._reading_due)

        def _stop_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _reading_due(self) -> None:
            """The send buffer stayed full since it filled: drops the connection (and what
            waits to be sent on it, which closing would keep until it is sent) unless what the
            client read since earns it more time. Read on average, as a receiver takes its
            bytes in steps of its window."""
            self._send_timer = None
            if self.transport.is_closing() and self.transport.get_write_buffer_size() == 0:
                return
            read = self._unsent - unsent(self.transport)
            earned = self._reading_started + deadline + read / MIN_BYTES_PER_SECOND
            now = self.loop.time()
            if now < earned:
                self._send_timer = self.loop.call_at(max(earned, now + 1.0), self._reading_due)
                return
            self.transport.abort()

    return Deadlines
