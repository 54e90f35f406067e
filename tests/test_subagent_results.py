"""What a model that delegates reads of the sub-agent's result, through a real ``serve``
process over stdio and a loopback model API: the request the parent's next turn sends."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_support import call, server_env, write_manifests
from providers_support import oa_text_reply, oa_tool_call_reply, script_server

pytestmark = pytest.mark.anyio

MODEL = """
[providers.api]
api = "openai-completions"
base_url = "{base}/v1"
api_key = "test-key"

[[providers.api.models]]
id = "m"
context_window = 100000
"""

AGENTS = {
    "default": 'description = "delegates"\ntools = ["subagent"]\n',
    "loner": 'description = "answers"\ntools = []\n',
}


def tool_text(message: dict[str, Any]) -> str:
    """The text of a tool message as OpenAI's API gets it (a string or text parts)."""
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part.get("type") == "text")


async def test_the_delegating_model_reads_the_answer_first_then_the_facts(tmp_path: Path) -> None:
    """The sub-agent's result reached its caller's model as indented JSON in snake_case, the
    answer last, one escaped string (its line breaks as \\n, its quotes as \\"). It reads the
    answer as the sub-agent wrote it now, then one line with its session, status and stop
    reason."""
    answer = 'Found it.\n\n- the "first" line\n- a path C:\\tmp'
    manifests = write_manifests(tmp_path / "manifests", AGENTS)
    async with script_server() as api:
        models = tmp_path / "models.toml"
        models.write_text(MODEL.format(base=api.base))
        env = server_env(tmp_path, MCP_AGENT_MODELS=str(models), MCP_AGENT_MODEL="api:m")
        api.add(
            oa_tool_call_reply("subagent", {"agent": "loner", "task": "look"}),
            oa_text_reply(answer),
            oa_text_reply("Done."),
        )
        command = ["-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
        params = StdioServerParameters(
            command=sys.executable, args=[*command, "--manifests", str(manifests)], env=env
        )
        async with Client(params) as client:
            run = await call(client, "agent_run", prompt="delegate")
            assert run["status"] == "completed" and run["answer"] == "Done.", run
            runs = (await call(client, "agent_runs"))["runs"]
        (child,) = [r for r in runs if r["parentRunId"] == run["runId"]]
        said = tool_text(api.requests[2].json()["messages"][-1])
    assert said.startswith(answer + "\n\n"), said
    facts = said.removeprefix(answer + "\n\n")
    assert facts == (
        f"[sub-agent loner: completed, stop reason stop; session {child['sessionId']},"
        f" run {child['runId']}]"
    ), facts
