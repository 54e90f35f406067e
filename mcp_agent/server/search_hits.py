"""Where a search matched, as the tools answer it: a listed session's first hits
(``session_list`` with a query) and a page of one session's (``session_search``), each hit
its entry's id, type, role, time and a snippet (``sessions.hits``), a page of them within
``ANSWER_BYTES``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from mcp_agent.server.paging import ANSWER_BYTES, utf8_size
from mcp_agent.server.schemas import SearchHit
from mcp_agent.sessions import hits
from mcp_agent.sessions.hits import SESSIONS_PER_SEARCH
from mcp_agent.sessions.repo import SessionPage, SessionRepo, SessionSummary, listed_hits


def hit_info(hit: hits.EntryHit, words: list[str]) -> SearchHit:
    return SearchHit.model_validate(hit.to_json_dict(words))


def fitting_hits(page: hits.HitPage, words: list[str]) -> tuple[list[str], str | None]:
    """The JSON of each hit of ``page`` that fits in ``ANSWER_BYTES`` (one at least) and the
    cursor after the last of them."""
    items: list[str] = []
    used = 0
    for hit in page.hits:
        text = hit_info(hit, words).model_dump_json()
        if items and used + utf8_size(text) > ANSWER_BYTES:
            return items, page.cursor_after(len(items))
        used += utf8_size(text) + 1
        items.append(text)
    return items, page.next_cursor


def listed_with_hits(
    repo: SessionRepo,
    page: SessionPage,
    query: str,
    words: list[str],
    fields: Callable[[SessionSummary], dict[str, Any]],
) -> tuple[list[str], SessionPage]:
    """The JSON of each session of ``page`` with its first hits, as ``ListedSession``'s dump
    has it (``fields``: the session's, as ``session_wire`` gives them), as many sessions as
    fit in ``ANSWER_BYTES`` (one at least: its hits are few and short), and the page cut to
    them. The hits of ``SESSIONS_PER_SEARCH`` sessions are looked for at a time, until the
    answer is full. Made from the fields as they are (texts, counts, None, a bool): checked
    into the models (ListedSession and each SearchHit) and dumped, the same text cost a listing
    with a query about half its CPU."""
    items: list[str] = []
    used = 0
    for start in range(0, len(page.items), SESSIONS_PER_SEARCH):
        chunk = page.items[start : start + SESSIONS_PER_SEARCH]
        rows = {summary.id: summary for summary in chunk}  # as listed: their hits' state
        found = listed_hits(repo, list(rows), query, rows)
        for summary in chunk:
            hits = found[summary.id]
            listed = fields(summary)
            listed["hits"] = [hit.to_json_dict(words) for hit in hits.hits]
            listed["hitCount"] = hits.total
            text = to_json(listed).decode()
            if items and used + utf8_size(text) > ANSWER_BYTES:
                return items, page.first(len(items))
            used += utf8_size(text) + 1
            items.append(text)
    return items, page.first(len(items))
