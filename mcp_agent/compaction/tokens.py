"""Token accounting (pi's): the newest usable usage plus an estimate of what follows it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    BashExecutionMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
    ImageContent,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

DEFAULT_RESERVE_TOKENS = 16_384
DEFAULT_KEEP_RECENT_TOKENS = 20_000
IMAGE_CHARS = 4_800


def js_length(text: str) -> int:
    """``text.length`` as JavaScript counts it, in UTF-16 code units: a character outside the
    Basic Multilingual Plane (an emoji, a CJK extension ideograph) is two."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _js_number(value: float) -> str:
    """A finite number as JavaScript writes it (Number.prototype.toString): 1.0 as "1",
    1e-07 as "1e-7", 1e+17 as "100000000000000000". Both languages write the shortest digits
    that read back the same; only where the point and the exponent go differs."""
    if value == 0:
        return "0"
    _sign, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    text, k = "".join(map(str, digits)), len(digits)
    n = k + int(exponent)
    prefix = "-" if value < 0 else ""
    if k <= n <= 21:
        return prefix + text + "0" * (n - k)
    if 0 < n <= 21:
        return prefix + text[:n] + "." + text[n:]
    if -6 < n <= 0:
        return prefix + "0." + "0" * -n + text
    mantissa = text if k == 1 else text[0] + "." + text[1:]
    return f"{prefix}{mantissa}e{'+' if n >= 1 else '-'}{abs(n - 1)}"


def js_json_length(value: Any) -> int:
    """``JSON.stringify(value).length`` in JavaScript, of a value read from JSON: its numbers
    as JavaScript writes them (a whole number past 2**53, or a float, through ``_js_number``;
    past the largest float, null), its strings in UTF-16 code units."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += js_length(json.dumps(item, ensure_ascii=False))
        elif item is None or item is True:
            total += 4
        elif item is False:
            total += 5
        elif isinstance(item, int) and abs(item) < 2**53:
            total += len(str(item))
        elif isinstance(item, int | float):
            try:
                number = float(item)
            except OverflowError:
                number = math.inf
            total += len(_js_number(number)) if math.isfinite(number) else 4
        elif isinstance(item, Mapping):
            total += 2 + max(len(item) - 1, 0) + len(item)  # braces, commas, colons
            for key, child in item.items():
                stack.extend((str(key), child))
        elif isinstance(item, list | tuple):
            total += 2 + max(len(item) - 1, 0)
            stack.extend(item)
        else:
            total += js_length(json.dumps(item, ensure_ascii=False, default=str))
    return total


def _content_chars(content: str | Sequence[Any], image_chars: int) -> int:
    if isinstance(content, str):
        return js_length(content)
    chars = 0
    for block in content:
        if isinstance(block, TextContent):
            chars += js_length(block.text)
        elif isinstance(block, ImageContent):
            chars += image_chars
    return chars


def _answer_chars(message: AssistantMessage) -> int:
    chars = 0
    for block in message.content:
        if isinstance(block, TextContent):
            chars += js_length(block.text)
        elif isinstance(block, ThinkingContent):
            chars += js_length(block.thinking)
        elif isinstance(block, ToolCall):
            chars += js_length(block.name) + js_json_length(block.arguments)
    return chars


def estimate_tokens(message: BaseMessage) -> int:
    """pi's estimate (estimateTokens): characters / 4, rounded up, counted as JavaScript
    counts a string's length (UTF-16 code units: an emoji is two). An answer counts its
    text, thinking and tool calls (name and arguments as JSON.stringify writes them); a user message its text only
    (its images count nothing, as in pi); a tool result or custom message its text and
    4,800 characters an image; a role pi does not know counts nothing."""
    chars = 0
    if isinstance(message, AssistantMessage):
        chars = _answer_chars(message)
    elif isinstance(message, UserMessage):
        chars = _content_chars(message.content, 0)
    elif isinstance(message, ToolResultMessage | CustomMessage):
        chars = _content_chars(message.content, IMAGE_CHARS)
    elif isinstance(message, BashExecutionMessage):
        chars = js_length(message.command) + js_length(message.output)
    elif isinstance(message, BranchSummaryMessage | CompactionSummaryMessage):
        chars = js_length(message.summary)
    return math.ceil(chars / 4)


def estimate_messages_tokens(messages: Sequence[BaseMessage]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def _sent(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` less the failed and aborted answers, which the model never gets (see
    ``transform_messages``), however much they hold."""
    return [
        m
        for m in messages
        if not (
            isinstance(m, AssistantMessage)
            and m.stop_reason in (StopReason.ERROR, StopReason.ABORTED)
        )
    ]


def calculate_context_tokens(usage: Usage) -> int:
    """The context size a model call reported (pi: totalTokens, else the sum of the parts)."""
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)


@dataclass
class ContextEstimate:
    tokens: int
    usage_tokens: int
    trailing_tokens: int
    # Index of the assistant message whose usage was used; None: everything was estimated.
    last_usage_index: int | None


def _usable_usage(message: BaseMessage, stale_before: int | None) -> Usage | None:
    if not isinstance(message, AssistantMessage):
        return None
    if message.stop_reason in (StopReason.ERROR, StopReason.ABORTED):
        return None
    if stale_before is not None and message.timestamp < stale_before:
        return None
    return message.usage if calculate_context_tokens(message.usage) > 0 else None


def estimate_context_tokens(messages: Sequence[BaseMessage]) -> ContextEstimate:
    """The context size: the newest usable assistant usage plus estimates for what follows.
    Error and aborted answers carry no usable usage and count for nothing (they are not
    sent); neither does an answer begun before the newest compaction summary in ``messages``
    (it measured the context before compaction). One begun in the compaction's millisecond
    came after it: pi writes the compaction, the next question and the answer's start within
    one millisecond, and takes that answer's usage as the context's size."""
    summaries = [m.timestamp for m in messages if isinstance(m, CompactionSummaryMessage)]
    stale_before = max(summaries) if summaries else None
    for index in range(len(messages) - 1, -1, -1):
        usage = _usable_usage(messages[index], stale_before)
        if usage is not None:
            usage_tokens = calculate_context_tokens(usage)
            trailing = estimate_messages_tokens(_sent(messages[index + 1 :]))
            return ContextEstimate(usage_tokens + trailing, usage_tokens, trailing, index)
    estimated = estimate_messages_tokens(_sent(messages))
    return ContextEstimate(estimated, 0, estimated, None)


def context_tokens(messages: Sequence[BaseMessage]) -> int:
    return estimate_context_tokens(messages).tokens


def compacted_tokens(messages: Sequence[BaseMessage]) -> int:
    """The size of a context just compacted: every message in it predates the compaction,
    so no answer's usage measured it (one begun in the compaction's millisecond too, which
    ``estimate_context_tokens`` takes for fresh), and all of it is estimated."""
    return estimate_messages_tokens(_sent(messages))


def fit_to_window(
    context_window: int, keep_recent_tokens: int, reserve_tokens: int
) -> tuple[int, int]:
    """``(keep_recent_tokens, reserve_tokens)`` for a model of ``context_window`` tokens: each at
    most a quarter of it. pi's defaults (20,000 and 16,384) suit a large window; with a small
    one (a local model's 32,768) the threshold sat below what a compaction keeps, so every run
    compacted again or found nothing to compact, and an overflow could not be recovered from.
    An unknown window (0) leaves both as they are."""
    if context_window <= 0:
        return keep_recent_tokens, reserve_tokens
    cap = max(context_window // 4, 1)
    return min(keep_recent_tokens, cap), min(reserve_tokens, cap)


def should_compact(
    context_tokens: int, context_window: int, reserve: int = DEFAULT_RESERVE_TOKENS
) -> bool:
    return context_tokens > context_window - reserve
