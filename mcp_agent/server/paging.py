"""Pages of what the tools answer, so that no answer fills a model's context by default: at
most ``limit`` items and about ``ANSWER_BYTES`` of JSON, newest last, with a cursor for the
page before. ``limit=0`` asks for everything, however large."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

T = TypeVar("T")

# The items of one page, as compact JSON: with the answer's other fields, well inside
# TEXT_CHARS, so a default page reads the same in text and structured content.
ANSWER_BYTES = 40 * 1024
# What an LLM reads of one answer: the text block stops at about this many characters (hosts
# refuse or cut tool output past some 25,000 tokens, and a client parses every character of
# it twice). The structured content always holds the whole answer. A default page fits.
TEXT_CHARS = 64 * 1024
# A field of the answer itself (say an exported file) longer than this is left out of a text
# that has to be shortened.
LONG_FIELD = 1024
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# What the cursor a tool hands out starts with: the index the next page ends before.
CURSOR_PREFIX = "before:"

LIMIT_DESCRIPTION = (
    f"at most this many (null: {DEFAULT_LIMIT}; 0: all of them, however large, in the structured"
    f" content, the text keeping the newest that fit in {TEXT_CHARS // 1024} KB); a page also"
    f" stops at about {ANSWER_BYTES // 1024} KB"
)
CURSOR_DESCRIPTION = "nextCursor of the previous answer, for the page before it; null: the newest"


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def check_limit(limit: int | None, name: str = "limit") -> int | None:
    """The number of items a page may hold (None: no bound), or a ToolError naming ``name``."""
    if limit is None:
        return DEFAULT_LIMIT
    if limit == 0:
        return None
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"{name} must be 0 (all) or 1 to {MAX_LIMIT}, not {limit}")
    return limit


def parse_cursor(cursor: str, prefix: str, low: int, high: int) -> int:
    """The index in a cursor this server handed out (``prefix`` and a number in
    ``low..high``), or a ToolError saying it is not one."""
    text = cursor.removeprefix(prefix)
    # ASCII digits only: int() reads any script's ("٣" is 3), which no cursor of ours holds.
    ours = text != cursor and text.isascii() and text.isdigit() and len(text) <= 12
    if not ours or not low <= int(text) <= high:
        raise ToolError(
            f"cursor {cursor[:40]!r} is not one this tool handed out for this list (it may "
            "have changed since): leave cursor out to start again"
        )
    return int(text)


def cursor_end(cursor: str | None, total: int) -> int:
    """Where the page ends (exclusive): the cursor's index, or ``total`` without one."""
    return total if cursor is None else parse_cursor(cursor, CURSOR_PREFIX, 1, total)


@dataclass
class PageOf:
    start: int
    end: int
    total: int

    @property
    def truncated(self) -> bool:
        return self.start > 0 or self.end < self.total

    @property
    def next_cursor(self) -> str | None:
        return f"{CURSOR_PREFIX}{self.start}" if self.start > 0 else None


def newest_page(
    items: Sequence[T],
    cursor: str | None,
    limit: int | None,
    size: Callable[[T], int],
    budget: int = ANSWER_BYTES,
) -> PageOf:
    """The newest items before the cursor that fit ``limit`` and ``budget`` (always one, at
    least: the caller shrinks an item too large on its own)."""
    total = len(items)
    end = cursor_end(cursor, total)
    if limit is None:
        return PageOf(0, end, total)
    start, used = end, 0
    while start > 0 and end - start < limit:
        cost = size(items[start - 1])
        if start < end and used + cost > budget:
            break
        used += cost
        start -= 1
    return PageOf(start, end, total)
