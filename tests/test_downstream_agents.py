"""Agents calling tools of real downstream MCP servers (child processes over stdio)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import TextContent
from mcp_support import (
    TEST_AGENTS,
    agent_server,
    call,
    prompt_responder,
    tool_responder,
    tool_server,
)
from narrow import narrow

from mcp_agent.providers.scripted import ScriptedProvider, reply
from mcp_agent.sessions import MessageEntry

pytestmark = pytest.mark.anyio


async def run(client: Client, prompt: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool("agent_run", {"prompt": prompt, **arguments})
    assert not result.is_error, narrow(result.content[0], TextContent).text
    return result.structured_content


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


async def test_agent_calls_downstream_tool_and_survives_a_kill(tmp_path: Path) -> None:
    provider = ScriptedProvider(tool_responder)
    server = agent_server(tmp_path, {"scripted": provider}, servers={"t": tool_server(timeout=10)})
    async with Client(server) as client:
        first = await run(client, 'call t__echo {"text": "hello"}')
        assert first["answer"] == "ok: hello"
        assert "t__echo" in [tool.name for tool in provider.calls[0].tools or []]
        pid = int((await run(client, "call t__pid"))["answer"].removeprefix("ok: "))

        async def kill_soon() -> None:
            await anyio.sleep(0.3)
            os.kill(pid, signal.SIGKILL)

        async with anyio.create_task_group() as group:
            group.start_soon(kill_soon)
            killed = await run(client, 'call t__slow {"seconds": 5}')
        assert killed["status"] == "completed"
        assert killed["answer"].startswith("error: ") and "'t'" in killed["answer"]
        again = await run(client, 'call t__echo {"text": "back"}')
        assert again["answer"] == "ok: back"

        session = await client.call_tool(
            "session_get", {"session_id": killed["sessionId"], "limit": 0}
        )
        results = [
            e["message"]
            for e in session.structured_content["entries"]
            if e["type"] == "message" and e["message"]["role"] == "toolResult"
        ]
        assert results[-1]["isError"] is True


async def test_abort_mid_call_leaves_no_orphan_process(tmp_path: Path) -> None:
    provider = ScriptedProvider(tool_responder)
    server = agent_server(tmp_path, {"scripted": provider}, servers={"t": tool_server()})
    async with Client(server) as client:
        pid = int((await run(client, "call t__pid"))["answer"].removeprefix("ok: "))
        started = await run(client, 'call t__slow {"seconds": 30}', wait=False)
        await anyio.sleep(0.5)
        cancelled = await client.call_tool("agent_cancel", {"run_id": started["runId"]})
        assert cancelled.structured_content["status"] == "aborted"
        assert alive(pid)  # the server stays up for the next call
    # Closing the server stops every downstream child.
    with anyio.fail_after(10):
        while alive(pid):
            await anyio.sleep(0.05)


async def test_disallowed_downstream_tool_is_invisible(tmp_path: Path) -> None:
    provider = ScriptedProvider(lambda context: reply("fine"))
    server = agent_server(tmp_path, {"scripted": provider}, servers={"t": tool_server()})
    agents = tmp_path / "manifests" / "agents"
    (agents / "echoer.toml").write_text('tools = ["t__echo"]\n')
    (agents / "offline.toml").write_text("servers = []\n")
    async with Client(server) as client:
        await run(client, "hi", agent="echoer")
        await run(client, "hi", agent="offline")
    echoer, offline = ([t.name for t in call.tools or []] for call in provider.calls)
    assert echoer == ["t__echo"]
    assert offline == ["subagent"]


async def test_a_server_that_fails_to_start_is_recorded(tmp_path: Path) -> None:
    provider = ScriptedProvider(lambda context: reply("fine"))
    broken = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    server = agent_server(tmp_path, {"scripted": provider}, servers={"broken": broken})
    async with Client(server) as client:
        done = await run(client, "hi")
        entries = await client.call_tool(
            "session_get", {"session_id": done["sessionId"], "view": "entries", "limit": 0}
        )
    errors = [
        e
        for e in entries.structured_content["entries"]
        if e.get("customType") == "tool_server_error"
    ]
    assert errors and "'broken'" in errors[0]["data"]["error"]
    # and the run's answer says it too, not only the session
    assert len(done["warnings"]) == 1 and "'broken'" in done["warnings"][0], done


def test_the_command_line_warns_of_a_server_that_fails_to_start(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    (manifests / "agents").mkdir(parents=True)
    (manifests / "agents" / "default.toml").write_text('description = "d"\ntools = ["*"]\n')
    broken = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    (manifests / "servers.json").write_text(json.dumps({"mcpServers": {"broken": broken}}))
    command = [sys.executable, "-m", "mcp_agent", "run", "hi", "--model", "scripted:echo"]
    command += ["--db", str(tmp_path / "s.db"), "--manifests", str(manifests)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_AGENT_")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hi\n"
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "MCP server 'broken'" in warned[0], done.stderr


async def test_a_run_answers_at_once_while_a_server_is_still_starting(tmp_path: Path) -> None:
    """agent_run(wait=false) answers once the run is under way, not after the servers'
    start (up to their time limit); cancelled meanwhile, the run ends aborted with its
    prompt stored, and the starting child is stopped."""
    provider = ScriptedProvider(lambda context: reply("fine"))
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    silent = {"command": sys.executable, "args": ["-c", script], "timeout": 20}
    server = agent_server(tmp_path, {"scripted": provider}, servers={"silent": silent})
    async with Client(server) as client:
        started = await run(client, "hi", wait=False)
        with anyio.fail_after(15):
            while not pid_file.exists() or not pid_file.read_text():
                await anyio.sleep(0.05)
        pid = int(pid_file.read_text())
        assert alive(pid)  # still starting: agent_run did not wait for it
        status = await client.call_tool("agent_status", {"run_id": started["runId"]})
        assert status.structured_content["status"] == "running"
        assert status.structured_content["lastEvent"] == (
            "starting: listing the agent's tools (an MCP server of its may still be starting)"
        )
        cancelled = await client.call_tool("agent_cancel", {"run_id": started["runId"]})
        assert cancelled.structured_content["status"] == "aborted"
        assert provider.calls == []
        entries = await client.call_tool(
            "session_get", {"session_id": started["sessionId"], "view": "entries", "limit": 0}
        )
        messages = [
            e["message"] for e in entries.structured_content["entries"] if e["type"] == "message"
        ]
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert messages[-1]["stopReason"] == "aborted"
        with anyio.fail_after(15):
            while alive(pid):
                await anyio.sleep(0.05)


# agent_run's advertised schema is in OpenAI strict form: every argument is required, the
# optional ones given as null; the parent's tool loop checks calls against that schema.
CHILD_RUN_DEFAULTS = {"session_id": None, "agent": None, "model": None, "wait": None}


def child_run_call(prompt: str) -> str:
    """A prompt that has the scripted model call the child's agent_run on ``prompt``."""
    return "call child__agent_run " + json.dumps({"prompt": prompt, **CHILD_RUN_DEFAULTS})


def child_server(db: Path, *extra: str) -> dict[str, Any]:
    args = ["-m", "mcp_agent", "serve", "--db", str(db), "--model", "scripted:echo", *extra]
    return {"command": sys.executable, "args": args, "timeout": 60}


async def test_parent_agent_runs_a_child_agent_over_stdio(tmp_path: Path) -> None:
    provider = ScriptedProvider(tool_responder)
    child_db = tmp_path / "child.db"
    server = agent_server(
        tmp_path, {"scripted": provider}, servers={"child": child_server(child_db)}
    )
    async with Client(server) as client:
        done = await run(client, child_run_call("count to three"))
        assert done["answer"].startswith("ok: ")
        entries = await client.call_tool(
            "session_get", {"session_id": done["sessionId"], "limit": 0}
        )
    [result] = [
        e["message"]
        for e in entries.structured_content["entries"]
        if e["type"] == "message" and e["message"]["role"] == "toolResult"
    ]
    child_run = result["details"]
    assert child_run["status"] == "completed" and child_run["answer"] == "count to three"
    assert child_run["depth"] == 1

    # The child's session lives in the child's own database and names the parent session.
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    with SqliteSessionRepo(child_db) as repo:
        child = repo.open(child_run["sessionId"])
        assert child.header.parent_session == done["sessionId"]
        roles = [
            narrow(e, MessageEntry).message.role for e in child.get_branch() if e.type == "message"
        ]
        assert roles == [
            "user",
            "assistant",
        ]


async def test_depth_limit_holds_across_processes(tmp_path: Path) -> None:
    provider = ScriptedProvider(tool_responder)
    server = agent_server(
        tmp_path,
        {"scripted": provider},
        servers={"child": child_server(tmp_path / "child.db", "--max-depth", "0")},
    )
    async with Client(server) as client:
        done = await run(client, child_run_call("hi"))
    assert done["answer"].startswith("error: ") and "depth limit" in done["answer"]


async def test_the_subagent_tool_called_at_the_depth_limit_says_why_it_is_missing(
    tmp_path: Path,
) -> None:
    # Not offered the tool at the limit, a model that called it anyway (it knew the tool from
    # the session's history, or its prompt) was told "Tool subagent not found", and no more.
    server = agent_server(
        tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS, max_subagent_depth=0
    )
    async with Client(server) as client:
        done = await call(client, "agent_run", prompt="delegate:helper:hello", agent="helper")
    said = done["answer"].removeprefix("tool said: ")
    assert "not found" not in said, said
    assert "depth limit" in said and "--max-depth" in said and "yourself" in said, said
