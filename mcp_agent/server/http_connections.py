"""HTTP connections that never finish sending a request are closed.

uvicorn starts no timer when a connection opens, and the keep-alive timer it starts after each
answer is put off by every byte that arrives: a connection that sends nothing, or its request's
head a byte every few seconds, held one of the connections the server serves at once
(``limit_concurrency``, what fits in the file descriptors) for ever, and once a client had
opened that many, every other client got 503. Here a connection has ``REQUEST_HEAD_SECONDS``
to send a request's line and headers, from the moment it opens or its last answer ends,
however its bytes trickle in. A request whose head has come is not timed: its body and its
answer (an agent run, an event stream) take what they take.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

# Longer than any client on any link takes to send a few KB of headers; short enough that
# a client holding connections open without a word frees them soon.
REQUEST_HEAD_SECONDS = 30.0


def http_protocol(seconds: float | None = None) -> type[asyncio.Protocol]:
    """uvicorn's protocol (``http="auto"``) with a deadline of ``seconds``
    (``REQUEST_HEAD_SECONDS``) for each request's head."""
    deadline = REQUEST_HEAD_SECONDS if seconds is None else seconds
    base: Any = AutoHTTPProtocol

    # uvicorn's protocols (httptools, h11) share these names: the request being served is
    # ``cycle``, replaced as each new request's head is parsed.
    class HeadDeadline(base):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:
                self._stop_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._idle():  # not when a pipelined request is already under way
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()
            super().connection_lost(exc)

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
            if self._idle() and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline
