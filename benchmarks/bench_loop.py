"""Agent loop overhead per turn, side by side with pydantic-ai's Agent on its TestModel.

The work, for both: one run = the prompt → a model response calling one no-op tool → the tool
result → a model response with text; that is two turns (model calls). Both models answer at
once, so what is measured is the framework: message building, streaming events, tool lookup and
validation, tool execution, hooks into listeners, and (in the SQLite rows) persistence.

Rows (value and baseline in microseconds per turn, ratio = value / baseline, target ≤ 1):
- ``agent_loop``: the bare loop function, events to a no-op listener.
- ``Agent``: the stateful wrapper with one subscribed listener.
- ``Agent + SQLite session``: every message appended to a SQLite session as it ends (one
  transaction each). The baseline then stores pydantic-ai's new messages the same way: one row
  per message, one transaction each, in a WAL database with the same durability settings.

pydantic-ai is a benchmark-only dependency (``pip install pydantic-ai-slim``); without it the
baseline is left empty with a note. ``MCP_AGENT_BENCH_QUICK=1`` runs reduced sizes.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_agent.agent import Agent
from mcp_agent.loop import AgentLoopConfig, agent_loop
from mcp_agent.messages import TextContent, UserMessage
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    reply,
    scripted_model,
    tool_call,
)
from mcp_agent.runtime.session_agent import SessionAgent
from mcp_agent.state import AgentContext
from mcp_agent.tools import AgentTool, AgentToolResult

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common
from common import quick

TURNS_PER_RUN = 2
TARGET = "ratio ≤ 1 (not slower)"
UNIT = "µs/turn"


# --- our side ---------------------------------------------------------------------------------


def _responder(context: LlmContext) -> ScriptedResponse:
    """Call the no-op tool, then answer once its result is in (like TestModel)."""
    if context.messages and context.messages[-1].role == "toolResult":
        return reply('{"noop":"ok"}')
    return reply(tool_call("noop", {}))


async def _noop_execute(tool_call_id, params, signal, on_update, context) -> AgentToolResult:
    return AgentToolResult.text("ok")


NOOP = AgentTool(
    name="noop",
    description="Does nothing.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    execute=_noop_execute,
)


def _provider() -> ScriptedProvider:
    # One delta per block, as TestModel hands over whole parts.
    return ScriptedProvider(_responder, chunk_size=10_000)


async def _bare_loop_run() -> Callable[[], Awaitable[None]]:
    config = AgentLoopConfig(model=scripted_model(), stream_fn=_provider(), tools=[NOOP])

    async def once() -> None:
        prompt = UserMessage(content=[TextContent(text="go")])
        messages = await agent_loop([prompt], AgentContext("", []), config, lambda event: None)
        assert len(messages) == 4, messages

    return once


def _agent(session: Any = None) -> Agent:
    if session is None:
        agent = Agent(model=scripted_model(), stream_fn=_provider(), tools=[NOOP])
    else:
        agent = SessionAgent(
            model=scripted_model(), stream_fn=_provider(), tools=[NOOP], session=session
        )
    agent.subscribe(lambda event: None)
    return agent


async def _agent_run() -> Callable[[], Awaitable[None]]:
    agent = _agent()

    async def once() -> None:
        agent.reset()
        new = await agent.prompt("go")
        assert len(new) == 4, new

    return once


def _agent_sqlite_factory(
    directory: Path,
) -> Callable[[], Awaitable[Callable[[], Awaitable[None]]]]:
    async def make() -> Callable[[], Awaitable[None]]:
        from mcp_agent.sessions import SqliteSessionRepo

        repo = SqliteSessionRepo(directory / "agent.db")
        agent = _agent(repo.create())

        async def once() -> None:
            agent.reset()  # a fresh transcript each run; the session keeps growing
            new = await agent.prompt("go")
            assert len(new) == 4, new

        return once

    return make


# --- pydantic-ai ------------------------------------------------------------------------------


def _pydantic_ai_factory(
    database: Path | None = None,
) -> Callable[[], Awaitable[Callable[[], Awaitable[None]]]]:
    async def make() -> Callable[[], Awaitable[None]]:
        from pydantic_ai import Agent as PydanticAgent
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_ai.models.test import TestModel

        agent = PydanticAgent(TestModel())

        @agent.tool_plain
        def noop() -> str:
            """Does nothing."""
            return "ok"

        store = _MessageStore(database) if database is not None else None

        async def once() -> None:
            result = await agent.run("go")
            new = result.new_messages()
            assert len(new) == 4, new
            if store is not None:
                for message in new:
                    store.append(ModelMessagesTypeAdapter.dump_json([message]))

        return once

    return make


class _MessageStore:
    """One row per message, one transaction each, durable like our SQLite backend."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS messages (n INTEGER PRIMARY KEY, session TEXT, data BLOB)"
        )
        self.conn.execute("CREATE INDEX IF NOT EXISTS by_session ON messages (session)")

    def append(self, data: bytes) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO messages (session, data) VALUES ('s', ?)", (data,))
        self.conn.execute("COMMIT")


# --- measuring --------------------------------------------------------------------------------

Factory = Callable[[], Awaitable[Callable[[], Awaitable[None]]]]


async def _per_turn(factory: Factory, runs: int, repeats: int) -> float:
    """Best of ``repeats`` rounds of ``runs`` runs, in microseconds per turn."""
    once = await factory()
    for _ in range(max(3, runs // 10)):  # warm up
        await once()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(runs):
            await once()
        best = min(best, time.perf_counter() - started)
    return best / (runs * TURNS_PER_RUN) * 1e6


def _pydantic_ai_missing() -> str | None:
    try:
        import pydantic_ai  # noqa: F401
    except ImportError:
        return "pydantic-ai not installed (pip install pydantic-ai-slim): no baseline"
    return None


def _sqlite_missing() -> str | None:
    try:
        from mcp_agent.sessions import SqliteSessionRepo  # noqa: F401
    except ImportError:
        return "the SQLite session backend is not available"
    return None


async def _measure(directory: Path) -> list[dict[str, Any]]:
    small = quick()
    runs, repeats = (50, 3) if small else (300, 5)
    db_runs = 20 if small else 100
    missing_baseline = _pydantic_ai_missing()
    rows: list[dict[str, Any]] = []

    async def row(
        name: str, ours: Factory, baseline: Factory | None, n: int, note: str = ""
    ) -> None:
        # Interleave the two sides so that machine noise hits both alike.
        value = await _per_turn(ours, n, repeats)
        base = await _per_turn(baseline, n, repeats) if baseline is not None else None
        notes = [text for text in (note, missing_baseline if baseline is None else "") if text]
        rows.append(
            {
                "name": name,
                "value": round(value, 1),
                "baseline": round(base, 1) if base is not None else None,
                "ratio": round(value / base, 3) if base else None,
                "unit": UNIT,
                "target": TARGET,
                **({"note": "; ".join(notes)} if notes else {}),
            }
        )

    plain = None if missing_baseline else _pydantic_ai_factory()
    await row(
        "loop overhead per turn: agent_loop vs pydantic-ai Agent.run (TestModel)",
        _bare_loop_run,
        plain,
        runs,
    )
    await row(
        "loop overhead per turn: Agent vs pydantic-ai Agent.run (TestModel)",
        _agent_run,
        plain,
        runs,
    )
    sqlite_missing = _sqlite_missing()
    if sqlite_missing:
        rows.append(
            {
                "name": "loop overhead per turn: Agent + SQLite session",
                "note": f"skipped: {sqlite_missing}",
            }
        )
    else:
        stored = None if missing_baseline else _pydantic_ai_factory(directory / "baseline.db")
        await row(
            "loop overhead per turn: Agent + SQLite session vs pydantic-ai + SQLite message rows",
            _agent_sqlite_factory(directory),
            stored,
            db_runs,
            note="each message committed on its own (WAL, synchronous=FULL) on both sides",
        )
    return rows


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as directory:
        return anyio.run(_measure, Path(directory))


if __name__ == "__main__":
    for result in run():
        figures = ", ".join(
            f"{key}={result[key]}"
            for key in ("value", "baseline", "ratio", "unit")
            if key in result
        )
        print(
            f"{result['name']}: {figures}" + (f"  ({result['note']})" if "note" in result else "")
        )
