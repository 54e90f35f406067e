"""Steering and follow-up messages sent to a real ``serve`` process at awkward moments of a
run, over the Python SDK's client, with a loopback model API."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_support import call, call_error, server_env, write_manifests
from providers_support import OA_DONE, Gate, Reply, oa_chunk, oa_text_reply, script_server

from mcp_agent.runtime.runs import MAX_QUEUED_CHARS

pytestmark = pytest.mark.anyio

# A window of 2,000 tokens: compaction past 1,500 (a quarter kept, a quarter reserved).
SMALL_MODEL = """
[providers.api]
api = "openai-completions"
base_url = "{base}/v1"
api_key = "test-key"

[[providers.api.models]]
id = "small"
context_window = 2000
"""


async def test_a_steer_sent_while_the_run_compacts_at_its_end_is_answered_in_the_run(
    tmp_path: Path,
) -> None:
    """A run whose answer leaves the context over the threshold compacts before it ends (a
    model call: seconds, a minute). A message steered meanwhile was acknowledged as queued,
    then given back in a warning as never taken: the run's loop had stopped taking them. As
    pi does, the run now goes on with it once the compaction is over."""
    manifests = write_manifests(tmp_path / "manifests", {"default": 'description = "d"\n'})
    async with script_server() as api:
        models = tmp_path / "models.toml"
        models.write_text(SMALL_MODEL.format(base=api.base))
        env = server_env(tmp_path, MCP_AGENT_MODELS=str(models), MCP_AGENT_MODEL="api:small")
        summarizing = Gate()
        api.add(
            oa_text_reply("Hi."),
            oa_text_reply("Read it."),
            Reply(
                body=[
                    oa_chunk({"role": "assistant"}),
                    summarizing,
                    oa_chunk({"content": "S."}),
                    oa_chunk({}, "stop"),
                    OA_DONE,
                ]
            ),
            oa_text_reply("Done, as steered."),
            oa_text_reply("S."),
        )
        command = ["-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
        params = StdioServerParameters(
            command=sys.executable, args=[*command, "--manifests", str(manifests)], env=env
        )
        async with Client(params) as client:
            first = await call(client, "agent_run", prompt="hello")
            session_id = first["sessionId"]
            started = await call(
                client, "agent_run", prompt="x" * 8_000, session_id=session_id, wait=False
            )
            try:
                with anyio.fail_after(60):
                    await summarizing.reached.wait()
                queued = await call(
                    client, "agent_steer", run_id=started["runId"], message="one more thing"
                )
                assert queued["status"] == "running"
            finally:
                summarizing.open()
            done = await call(client, "agent_status", run_id=started["runId"], wait_seconds=60)
            branch = await call(client, "session_get", session_id=session_id, limit=0)
        assert done["status"] == "completed" and done["answer"] == "Done, as steered.", done
        assert not any("queued messages" in warning for warning in done["warnings"])
        said = [
            (e["message"]["role"], e["message"]["content"])
            for e in branch["entries"]
            if e["type"] == "message"
        ]
        steered = said.index(("user", [{"type": "text", "text": "one more thing"}]))
        assert said[steered - 1][0] == "assistant" and said[steered + 1][0] == "assistant"
        last = api.requests[3].json()["messages"][-1]
        assert last["content"] == [{"type": "text", "text": "one more thing"}]


async def test_the_messages_a_run_holds_not_taken_are_bounded_in_characters(
    tmp_path: Path,
) -> None:
    """A run holds at most fifty steering and follow-up messages it has not taken, but each
    could be as long as a request may be: fifty of 64 MiB over stdio, on each of a client's
    runs, all held in memory until taken. Past the characters a run holds, one more is
    refused saying so, and the run goes on."""
    manifests = write_manifests(tmp_path / "manifests", {"default": 'description = "d"\n'})
    async with script_server() as api:
        models = tmp_path / "models.toml"
        models.write_text(SMALL_MODEL.format(base=api.base).replace("2000", "200000"))
        env = server_env(tmp_path, MCP_AGENT_MODELS=str(models), MCP_AGENT_MODEL="api:small")
        answering = Gate()
        api.add(
            Reply(
                body=[
                    oa_chunk({"role": "assistant"}),
                    answering,
                    oa_chunk({"content": "Hi."}),
                    oa_chunk({}, "stop"),
                    OA_DONE,
                ]
            )
        )
        command = ["-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
        params = StdioServerParameters(
            command=sys.executable, args=[*command, "--manifests", str(manifests)], env=env
        )
        async with Client(params) as client:
            started = await call(client, "agent_run", prompt="hello", wait=False)
            run_id = started["runId"]
            try:
                with anyio.fail_after(60):
                    await answering.reached.wait()
                half = "x" * (MAX_QUEUED_CHARS // 2)
                await call(client, "agent_steer", run_id=run_id, message=half)
                await call(client, "agent_follow_up", run_id=run_id, message=half)
                refused = await call_error(client, "agent_steer", run_id=run_id, message="more")
                assert f"would pass the {MAX_QUEUED_CHARS:,} it queues" in refused, refused
                longer = "y" * (MAX_QUEUED_CHARS + 1)
                refused = await call_error(client, "agent_follow_up", run_id=run_id, message=longer)
                assert f"{MAX_QUEUED_CHARS + 1:,} characters, more than the" in refused, refused
                assert (await call(client, "agent_status", run_id=run_id))["status"] == "running"
            finally:
                await call(client, "agent_cancel", run_id=run_id)
                answering.open()
