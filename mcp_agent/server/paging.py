"""Pages of what the tools answer, so that no answer fills a model's context by default: at
most ``limit`` items and about ``ANSWER_BYTES`` of JSON, newest last, with a cursor for the
page before. ``limit=0`` asks for everything, up to ``WHOLE_MAX``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

T = TypeVar("T")

# The items of one page, as compact JSON: with the answer's other fields, well inside
# TEXT_BYTES, so a default page reads the same in text and structured content.
ANSWER_BYTES = 40 * 1024
# What an LLM reads of one answer: the text block stops at about this many bytes of UTF-8
# (hosts refuse or cut tool output past some 25,000 tokens, and a client parses every
# character of it twice; counted in characters, a text of Japanese was three times as long,
# and a token or more a character). The structured content always holds the whole answer. A
# default page fits.
TEXT_BYTES = 64 * 1024
# A field of the answer itself (say an exported file) longer than this is left out of a text
# that has to be shortened.
LONG_FIELD = 1024
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# The most an answer asked for whole (``limit=0``) or a whole resource holds, in bytes as its
# JSON-RPC line carries them (``utf8_size``; a text held in a JSON string with its escapes,
# ``json_size``): past it the answer is refused, naming the pages to ask for, rather than sent.
# Below the 10 MiB message the TypeScript SDK's stdio reader (most hosts') takes: it closes the
# connection on a longer one, and counts bytes, so 4 M characters of Japanese (12 MB) are too
# many. The rest of the line (the text block's 64 KB) fits in what is left. And the server holds
# an answer several times over (its text, structured content and JSON-RPC line): 22 MB answers
# took it to 450 MB.
WHOLE_MAX = 8 << 20
# What the cursor a tool hands out starts with: the index the next page ends before.
CURSOR_PREFIX = "before:"
# What the cursor of a page read forward (from an entry on) starts with: the index the next
# page starts at.
AFTER_PREFIX = "after:"
# Between that index and the tag of what the cursor pages, in the cursor of a list that can
# become another list under the same arguments (a branch once the leaf moves).
TAG_SEPARATOR = "."

# What a list whose items may change keys its cursors by: the index the next page ends before
# -> what the list holds just before it (the entry of a branch there, the run there). A cursor
# carries a short hash of it, so that one of another list is refused, while a list that only
# grew at its end since keeps its cursors (a session read while an agent appends to it).
PagedAs = Callable[[int], str]

LIMIT_DESCRIPTION = (
    f"at most this many, 1 to {MAX_LIMIT} (null: {DEFAULT_LIMIT}; 0: all of them, up to"
    f" {WHOLE_MAX >> 20} MiB,"
    f" in the structured content, the text keeping the newest that fit in"
    f" {TEXT_BYTES // 1024} KB); a page also stops at about {ANSWER_BYTES // 1024} KB"
)
CURSOR_DESCRIPTION = "nextCursor of the previous answer, for the page before it; null: the newest"
# session_export pages lines of a file from the top, and the file is one field of its answer:
# a text too long for TEXT_BYTES leaves the field out (``schemas.shortened``), not lines.
EXPORT_LIMIT_DESCRIPTION = (
    f"lines per page, 1 to {MAX_LIMIT} (null: {DEFAULT_LIMIT}; 0: the whole file, up to"
    f" {WHOLE_MAX >> 20} MiB, in the structured content, while the text of a file over"
    f" {TEXT_BYTES // 1024} KB leaves the file out, saying so); a page also stops at about"
    f" {ANSWER_BYTES // 1024} KB"
)


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def utf8_size(text: str) -> int:
    """The bytes ``text`` (JSON put in a line as it is) takes on the wire, without a copy when
    it is ASCII."""
    return len(text) if text.isascii() else len(text.encode())


def check_limit(limit: int | None, name: str = "limit") -> int | None:
    """The number of items a page may hold (None: no bound), or a ToolError naming ``name``."""
    if limit is None:
        return DEFAULT_LIMIT
    if limit == 0:
        return None
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"{name} must be 0 (all) or 1 to {MAX_LIMIT}, not {limit}")
    return limit


def fits_whole(size: int) -> bool:
    """Whether ``size`` bytes (as sent: see ``WHOLE_MAX``) fit in one answer."""
    return size <= WHOLE_MAX


def check_whole(
    size: int, what: str = "this answer", elsewhere: str = "", so_far: bool = False
) -> None:
    """A ToolError when ``size`` bytes (as sent: see ``WHOLE_MAX``), asked for whole, pass
    ``WHOLE_MAX``; ``elsewhere``: another way to the whole, said after the pages; ``so_far``:
    ``size`` is what was made before the rest was left unmade (the answer is larger)."""
    if not fits_whole(size):
        said = f"over {size:,} bytes" if so_far else f"{size:,} bytes"
        raise ToolError(
            f"{what} asked for whole (limit=0) is {said}, more than the"
            f" {WHOLE_MAX >> 20} MiB one answer holds: ask for pages (a limit of 1 to"
            f" {MAX_LIMIT}, then each answer's nextCursor){elsewhere}"
        )


def cursor_tag(paged: str) -> str:
    """The short hash a cursor carries of what it pages: 8 hex digits, as a cursor is read
    back by a client's model (a 1 in 4 billion chance that another list's cursor passes)."""
    return hashlib.blake2b(paged.encode(), digest_size=4).hexdigest()


def cursor_before(index: int, paged_as: PagedAs | None = None) -> str:
    """The cursor of the page that ends before ``index``, tagged when the list is keyed."""
    if paged_as is None:
        return f"{CURSOR_PREFIX}{index}"
    return f"{CURSOR_PREFIX}{index}{TAG_SEPARATOR}{cursor_tag(paged_as(index))}"


def parse_cursor(
    cursor: str,
    prefix: str,
    low: int,
    high: int,
    paged_as: PagedAs | None = None,
    length: str | None = None,
) -> int:
    """The index in a cursor this server handed out (``prefix`` and a number in
    ``low..high``; with ``paged_as``, then the tag of what the list is at that index), or a
    ToolError saying it is not one: a bare cursor from before tags too, as it cannot say
    which list it paged. ``length``: how long the list is, said of a number out of range
    (by default "the list has ``high`` items now")."""
    text = cursor.removeprefix(prefix)
    number, separator, tag = text.partition(TAG_SEPARATOR)
    # ASCII digits only: int() reads any script's ("٣" is 3), which no cursor of ours holds.
    ours = text != cursor and number.isascii() and number.isdigit() and len(number) <= 12
    ours = ours and bool(separator) == (paged_as is not None)
    if ours and not low <= int(number) <= high:
        # Where the list ends, so a client past it (a cursor made, or kept while the list
        # changed) knows without paging it again.
        raise ToolError(
            f"cursor {cursor[:40]!r} is not one this tool handed out for this list: it is"
            f" out of range, and {length or f'the list has {high} items now'} (it may have"
            " changed since): leave cursor out to start again"
        )
    # Only once the index is known to be in the list: ``paged_as`` may look it up.
    if not ours or (paged_as is not None and tag != cursor_tag(paged_as(int(number)))):
        raise ToolError(
            f"cursor {cursor[:40]!r} is not one this tool handed out for this list (it may "
            "have changed since): leave cursor out to start again"
        )
    return int(number)


def cursor_end(cursor: str | None, total: int, paged_as: PagedAs | None = None) -> int:
    """Where the page ends (exclusive): the cursor's index, or ``total`` without one."""
    if cursor is None:
        return total
    return parse_cursor(cursor, CURSOR_PREFIX, 1, total, paged_as)


@dataclass
class PageOf:
    start: int
    end: int
    total: int
    # How the list keys its cursors (None: by index alone, for a list that only grows at the
    # end, such as the entries in the order appended).
    paged_as: PagedAs | None = None

    @property
    def truncated(self) -> bool:
        return self.start > 0 or self.end < self.total

    @property
    def next_cursor(self) -> str | None:
        return cursor_before(self.start, self.paged_as) if self.start > 0 else None


@dataclass
class PageFrom(PageOf):
    """A page read forward, from ``start`` on: its cursor is for the page after it."""

    @property
    def next_cursor(self) -> str | None:
        if self.end >= self.total:
            return None
        tag = "" if self.paged_as is None else TAG_SEPARATOR + cursor_tag(self.paged_as(self.end))
        return f"{AFTER_PREFIX}{self.end}{tag}"


def cursor_start(cursor: str, total: int, paged_as: PagedAs | None = None) -> int:
    """Where a page read forward starts: the index in a cursor a ``PageFrom`` handed out."""
    return parse_cursor(cursor, AFTER_PREFIX, 1, total, paged_as)


def newest_page(
    items: Sequence[T],
    cursor: str | None,
    limit: int | None,
    size: Callable[[T], int],
    budget: int = ANSWER_BYTES,
    paged_as: PagedAs | None = None,
) -> PageOf:
    """The newest items before the cursor that fit ``limit`` and ``budget`` (always one, at
    least: the caller shrinks an item too large on its own); ``paged_as``: see ``PagedAs``."""
    total = len(items)
    end = cursor_end(cursor, total, paged_as)
    if limit is None:
        return PageOf(0, end, total, paged_as)
    start, used = end, 0
    while start > 0 and end - start < limit:
        cost = size(items[start - 1])
        if start < end and used + cost > budget:
            break
        used += cost
        start -= 1
    return PageOf(start, end, total, paged_as)
