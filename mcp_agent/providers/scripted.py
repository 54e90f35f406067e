"""A deterministic provider for tests and demos: it plays back a script of responses.

Each response is streamed the way a real provider streams one (``start``, then per content block
``*_start`` / ``*_delta``… / ``*_end``, then ``done`` or ``error``), in chunks of ``chunk_size``
characters, optionally with a delay between chunks. Usage is estimated from the characters in and
out (four to a token) and priced with the model's costs. An abort ends the stream with stop reason
``aborted`` at the next chunk; a response may instead simulate a provider error, a stream that
raises, or a provider that ignores the abort signal.

    provider = ScriptedProvider([
        reply("I'll check the directory for you.", tool_call("bash", {"command": "ls -la"})),
        reply("There are two files."),
    ])
    config = AgentLoopConfig(model=scripted_model(), stream_fn=provider, ...)

A script entry may also be a plain string (a text reply) or a callable that decides from the
``LlmContext`` (sync or async, returning a response or a string). ``ScriptedProvider.from_data``
builds one from JSON-like data, for manifests and the command line.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.lowlevel

from mcp_agent.abort import AbortSignal, abort_message
from mcp_agent.events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from mcp_agent.messages import (
    AssistantMessage,
    Model,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    calculate_cost,
    content_text,
)
from mcp_agent.providers.base import LlmContext, StreamOptions
from mcp_agent.providers.common import append_str

SCRIPTED_API = "scripted"
SCRIPTED_PROVIDER = "scripted"
# The scripted models a name reaches (``scripted:<id>``, through the model registry), with what
# each does. Any other id is an error naming these; tests and embedders serve scripts of their
# own through a ScriptedProvider (or model overrides), not through a made-up name.
SCRIPTED_MODELS = {"echo": "repeats the last user message (for trying things without a key)"}
# Chunks streamed without a delay between turns of the event loop (see pause in _stream).
CHUNKS_PER_TURN = 64

Block = TextContent | ThinkingContent | ToolCall


@dataclass
class ScriptedResponse:
    """One model answer. ``stop_reason`` defaults to ``toolUse`` when there are tool calls and to
    ``stop`` otherwise."""

    content: list[Block] = field(default_factory=list)
    stop_reason: StopReason | None = None
    # Stream the content, then end with an ErrorEvent carrying this message (stop reason error).
    error: str | None = None
    # Stream the content, then raise this from the stream (a provider that breaks its contract).
    raise_error: str | None = None
    # Seconds between chunks; None takes the provider's default.
    delay: float | None = None
    chunk_size: int | None = None
    # Reported as is instead of the estimate.
    usage: Usage | None = None
    # Keep streaming after an abort (a misbehaving provider; the loop must cut it off).
    ignore_abort: bool = False


Responder = Callable[[LlmContext], "ScriptedResponse | str | Awaitable[ScriptedResponse | str]"]
ScriptEntry = ScriptedResponse | str | Responder


def reply(*blocks: str | Block, **options: Any) -> ScriptedResponse:
    """A response from content blocks; a string is a text block."""
    content = [TextContent(text=b) if isinstance(b, str) else b for b in blocks]
    return ScriptedResponse(content=content, **options)


_call_ids = itertools.count(1)


def tool_call(name: str, arguments: Mapping[str, Any] | None = None, *, id: str = "") -> ToolCall:
    """A tool call block; without an id, one like ``call_7`` is made up."""
    return ToolCall(id=id or f"call_{next(_call_ids)}", name=name, arguments=dict(arguments or {}))


def thinking(text: str) -> ThinkingContent:
    return ThinkingContent(thinking=text)


def provider_error(message: str, *blocks: str | Block, **options: Any) -> ScriptedResponse:
    """A response that fails like an API error, after streaming ``blocks``."""
    return reply(*blocks, error=message, **options)


def scripted_model(model_id: str = "scripted", **fields: Any) -> Model:
    """A model record for the scripted provider (one that reasons, so that any thinking
    level can be played back)."""
    fields.setdefault("name", f"Scripted ({model_id})")
    fields.setdefault("reasoning", True)
    return Model(id=model_id, api=SCRIPTED_API, provider=SCRIPTED_PROVIDER, **fields)


def echo_responder(context: LlmContext) -> ScriptedResponse:
    """Answers with the text of the last user message (a demo model that needs no script)."""
    for message in reversed(context.messages):
        if message.role == "user":
            return reply(content_text(message.content) or "(nothing to echo)")
    return reply("(nothing to echo)")


class ScriptedProvider:
    """A ``StreamFn`` that plays back ``script``; ``calls`` records each context it was given.

    ``script`` is a sequence of entries consumed one per model call, or a single responder
    called for every model call. When the sequence runs out, ``when_exhausted="error"`` answers
    with a provider error naming the problem and ``"repeat"`` plays the last entry again.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] | Responder,
        *,
        chunk_size: int = 16,
        delay: float = 0.0,
        when_exhausted: Literal["error", "repeat"] = "error",
        api: str = SCRIPTED_API,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self._responder: Responder | None = script if callable(script) else None
        self._script: list[ScriptEntry] = [] if callable(script) else list(script)
        self._next = 0
        self.chunk_size = chunk_size
        self.delay = delay
        self.when_exhausted = when_exhausted
        self.api = api
        self.calls: list[LlmContext] = []

    @classmethod
    def from_data(cls, data: Sequence[str | Mapping[str, Any]], **options: Any) -> ScriptedProvider:
        """A provider from JSON-like entries (manifests, the command line). Each entry is a
        string (a text reply) or an object with any of ``text``, ``thinking``,
        ``toolCalls: [{name, arguments, id?}]``, ``error``, ``stopReason``, ``delay``."""
        return cls([_response_from_data(entry, i) for i, entry in enumerate(data)], **options)

    @classmethod
    def echo(cls, **options: Any) -> ScriptedProvider:
        return cls(echo_responder, **options)

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next

    def __call__(
        self, model: Model, context: LlmContext, options: StreamOptions
    ) -> AsyncIterator[AssistantMessageEvent]:
        self.calls.append(context)
        return self._stream(model, context, options)

    async def _response_for(self, context: LlmContext) -> ScriptedResponse:
        entry: ScriptEntry
        if self._responder is not None:
            entry = self._responder
        elif self._next < len(self._script):
            entry = self._script[self._next]
            self._next += 1
        elif self.when_exhausted == "repeat" and self._script:
            entry = self._script[-1]
        else:
            return ScriptedResponse(
                error=f"scripted provider: script exhausted after {len(self._script)} responses"
            )
        answer: Any = entry(context) if callable(entry) else entry
        if inspect.isawaitable(answer):
            answer = await answer
        return reply(answer) if isinstance(answer, str) else answer

    async def _stream(
        self, model: Model, context: LlmContext, options: StreamOptions
    ) -> AsyncIterator[AssistantMessageEvent]:
        response = await self._response_for(context)
        signal = None if response.ignore_abort else options.signal
        delay = self.delay if response.delay is None else response.delay
        size = response.chunk_size or self.chunk_size
        message = AssistantMessage(api=self.api, provider=model.provider, model=model.id)

        sent = 0

        async def pause() -> bool:
            """Wait between chunks; True when the stream must end as aborted."""
            nonlocal sent
            if delay > 0:
                await _sleep(delay, signal)
            else:
                # Without a delay a long answer would hold the event loop to its end (a
                # 1 MB echo is 62,500 chunks): the loop gets a turn every so often.
                sent += 1
                if sent % CHUNKS_PER_TURN == 0:
                    await anyio.lowlevel.checkpoint()
            return signal is not None and signal.aborted

        def aborted() -> ErrorEvent:
            message.stop_reason = StopReason.ABORTED
            message.error_message = abort_message(signal)
            message.usage = self._usage(model, context, message)
            return ErrorEvent(partial=message)

        if signal is not None and signal.aborted:
            yield aborted()
            return
        yield StartEvent(partial=message)
        for block in response.content:
            index = len(message.content)
            if isinstance(block, TextContent):
                text = TextContent(text="")
                message.content.append(text)
                yield TextStartEvent(partial=message, content_index=index)
                for chunk in _chunks(block.text, size):
                    if await pause():
                        yield aborted()
                        return
                    append_str(text, "text", chunk)
                    yield TextDeltaEvent(partial=message, content_index=index, delta=chunk)
                yield TextEndEvent(partial=message, content_index=index, content=text.text)
            elif isinstance(block, ThinkingContent):
                thought = ThinkingContent(thinking="")
                message.content.append(thought)
                yield ThinkingStartEvent(partial=message, content_index=index)
                for chunk in _chunks(block.thinking, size):
                    if await pause():
                        yield aborted()
                        return
                    append_str(thought, "thinking", chunk)
                    yield ThinkingDeltaEvent(partial=message, content_index=index, delta=chunk)
                yield ThinkingEndEvent(
                    partial=message, content_index=index, content=thought.thinking
                )
            else:
                call = ToolCall(id=block.id, name=block.name, partial_json="")
                message.content.append(call)
                yield ToolCallStartEvent(partial=message, content_index=index)
                for chunk in _chunks(json.dumps(block.arguments), size):
                    if await pause():
                        yield aborted()
                        return
                    append_str(call, "partial_json", chunk)
                    yield ToolCallDeltaEvent(partial=message, content_index=index, delta=chunk)
                call.arguments = dict(block.arguments)
                call.partial_json = None
                yield ToolCallEndEvent(partial=message, content_index=index)
        if await pause():
            yield aborted()
            return
        if response.raise_error is not None:
            raise RuntimeError(response.raise_error)
        message.usage = response.usage or self._usage(model, context, message)
        if response.error is not None:
            message.stop_reason = StopReason.ERROR
            message.error_message = response.error
            yield ErrorEvent(partial=message)
            return
        if response.stop_reason is not None:
            message.stop_reason = response.stop_reason
        else:
            message.stop_reason = StopReason.TOOL_USE if message.tool_calls else StopReason.STOP
        yield DoneEvent(partial=message)

    @staticmethod
    def _usage(model: Model, context: LlmContext, message: AssistantMessage) -> Usage:
        chars_in = len(context.system_prompt) + sum(_chars(m) for m in context.messages)
        chars_in += sum(
            len(t.description) + len(json.dumps(t.parameters)) for t in context.tools or ()
        )
        usage = Usage(input=_tokens(chars_in), output=_tokens(_chars(message)))
        usage.total_tokens = usage.input + usage.output
        calculate_cost(model, usage)
        return usage


async def _sleep(seconds: float, signal: AbortSignal | None) -> None:
    if signal is None:
        await anyio.sleep(seconds)
        return
    with anyio.move_on_after(seconds):
        await signal.wait()


def _chunks(text: str, size: int) -> Iterable[str]:
    return (text[i : i + size] for i in range(0, len(text), size))


def _chars(message: Any) -> int:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return len(content)
    total = 0
    for block in content:
        if isinstance(block, TextContent):
            total += len(block.text)
        elif isinstance(block, ThinkingContent):
            total += len(block.thinking)
        elif isinstance(block, ToolCall):
            total += len(block.name) + len(json.dumps(block.arguments))
    return total


def _tokens(chars: int) -> int:
    return (chars + 3) // 4


def _response_from_data(entry: str | Mapping[str, Any], index: int) -> ScriptedResponse:
    if isinstance(entry, str):
        return reply(entry)
    if not isinstance(entry, Mapping):
        raise ValueError(f"script[{index}]: expected a string or an object")
    known = {"text", "thinking", "toolCalls", "error", "stopReason", "delay"}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(
            f"script[{index}]: unknown field(s) {', '.join(sorted(unknown))}; "
            f"expected {', '.join(sorted(known))}"
        )
    blocks: list[str | Block] = []
    if entry.get("thinking"):
        blocks.append(thinking(str(entry["thinking"])))
    if entry.get("text"):
        blocks.append(str(entry["text"]))
    for j, call in enumerate(entry.get("toolCalls") or ()):
        if not isinstance(call, Mapping) or "name" not in call:
            raise ValueError(f"script[{index}].toolCalls[{j}]: expected an object with a name")
        blocks.append(tool_call(call["name"], call.get("arguments"), id=call.get("id", "")))
    stop = entry.get("stopReason")
    return reply(
        *blocks,
        error=entry.get("error"),
        stop_reason=StopReason(stop) if stop else None,
        delay=entry.get("delay"),
    )
