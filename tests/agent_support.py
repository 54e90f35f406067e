"""Checks on the messages of agent runs, shared by the agent, loop and reliability tests, and
pi session files to feed them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mcp_agent.messages import AssistantMessage, ToolResultMessage


def check_tool_results(messages: Iterable[Any], where: str = "messages") -> None:
    """Every tool call has exactly one tool result, after it and before the next assistant
    message; no result answers a call that is not open."""
    open_calls: dict[str, str] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert not open_calls, f"{where}: tool calls without results: {open_calls}"
            open_calls = {call.id: call.name for call in message.tool_calls}
        elif isinstance(message, ToolResultMessage):
            assert message.tool_call_id in open_calls, (
                f"{where}: result for unknown call {message.tool_call_id}"
            )
            del open_calls[message.tool_call_id]
    assert not open_calls, f"{where}: tool calls without results: {open_calls}"


def pi_v3(
    entries: int, session_id: str = "01a00000-0000-7000-8000-000000000001", pad: int = 0
) -> str:
    """A pi v3 file whose entries form one long chain of user and assistant messages
    (``step i`` / ``done i``, each followed by ``pad`` x's)."""
    lines = [
        json.dumps(
            {
                "type": "session",
                "version": 3,
                "id": session_id,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "cwd": "/w",
            }
        )
    ]
    parent = None
    for i in range(entries):
        entry_id = f"{i:08x}"
        role = "user" if i % 2 == 0 else "assistant"
        text = (f"step {i}" if role == "user" else f"done {i}") + "x" * pad
        content: Any = text if role == "user" else [{"type": "text", "text": text}]
        message = {"role": role, "content": content, "timestamp": 1767225600000 + i}
        lines.append(
            json.dumps(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": "2026-01-01T00:00:01.000Z",
                    "message": message,
                }
            )
        )
        parent = entry_id
    return "\n".join(lines) + "\n"
