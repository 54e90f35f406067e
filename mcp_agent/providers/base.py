"""What the loop hands a provider and what it gets back.

A provider is a ``StreamFn``: called with a model, the LLM context and options, it returns an
async iterator of ``AssistantMessageEvent``s whose last event is ``DoneEvent`` or ``ErrorEvent``
carrying the final ``AssistantMessage``. A provider never raises: failures, including aborts,
come back as that final message with stop reason ``error`` or ``aborted``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.abort import AbortSignal
from mcp_agent.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from mcp_agent.messages import AssistantMessage, Message, Model, StopReason, ThinkingLevel
from mcp_agent.tools import AgentTool


@dataclass
class LlmContext:
    system_prompt: str
    messages: list[Message]
    tools: list[AgentTool] | None = None


@dataclass
class StreamOptions:
    signal: AbortSignal | None = None
    thinking_level: ThinkingLevel = ThinkingLevel.OFF
    max_tokens: int | None = None
    temperature: float | None = None
    api_key: str | None = None
    session_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


StreamFn = Callable[[Model, LlmContext, StreamOptions], AsyncIterator[AssistantMessageEvent]]


# Providers start the error message of a refused over-long request with this, so that the
# agent can compact and retry without knowing each API's wording.
CONTEXT_OVERFLOW_MARK = "context_overflow"
# How an error answer cut off mid-stream ends: the agent keeps what came, as pi does. A caller
# that keeps nothing of it (a summary) says so instead (``without_partial_note``).
PARTIAL_KEPT = "; the partial response is kept"


def without_partial_note(error: str) -> str:
    """``error`` less its closing ``PARTIAL_KEPT``, for a caller that writes nothing of it."""
    return error.removesuffix(PARTIAL_KEPT)


# A model call that failed on the way, not for what was asked, in our providers' words: the API
# said in the middle of the stream, in its error object's type, code or status (its text only
# when it has none of them, ``http.passing_fault``), that it was rate limited, overloaded or
# failing, or gave such a finish reason; the stream broke off, or nothing came for too long.
# Running the turn again may well work. HTTP errors (429, 5xx) were already retried with
# back-off by the request itself, and a refused request would fail again.
_TRANSIENT = re.compile(
    r"the server (?:overloaded|broke off|rate limited the request|failed) mid-stream"
    r"|the connection broke off mid-stream|stream ended before|timed out waiting for the response"
)


# Error codes that say the account has run out (OpenAI's 429 insufficient_quota): waiting
# and trying again meets the same.
_OUT_OF_CREDIT = ("insufficient_quota", "billing_hard_limit_reached")


def out_of_credit(detail: str) -> bool:
    return any(code in detail for code in _OUT_OF_CREDIT)


def is_transient_error(message: AssistantMessage) -> bool:
    """True when an answer failed for a passing reason (see ``_TRANSIENT``)."""
    text = message.error_message
    if message.stop_reason != StopReason.ERROR or not text or is_context_overflow(message):
        return False
    return _TRANSIENT.search(text) is not None and not out_of_credit(text)


def is_context_overflow(message: AssistantMessage, context_window: int = 0) -> bool:
    """True when the context was too long for the model: it refused the request; or, given
    the model's ``context_window`` (as pi's isContextOverflow), it answered having read more
    than fits (a server that cuts the input silently), or stopped for length with nothing
    written and the window full (one that cut the input to fit)."""
    if message.stop_reason == StopReason.ERROR:
        return bool(message.error_message and CONTEXT_OVERFLOW_MARK in message.error_message)
    if context_window <= 0:
        return False
    read = message.usage.input + message.usage.cache_read
    if message.stop_reason == StopReason.STOP:
        return read > context_window
    return (
        message.stop_reason == StopReason.LENGTH
        and message.usage.output == 0
        and read >= context_window * 0.99
    )


async def final_message(events: AsyncIterator[AssistantMessageEvent]) -> AssistantMessage:
    """Drain a stream and return its final message."""
    last: AssistantMessage | None = None
    async for event in events:
        if isinstance(event, DoneEvent | ErrorEvent):
            last = event.partial
    if last is None:
        return AssistantMessage(
            stop_reason=StopReason.ERROR, error_message="the provider ended without a message"
        )
    return last
