"""Asking the model for a summary: one call, pi's system prompt, a clear error on failure."""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from mcp_agent.abort import AbortSignal
from mcp_agent.compaction.errors import CompactionError, SummaryTooLong
from mcp_agent.compaction.prompts import (
    SUMMARIZATION_PROMPT,
    SUMMARIZATION_SYSTEM_PROMPT,
    TURN_PREFIX_SUMMARIZATION_PROMPT,
    TURN_PREFIX_UPDATE_NOTE,
    UPDATE_SUMMARIZATION_PROMPT,
    conversation_block,
)
from mcp_agent.compaction.tokens import DEFAULT_RESERVE_TOKENS
from mcp_agent.events import AssistantMessageEvent
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    Model,
    StopReason,
    TextContent,
    ThinkingLevel,
    Usage,
    UserMessage,
)
from mcp_agent.providers.base import (
    LlmContext,
    StreamFn,
    StreamOptions,
    final_message,
    is_context_overflow,
    without_partial_note,
)

# How a summariser's failure ends: compaction and branch summaries write nothing then.
NOTHING_WRITTEN = "; nothing was written"


@dataclass
class Completion:
    text: str
    usage: Usage
    # What the summary's reader must know: it stopped at the output limit, so may lack its end.
    warnings: list[str] = field(default_factory=list)


async def _drain(
    stream: AsyncIterator[AssistantMessageEvent], signal: AbortSignal | None
) -> AssistantMessage | None:
    """The stream's final message; None when ``signal`` fired first."""
    result: AssistantMessage | None = None
    with anyio.CancelScope() as scope:
        remove = signal.on_abort(scope.cancel) if signal is not None else None
        try:
            result = await final_message(stream)
        finally:
            if remove is not None:
                remove()
            close = getattr(stream, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()
    return result


async def complete_summary(
    model: Model,
    stream_fn: StreamFn,
    prompt: str,
    *,
    max_tokens: int,
    what: str = "Summarization",
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    """One summariser call: pi's system prompt, ``prompt`` as the only user message."""
    level = ThinkingLevel(thinking_level) if model.reasoning else ThinkingLevel.OFF
    if model.max_tokens > 0:
        max_tokens = min(max_tokens, model.max_tokens)
    request = LlmContext(
        system_prompt=SUMMARIZATION_SYSTEM_PROMPT,
        messages=[UserMessage(content=[TextContent(text=prompt)])],
    )
    stream_options = replace(
        options or StreamOptions(), signal=signal, max_tokens=max_tokens, thinking_level=level
    )
    if signal is not None and signal.aborted:
        raise CompactionError("aborted", f"{what} was aborted")
    try:
        stream: Any = stream_fn(model, request, stream_options)
        if inspect.isawaitable(stream):
            stream = await stream
        response = await _drain(stream, signal)
    except Exception as error:  # a provider should not raise; one that does still fails cleanly
        raise CompactionError("summarizer_failed", f"{what} failed: {error}") from error
    if response is None or response.stop_reason == StopReason.ABORTED:
        raise CompactionError("aborted", f"{what} was aborted")
    if response.stop_reason == StopReason.ERROR:
        # A stream cut off is said to keep its partial response: a summary keeps nothing.
        reason = without_partial_note(response.error_message or "unknown error")
        failure = SummaryTooLong if is_context_overflow(response) else CompactionError
        raise failure("summarizer_failed", f"{what} failed: {reason}{NOTHING_WRITTEN}")
    text = "\n".join(b.text for b in response.content if isinstance(b, TextContent))
    if not text.strip():
        raise CompactionError("summarizer_failed", f"{what} failed: the model returned no text")
    warnings = []
    if response.stop_reason == StopReason.LENGTH:
        # Written all the same (it is the summary there is), but never as if whole.
        warnings.append(
            f"{what} stopped at its output limit of {max_tokens:,} tokens: the summary written"
            " may lack its end (compact again, or ask for a shorter one in the instructions)"
        )
    return Completion(text, response.usage, warnings)


async def generate_summary(
    messages: Sequence[BaseMessage],
    model: Model,
    stream_fn: StreamFn,
    *,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    instructions: str | None = None,
    previous_summary: str | None = None,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    """A structured summary of ``messages``; with ``previous_summary``, that summary updated
    with them (pi's generateSummary)."""
    prompt = UPDATE_SUMMARIZATION_PROMPT if previous_summary else SUMMARIZATION_PROMPT
    if instructions:
        prompt = f"{prompt}\n\nAdditional focus: {instructions}"
    text = conversation_block(messages)
    if previous_summary:
        text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
    return await complete_summary(
        model,
        stream_fn,
        text + prompt,
        max_tokens=math.floor(0.8 * reserve_tokens),
        signal=signal,
        options=options,
        thinking_level=thinking_level,
    )


async def generate_turn_prefix_summary(
    messages: Sequence[BaseMessage],
    model: Model,
    stream_fn: StreamFn,
    *,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    previous_summary: str | None = None,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    """A summary of a split turn's beginning (pi's generateTurnPrefixSummary); with
    ``previous_summary``, that of an earlier part of it, taken in."""
    text = conversation_block(messages)
    prompt = TURN_PREFIX_SUMMARIZATION_PROMPT
    if previous_summary:
        text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
        prompt = f"{prompt}\n\n{TURN_PREFIX_UPDATE_NOTE}"
    return await complete_summary(
        model,
        stream_fn,
        text + prompt,
        max_tokens=math.floor(0.5 * reserve_tokens),
        what="Turn prefix summarization",
        signal=signal,
        options=options,
        thinking_level=thinking_level,
    )
