"""A client waiting on a run hears from it while nothing happens (a model silent before its
first token, a slow tool): progress beats (``runtime/builtin.progress_reporter``), so a client
that resets its request timeout on progress keeps waiting."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp_support import TEST_AGENTS, agent_server
from slow_support import (  # noqa: F401  (the slow_server fixtures)
    needs_node,
    shared_slow_server_fixture,
    slow_server_fixture,
    ts_agent_run,
)

from mcp_agent.messages import content_text
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import ScriptedProvider, ScriptedResponse, reply
from mcp_agent.runtime.settings import ServerSettings


async def silent_model(context: LlmContext) -> ScriptedResponse:
    await anyio.sleep(1.0)
    return reply(f"after silence: {content_text(context.messages[-1].content)}")


def silent_server(tmp_path: Path) -> MCPServer:
    """A server whose model is silent a second before it answers, beating every 0.1 s."""
    return agent_server(
        tmp_path,
        {"silent": ScriptedProvider(silent_model)},
        agents=TEST_AGENTS,
        progress_interval=0.1,
    )


@pytest.mark.anyio
async def test_a_silent_model_is_heard_as_beats_between_the_events(tmp_path: Path) -> None:
    server = silent_server(tmp_path)
    heard: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    async with Client(server) as client:
        result = await client.call_tool(
            "agent_run", {"prompt": "hello"}, progress_callback=on_progress
        )
    assert not result.is_error and result.structured_content is not None
    values = [value for value, _ in heard]
    assert values == sorted(set(values))  # each larger than the one before
    events = [value for value in values if value == int(value)]
    assert events == list(range(1, result.structured_content["events"] + 1))
    beats = [(value, message) for value, message in heard if value != int(value)]
    assert beats, heard
    assert all(message and message.startswith("waiting: ") for _, message in beats)


@pytest.mark.anyio
async def test_no_beats_while_events_come(tmp_path: Path) -> None:
    server = agent_server(
        tmp_path, {"quick": lambda _: reply("at once")}, agents=TEST_AGENTS, progress_interval=60
    )
    heard: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    async with Client(server) as client:
        result = await client.call_tool(
            "agent_run", {"prompt": "hi"}, progress_callback=on_progress
        )
    assert result.structured_content is not None
    assert heard == list(range(1, result.structured_content["events"] + 1))


@pytest.mark.anyio
async def test_agent_status_waiting_on_a_run_beats_too(tmp_path: Path) -> None:
    server = silent_server(tmp_path)
    heard: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    async with Client(server) as client:
        started = await client.call_tool("agent_run", {"prompt": "hello", "wait": False})
        assert started.structured_content is not None
        run_id = started.structured_content["runId"]
        status = await client.call_tool(
            "agent_status", {"run_id": run_id, "wait_seconds": 30}, progress_callback=on_progress
        )
        # Not waiting: no beat.
        quick = await client.call_tool(
            "agent_status", {"run_id": run_id}, progress_callback=on_progress
        )
    assert status.structured_content is not None
    assert status.structured_content["status"] == "completed"
    assert quick.structured_content == status.structured_content
    values = [value for value, _ in heard]
    assert heard and values == sorted(set(values)) and all(0 < v < 1 for v in values)
    assert all(m and m.startswith("waiting: ") and run_id in m for _, m in heard)


def test_the_interval_must_be_a_tenth_of_a_second_or_more(tmp_path: Path) -> None:
    # (A beat each microsecond would flood the client and spin the event loop.)
    for bad in (0, -1, 1e-6, 0.09, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="--progress-interval"):
            ServerSettings(db_path=tmp_path / "s.db", progress_interval=bad)


@needs_node
@pytest.mark.anyio
async def test_the_typescript_sdk_client_outwaits_its_timeout_on_a_silent_model(
    slow_server: str,
) -> None:
    # Silent for 3 s, far past the client's 1 s timeout, which each beat (0.2 s) resets.
    seen = await ts_agent_run(slow_server, "silent 3", 1_000, True, lambda _: None)
    assert "error" not in seen and not seen["isError"], seen
    assert seen["answer"] == "done after 3 s of silence"
    assert any(value != int(value) for value in seen["progress"])


@pytest.mark.anyio
async def test_waiting_on_a_run_that_is_not_there_says_so(tmp_path: Path) -> None:
    """The wait's progress beats wrapped the tool's own refusal in an exception group, which
    the client got as the SDK's bare "Error executing tool agent_status"."""
    server = agent_server(tmp_path, {"quick": lambda _: reply("at once")}, agents=TEST_AGENTS)
    async with Client(server) as client:
        for arguments in ({"run_id": "nope", "wait_seconds": 5}, {"run_id": "", "wait_seconds": 1}):
            refused = await client.call_tool("agent_status", arguments)
            assert refused.is_error
            text = refused.content[0].text  # type: ignore[union-attr]
            said = "no run" if arguments["run_id"] else "run_id is empty"
            assert "Error executing tool" not in text and said in text, text
