"""session_list's items are made as JSON straight from their fields (``session_json``): the
same text, byte for byte, as the checked model's dump (``session_info``)."""

from __future__ import annotations

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
