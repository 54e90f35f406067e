"""Runs as server processes that share a database meet them: a run cut short by a server
killed with SIGKILL, its session taken up by the next server; a run of one server asked
after through another. Real ``serve`` processes, a loopback model API, the Python SDK's
client."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from agent_support import check_tool_results
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_support import Served, agent_server, call, call_error, server_env, write_manifests
from providers_support import (
    OA_DONE,
    Gate,
    Reply,
    oa_chunk,
    oa_text_reply,
    oa_tool_call_reply,
    script_server,
)

from mcp_agent.agent import INTERRUPTED_CALL
from mcp_agent.messages import parse_message

pytestmark = pytest.mark.anyio

AGENTS = {"default": 'description = "test default"\ntools = ["subagent"]\n'}


def openai_env(tmp_path: Path, base: str) -> dict[str, str]:
    """A server's environment whose default model is the scripted OpenAI-compatible one."""
    return server_env(
        tmp_path,
        OPENAI_BASE_URL=f"{base}/v1",
        OPENAI_API_KEY="test-key",
        MCP_AGENT_MODEL="openai:gpt-4o-mini",
    )


async def test_a_run_killed_mid_tool_call_is_said_in_its_session_and_the_next_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server killed while its run's tool runs leaves the call without a result (a batch's
    results are written when it ends). The next run there, in a new server, records the
    call's result as lost to an interrupted run before its prompt: the session is whole (a
    result for every call), says what happened, and the model is sent that, not a made-up
    "No result provided" at every later request."""
    manifests = write_manifests(tmp_path / "manifests", AGENTS)
    async with script_server() as api:
        env = openai_env(tmp_path, api.base)
        held = Gate()
        api.add(
            # the built-in subagent: no child process to start
            oa_tool_call_reply("subagent", {"agent": "default", "task": "look around"}),
            Reply(body=[oa_chunk({"role": "assistant"}), oa_chunk({"content": "Look"}), held]),
        )
        extra = ("--no-auth", "--manifests", str(manifests))
        first = Served(tmp_path, *extra, env=env)
        database = tmp_path / "http.db"  # Served's
        try:
            async with Client(streamable_http_client(first.url)) as client:
                started = await call(client, "agent_run", prompt="delegate", wait=False)
                with anyio.fail_after(60):
                    await held.reached.wait()  # the sub-agent's model answers: the tool runs
                first.process.kill()
                first.process.wait(15)
        finally:
            first.stop()
            held.open()
        session_id = started["sessionId"]
        api.add(oa_text_reply("Carried on."))
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
            monkeypatch.setenv(name, env[name])
        # The next server on that database (in this process: a start fewer).
        second = agent_server(
            tmp_path, {}, agents=AGENTS, default_model=env["MCP_AGENT_MODEL"], db_path=database
        )
        async with Client(second) as client:
            done = await call(client, "agent_run", prompt="go on", session_id=session_id)
            assert done["status"] == "completed" and done["answer"] == "Carried on."
            branch = await call(client, "session_get", session_id=session_id, limit=0)
        messages = [
            parse_message(e["message"]) for e in branch["entries"] if e["type"] == "message"
        ]
        check_tool_results(messages, "the session")
        assert [m.role for m in messages] == [
            "user",
            "assistant",
            "toolResult",
            "user",
            "assistant",
        ]
        lost = messages[2]
        assert lost.is_error and lost.content[0].text == INTERRUPTED_CALL  # type: ignore[attr-defined]
        sent = api.requests[-1].json()["messages"]
        assert [m["role"] for m in sent][-3:] == ["assistant", "tool", "user"]
        assert sent[-2]["content"] == INTERRUPTED_CALL


async def test_a_run_of_another_server_on_the_database_is_said_to_be_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers on one SQLite database (each IDE window starts its own): a start in a
    session that a run of the other holds names that run, but agent_status, agent_cancel and
    agent_steer of it said "no run"; they now say which process runs it, and that only that
    server can reach it."""
    manifests = write_manifests(tmp_path / "manifests", {"default": 'description = "d"\n'})
    database = tmp_path / "shared.db"
    async with script_server() as api:
        env = openai_env(tmp_path, api.base)
        held = Gate()
        api.add(
            Reply(
                body=[
                    oa_chunk({"role": "assistant"}),
                    oa_chunk({"content": "Hm"}),
                    held,
                    oa_chunk({}, "stop"),
                    OA_DONE,
                ]
            )
        )
        command = ["-m", "mcp_agent", "serve", "--db", str(database), "--manifests", str(manifests)]
        params = StdioServerParameters(command=sys.executable, args=command, env=env)
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
            monkeypatch.setenv(name, env[name])
        here = agent_server(tmp_path, {}, default_model=env["MCP_AGENT_MODEL"], db_path=database)
        async with Client(params) as there, Client(here) as client:
            try:
                started = await call(there, "agent_run", prompt="think", wait=False)
                with anyio.fail_after(60):
                    await held.reached.wait()
                run_id, session_id = started["runId"], started["sessionId"]
                busy = await call_error(client, "agent_run", prompt="me too", session_id=session_id)
                assert f"run {run_id} (in another server process" in busy
                for tool, extra in (
                    ("agent_status", {}),
                    ("agent_cancel", {}),
                    ("agent_steer", {"message": "hurry"}),
                    ("agent_follow_up", {"message": "then this"}),
                ):
                    said = await call_error(client, tool, run_id=run_id, **extra)
                    assert f"run {run_id} is not this server's" in said, said
                    assert "another server process" in said and session_id in said
                assert "no run" in await call_error(client, "agent_status", run_id="0" * 12)
            finally:
                held.open()
            done = await call(there, "agent_status", run_id=run_id, wait_seconds=30)
            assert done["status"] == "completed"
            # Ended: the other server knows it no more, and says so.
            assert "no run" in await call_error(client, "agent_status", run_id=run_id)
