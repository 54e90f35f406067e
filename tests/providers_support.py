"""Real loopback HTTP servers for the provider tests.

- ``fakellm``: the PyPI fake LLM server, started as a subprocess on a free port with the
  scripted config ``providers_fakellm.yaml`` (OpenAI and Anthropic, streaming, tool calls).
- ``ScriptServer``: a tiny HTTP/1.1 server on a real socket for what fakellm cannot do (it
  answers every streamed request with 200): status codes with Retry-After, usage and reasoning
  chunks, malformed lines, a connection dropped mid-stream, a stream that stalls at a ``Gate``
  until the test lets it go on.

Nothing here times anything: a test shows that an abort does not wait for the next chunk by
holding that chunk back (``Gate``) until the stream has ended, and that a retry waits as asked
by recording the waits the retry loop asks for (``record_waits``). Timeouts are hang guards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_support import LOOPBACK_HTTP, free_port

from mcp_agent.abort import AbortController
from mcp_agent.events import DoneEvent, ErrorEvent
from mcp_agent.messages import AssistantMessage, Model, UserMessage, parse_message
from mcp_agent.providers.base import LlmContext, StreamOptions
from mcp_agent.providers.common import Aborted, AbortRace

HERE = Path(__file__).parent
FAKELLM_CONFIG = HERE / "providers_fakellm.yaml"


@dataclass
class FakeLlm:
    base: str  # http://127.0.0.1:PORT

    @property
    def openai_base_url(self) -> str:
        return f"{self.base}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base


def _fakellm_command() -> list[str]:
    exe = Path(sys.executable).with_name("fakellm")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("fakellm")
    if found:
        return [found]
    return [sys.executable, "-m", "fakellm.cli"]


# A hang guard, not a speed check: fakellm (an interpreter importing its web stack) took past
# 20 s to answer on a loaded machine, and the module's every test then failed at its setup.
READY_WAIT = 90


def wait_for_fakellm(process: subprocess.Popen[bytes], base: str) -> None:
    """Until the fakellm ``process`` answers at ``base``; fails if it exits first or is not
    ready within READY_WAIT seconds (tried 20 times a second, through LOOPBACK_HTTP)."""
    deadline = time.monotonic() + READY_WAIT
    while True:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            pytest.fail(f"fakellm exited with {process.returncode}: {err[-2000:]}")
        try:
            if LOOPBACK_HTTP.get(f"{base}/_fakellm/stats", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"fakellm did not become ready within {READY_WAIT} s")
        time.sleep(0.05)


@pytest.fixture(scope="session", name="fakellm")
def fakellm_fixture() -> Iterable[FakeLlm]:
    """``fakellm`` serving ``providers_fakellm.yaml`` on a free loopback port (one per session)."""
    port = free_port()
    process = subprocess.Popen(
        [
            *_fakellm_command(),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--config",
            str(FAKELLM_CONFIG),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_fakellm(process, base)
        yield FakeLlm(base)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        if process.stderr:
            process.stderr.close()


def conversation_headers() -> dict[str, str]:
    """A fresh fakellm conversation, so that turn-based rules see turn 1."""
    return {"X-Fakellm-Conversation-Id": f"test-{uuid.uuid4().hex}"}


# --- the scripted loopback server -------------------------------------------------------------


@dataclass
class Peak:
    """The most memory (bytes, as tracemalloc counts it) allocated above what was held when
    ``peak_memory`` began, while its block ran; set when the block ends."""

    bytes: int = 0


@contextmanager
def peak_memory() -> Iterator[Peak]:
    """Measure the peak of memory held while the block runs (tracemalloc: left on if it was
    on already, as under ``python -X tracemalloc``)."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    held_before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    peak = Peak()
    try:
        yield peak
        peak.bytes = tracemalloc.get_traced_memory()[1] - held_before
    finally:
        if not tracing:
            tracemalloc.stop()


class Gate:
    """A place in a reply's body where the server holds back the rest until the test opens it.

    ``reached`` is set once everything before the gate has been sent. Made inside the test (an
    anyio event belongs to the running event loop)."""

    def __init__(self) -> None:
        self.reached = anyio.Event()
        self.opened = anyio.Event()

    def open(self) -> None:
        self.opened.set()


@dataclass
class Reply:
    """One scripted HTTP answer. ``body`` items are bytes to send (each its own write and
    chunk), floats (seconds to pause) or a ``Gate`` (wait until the test opens it). ``drop``
    closes the socket without finishing; ``reset`` resets it before the answer's head."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: list[bytes | float | Gate] = field(default_factory=list)
    drop: bool = False
    content_type: str = "text/event-stream"
    reset: bool = False  # reset the connection (RST) before sending anything


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    407: "Proxy Authentication Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


class ScriptServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.port = 0
        self.sent: list[bytes] = []  # every body chunk written, in order (all replies)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *replies: Reply) -> ScriptServer:
        self.replies.extend(replies)
        return self

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        buffer = b""
        try:
            async with stream:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = await stream.receive(65536)
                        buffer += data
                        if buffer.startswith(b"\x16\x03"):  # a TLS hello: no HTTP (uvicorn's
                            return  # 400 and hang-up, which a TLS client reads as no TLS)
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    lines = head.decode("latin-1").split("\r\n")
                    method, path, _ = lines[0].split(" ", 2)
                    headers = {}
                    for line in lines[1:]:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                    length = int(headers.get("content-length", "0"))
                    while len(buffer) < length:
                        buffer += await stream.receive(65536)
                    body, buffer = buffer[:length], buffer[length:]
                    self.requests.append(Request(method, path, headers, body))
                    reply = (
                        self.replies.popleft()
                        if self.replies
                        else Reply(
                            status=500, body=[b"no reply scripted"], content_type="text/plain"
                        )
                    )
                    if not await self._send(stream, reply):
                        return
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return

    async def _send(self, stream: anyio.abc.ByteStream, reply: Reply) -> bool:
        if reply.reset:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()
            return False
        reason = _REASONS.get(reply.status, "Status")
        head = [f"HTTP/1.1 {reply.status} {reason}", f"content-type: {reply.content_type}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.status >= 300 and not reply.drop:
            payload = b"".join(b for b in reply.body if isinstance(b, bytes))
            head.append(f"content-length: {len(payload)}")
            await stream.send(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
            return True
        head.append("transfer-encoding: chunked")
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode())
        for item in reply.body:
            if isinstance(item, Gate):
                item.reached.set()
                await item.opened.wait()
                continue
            if isinstance(item, float | int):
                await anyio.sleep(item)
                continue
            if item:
                await stream.send(f"{len(item):x}\r\n".encode() + item + b"\r\n")
                self.sent.append(item)
        if reply.drop:
            await stream.aclose()
            return False
        await stream.send(b"0\r\n\r\n")
        return True


@asynccontextmanager
async def script_server() -> AsyncIterator[ScriptServer]:
    server = ScriptServer()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server._handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


# --- SSE builders -----------------------------------------------------------------------------


def sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {text}\n\n".encode()


def oa_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [choice],
            **extra,
        }
    )


def oa_usage(prompt: int, completion: int, cached: int = 0) -> bytes:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return sse(
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    )


OA_DONE = b"data: [DONE]\n\n"


def oa_text_reply(
    *pieces: str,
    finish: str = "stop",
    usage: tuple[int, int] | tuple[int, int, int] | None = None,
) -> Reply:
    """``usage``: prompt, completion and, if given, cached tokens (``oa_usage``)."""
    body: list[bytes | float | Gate] = [oa_chunk({"role": "assistant"})]
    body += [oa_chunk({"content": p}) for p in pieces]
    body.append(oa_chunk({}, finish))
    if usage:
        body.append(oa_usage(*usage))
    body.append(OA_DONE)
    return Reply(body=body)


def oa_tool_call_reply(name: str, arguments: dict[str, Any]) -> Reply:
    """An answer of the model that calls ``name`` with ``arguments`` (one call, ``call_1``)."""
    call_ = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return Reply(
        body=[
            oa_chunk({"role": "assistant"}),
            oa_chunk({"tool_calls": [call_]}),
            oa_chunk({}, "tool_calls"),
            OA_DONE,
        ]
    )


def an_event(kind: str, **data: Any) -> bytes:
    return sse({"type": kind, **data}, event=kind)


def an_message_start(input_tokens: int = 10, **usage: int) -> bytes:
    return an_event(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "m",
            "stop_reason": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
        },
    )


def an_text_block(index: int, *pieces: str) -> list[bytes | float]:
    out: list[bytes | float] = [
        an_event("content_block_start", index=index, content_block={"type": "text", "text": ""})
    ]
    out += [
        an_event("content_block_delta", index=index, delta={"type": "text_delta", "text": p})
        for p in pieces
    ]
    out.append(an_event("content_block_stop", index=index))
    return out


def an_end(stop_reason: str = "end_turn", output_tokens: int = 5) -> list[bytes | float]:
    return [
        an_event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        ),
        an_event("message_stop"),
    ]


# --- running a stream -------------------------------------------------------------------------


def unknown_blocks_history() -> list[Any]:
    """A user and an assistant message each holding a block of a type pi does not have yet
    (kept as they are, never sent to a model)."""
    said = parse_message(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "hi"}, {"type": "redacted_thinking", "d": "z"}],
            "stopReason": "stop",
            "timestamp": 1,
        }
    )
    asked = parse_message(
        {"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "video"}]}
    )
    return [asked, said]


def user_context(text: str = "hello", **kwargs: Any) -> LlmContext:
    return LlmContext(
        system_prompt=kwargs.pop("system_prompt", "You are terse."),
        messages=[UserMessage(content=text)],
        **kwargs,
    )


async def collect(
    stream: AsyncIterator[Any],
    *,
    limit: float = 10,
    on_event: Callable[[Any], None] | None = None,
) -> tuple[list[Any], AssistantMessage]:
    """All events of a stream; checks it ends with exactly one final event. ``limit`` is a
    hang guard (a stream that never ends fails the test), not a speed target."""
    events: list[Any] = []
    try:
        with anyio.fail_after(limit):
            async for event in stream:
                events.append(event)
                if on_event is not None:
                    on_event(event)
    except TimeoutError:
        pytest.fail(f"the stream did not end (hang guard, {limit:g} s): {event_types(events)}")
    assert events, "the stream yielded nothing"
    final = events[-1]
    assert isinstance(final, DoneEvent | ErrorEvent), f"last event is {final.type}"
    assert not any(isinstance(e, DoneEvent | ErrorEvent) for e in events[:-1])
    return events, final.partial


def event_types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


async def abort_when_stalled(
    stream: AsyncIterator[Any],
    controller: AbortController,
    gate: Gate,
    *,
    text: str,
    reason: str | None = None,
    limit: float = 10,
) -> tuple[list[Any], AssistantMessage]:
    """Run ``stream`` against a reply that stalls at ``gate``, and abort while the reader waits
    for the next chunk: once the streamed text is ``text`` (all the server sent before the
    gate) and every task is blocked.

    The gate opens only after the stream has ended, so the next chunk never comes while the
    stream runs: a stream that waited for it after the abort would not end, and fails the
    test at ``limit`` (a hang guard). Returns what ``collect`` returns."""
    have_all = anyio.Event()
    seen = 0  # events the reader has had
    seen_at_abort: int | None = None

    def watch(event: Any) -> None:
        nonlocal seen
        seen += 1
        partial = getattr(event, "partial", None)
        if partial is not None and partial.text == text:
            have_all.set()

    async def abort_while_waiting() -> None:
        nonlocal seen_at_abort
        await have_all.wait()
        await gate.reached.wait()
        await anyio.wait_all_tasks_blocked()  # the reader is waiting for the next chunk
        seen_at_abort = seen
        if reason is None:
            controller.abort()
        else:
            controller.abort(reason)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(abort_while_waiting)
            events, final = await collect(stream, limit=limit, on_event=watch)
            tg.cancel_scope.cancel()  # the stream ended without the abort: asserted below
    finally:
        gate.open()
    assert seen_at_abort is not None, f"the stream ended before the abort: {event_types(events)}"
    # Nothing streamed after the abort but the end of the stream.
    assert event_types(events[seen_at_abort:]) == ["error"]
    return events, final


@dataclass
class Waits:
    """The waits the HTTP retry loop asked for (``AbortRace.sleep``), in order: how many
    requests the server had had by then and the seconds asked for; and how each ended
    (``"slept"`` or ``"aborted"``). ``started`` is set when the first wait begins."""

    asked: list[tuple[int, float]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    started: anyio.Event = field(default_factory=anyio.Event)


def record_waits(
    monkeypatch: pytest.MonkeyPatch, server: ScriptServer, *, sleep: bool = True
) -> Waits:
    """Record every wait the retry loop asks for. With ``sleep``, each is really waited (and
    an abort cuts it short); without, it returns at once (still a checkpoint)."""
    waits = Waits()
    original = AbortRace.sleep

    async def recording_sleep(race: AbortRace, seconds: float) -> None:
        waits.asked.append((len(server.requests), seconds))
        waits.started.set()
        try:
            await original(race, seconds if sleep else 0)
        except Aborted:
            waits.ended.append("aborted")
            raise
        waits.ended.append("slept")

    monkeypatch.setattr(AbortRace, "sleep", recording_sleep)
    return waits


def fast_retries(**extra: Any) -> dict[str, Any]:
    return {"max_retries": 3, "retry_base_delay": 0.01, "max_retry_delay": 0.05, **extra}


def options(**kwargs: Any) -> StreamOptions:
    extra = kwargs.pop("extra", {})
    return StreamOptions(extra={**fast_retries(), **extra}, **kwargs)


def model_at(base_url: str, model_id: str = "gpt-4o-mini", **fields: Any) -> Model:
    return Model(id=model_id, base_url=base_url, **fields)


__all__ = [
    "OA_DONE",
    "AbortController",
    "FakeLlm",
    "Gate",
    "Reply",
    "ScriptServer",
    "Waits",
    "abort_when_stalled",
    "an_end",
    "an_event",
    "an_message_start",
    "an_text_block",
    "collect",
    "conversation_headers",
    "event_types",
    "fakellm_fixture",
    "fast_retries",
    "model_at",
    "oa_chunk",
    "oa_text_reply",
    "oa_usage",
    "options",
    "record_waits",
    "script_server",
    "sse",
    "user_context",
]
