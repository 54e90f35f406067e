"""Checks on the messages of agent runs, shared by the agent, loop and reliability tests."""

from __future__ import annotations

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
