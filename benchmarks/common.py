"""What every benchmark shares: the quick switch, the shape of a row, a model's reply."""

from __future__ import annotations

import os
from typing import Any

from mcp_agent.messages import AssistantMessage, TextContent, Usage


def quick() -> bool:
    """``MCP_AGENT_BENCH_QUICK=1`` (``run.py --quick``): reduced sizes, for CI."""
    return os.environ.get("MCP_AGENT_BENCH_QUICK") == "1"


def row(
    name: str, value: float | None, baseline: float | None, unit: str, target: str = "-"
) -> dict[str, Any]:
    """One row of the table run.py prints; the ratio is value / baseline (same run)."""
    return {
        "name": name,
        "value": value,
        "baseline": baseline,
        "ratio": value / baseline if value is not None and baseline else None,
        "unit": unit,
        "target": target,
    }


def reply(index: int) -> AssistantMessage:
    """An assistant message of about 600 characters with usage, as a session stores many."""
    return AssistantMessage(
        content=[TextContent(text=f"reply {index} " + "x" * 600)],
        api="anthropic-messages",
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=Usage(input=1000, output=50, total_tokens=1050),
        timestamp=index,
    )
