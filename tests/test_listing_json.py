"""session_list's items are made as JSON straight from their fields (``session_json``): the
same text, byte for byte, as the checked model's dump (``session_info``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_agent.server.session_tools import session_info, session_json
from mcp_agent.sessions.entries import CWD_CHARS, ENTRY_ID_CHARS, NAME_CHARS
from mcp_agent.sessions.repo import SessionSummary

SESSION = "0193c3a2-1b2c-7d3e-8f40-123456789abc"


def summary(**changed: object) -> SessionSummary:
    fields: dict[str, object] = dict(
        id=SESSION,
        name="load 3.4",
        cwd="/home/me/work",
        created="2026-12-07T14:33:08.123456Z",
        modified="2026-12-07T14:33:09.654321Z",
        entry_count=5,
        message_count=4,
        first_user_message="question 3",
        parent_session=None,
        total_tokens=120,
        cost_total=0.25,
        leaf_id="abcd1234",
    )
    fields.update(changed)
    return SessionSummary(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changed",
    [
        {},
        {"name": None, "first_user_message": None, "leaf_id": None, "entry_count": 0},
        {"name": '日本語 «so» "quoted" back\\slash\ttab\nline ✨', "cwd": "/tmp/é"},
        {"first_user_message": "\x00\x1f\u2028\u2029 and </script>"},
        {"name": "n" * (NAME_CHARS + 10), "cwd": "c" * (CWD_CHARS + 1)},
        {"parent_session": "p" * (ENTRY_ID_CHARS + 5)},
        {"parent_session": SESSION.replace("0", "1")},
        {"created": "not a time", "modified": "2026-12-07T14:33:09+02:00"},
        {"started_by": {"sessionId": SESSION, "runId": None}},
        {"started_by": {"sessionId": "s" * 5000, "runId": "r" * 5000}},
        {"entry_count": 2**40, "message_count": 7},
    ],
)
def test_a_listed_sessions_json_is_the_models_dump(changed: dict[str, object]) -> None:
    listed = summary(**changed)
    assert session_json(listed) == session_info(listed).model_dump_json()


def test_a_listed_sessions_json_with_hits_is_the_models_dump(tmp_path: Path) -> None:
    """With a query, each listed session's JSON (made from its fields and its hits' as they
    are) is the checked ListedSession's dump, byte for byte: hits of every kind (a user's, an
    assistant's, a name with no role), on the branch and off it, texts that JSON escapes."""
    from mcp_agent.messages import AssistantMessage, TextContent, UserMessage
    from mcp_agent.server.schemas import ListedSession
    from mcp_agent.server.search_hits import hit_info, listed_with_hits
    from mcp_agent.server.session_tools import session_fields, session_wire
    from mcp_agent.sessions.repo import listed_hits
    from mcp_agent.sessions.sqlite import SqliteSessionRepo
    from mcp_agent.sessions.words import query_words

    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        for i in range(4):
            session = repo.create(name=f"question name {i} «so»" if i % 2 else None)
            first = session.append_message(UserMessage(content=f'question {i} "é" 日本\t</x>'))
            session.append_message(
                AssistantMessage(content=[TextContent(text=f"a question answered {i} \\ \u2028")])
            )
            if i == 2:  # the answer left behind: a hit off the branch
                session.move_to(first)
                session.append_message(UserMessage(content="another question"))
        query = "question"
        words = query_words(query)
        page = repo.list(query=query, limit=20)
        items, shown = listed_with_hits(repo, page, query, words, session_wire)
        assert len(items) == len(shown.items) == 4
        found = listed_hits(repo, [summary.id for summary in shown.items], query)
        off_branch = 0
        for item, summary in zip(items, shown.items, strict=True):
            hits = found[summary.id]
            model = ListedSession(
                **session_fields(summary),
                hits=[hit_info(hit, words) for hit in hits.hits],
                hit_count=hits.total,
            )
            assert item == model.model_dump_json()
            off_branch += sum(not hit.on_branch for hit in hits.hits)
            assert any(hit.role is None for hit in hits.hits) == (summary.name is not None)
        assert off_branch == 1
    finally:
        repo.close()
