"""A downstream server's processes end with the server that started them, however it ends: a
``serve`` killed with SIGKILL while a call to a stdio server is under way leaves none of them
running (a server busy with the call reads no end of its input, and one that ignores SIGTERM
and starts a child of its own is no exception). Real processes: ``serve`` over HTTP, the
scripted OpenAI-compatible model, the raw test server as the downstream server."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_support import Served, alive, call, poll, server_env, write_manifests
from providers_support import oa_tool_call_reply, script_server

pytestmark = pytest.mark.anyio

RAW_SERVER = Path(__file__).parent / "servers" / "raw_server.py"


async def test_a_downstream_server_ends_with_a_serve_killed_mid_call(tmp_path: Path) -> None:
    pids, stalled = tmp_path / "pids", tmp_path / "stalled"
    raw = {"command": sys.executable, "args": [str(RAW_SERVER), "--stubborn", str(pids)]}
    agents = {"default": 'description = "uses r"\ntools = ["r__*"]\n'}
    manifests = write_manifests(tmp_path / "manifests", agents, {"r": raw})
    async with script_server() as api:
        api.add(oa_tool_call_reply("r__stall", {"path": str(stalled)}))
        env = server_env(
            tmp_path,
            OPENAI_BASE_URL=f"{api.base}/v1",
            OPENAI_API_KEY="test-key",
            MCP_AGENT_MODEL="openai:gpt-4o-mini",
        )
        served = Served(tmp_path, "--no-auth", "--manifests", str(manifests), env=env)
        try:
            async with Client(streamable_http_client(served.url)) as client:
                await call(client, "agent_run", prompt="stall", wait=False)
                with anyio.fail_after(60):
                    while not stalled.exists():  # the call is under way in the server
                        await anyio.sleep(0.05)
                started = [int(pid) for pid in pids.read_text().split()]
                assert all(alive(pid) for pid in started)
                served.process.kill()
                served.process.wait(15)
        finally:
            served.stop()
    try:  # the server and its own child (both deaf to SIGTERM and to the end of their input)
        for pid in started:
            poll(lambda pid=pid: not alive(pid) or None, f"process {pid} to end")  # type: ignore[misc]
    finally:
        for pid in started:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
