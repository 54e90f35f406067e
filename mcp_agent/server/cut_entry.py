"""An entry too large for a page, shown with its long texts cut: what a client that cannot
read the entry's resource (an MCP App whose host offers no resource reads), or an entry past
the most one read answers with, can still be shown of it."""

from __future__ import annotations

import json
from typing import Any

from mcp_agent.sessions.entries import clip_long

# Texts are never cut shorter than this: an entry that does not fit even so (its bulk in
# numbers, keys or many short texts) is shown as a stub.
SHORTEST_CUT = 200


def _cut(value: Any, most: int) -> Any:
    """``value`` with each string longer than ``most`` characters cut (``clip_long``)."""
    if isinstance(value, str):
        return clip_long(value, most)
    if isinstance(value, list):
        return [_cut(item, most) for item in value]
    if isinstance(value, dict):
        return {key: _cut(item, most) for key, item in value.items()}
    return value


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return max((_longest(item) for item in items), default=0)


def cut_to_fit(data: dict[str, Any], budget: int) -> tuple[dict[str, Any], int] | None:
    """``data`` with each text longer than some length cut to it, saying how long it was: the
    longest length whose result is at most ``budget`` bytes of compact JSON, and that length;
    None when texts cut to ``SHORTEST_CUT`` characters do not fit."""
    least = _cut(data, SHORTEST_CUT)
    if _size(least) > budget:
        return None
    # Cut to SHORTEST_CUT, the entry is small, and no text longer than the budget fits: each
    # try below costs little.
    low, high = SHORTEST_CUT, min(_longest(data), budget)
    best = least
    while low < high:
        middle = (low + high + 1) // 2
        tried = _cut(data, middle)
        if _size(tried) <= budget:
            low, best = middle, tried
        else:
            high = middle - 1
    return best, low
