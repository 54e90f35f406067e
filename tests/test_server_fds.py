"""Many runs at once in a real server process under ``ulimit -n 1024``: beyond the run limit, or
beyond what fits in the file descriptors when no limit is set, starts are refused. Either way
the server stays up, every accepted run ends with its answer, and no lease is left behind."""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_support import free_port, wait_for_port
from providers_support import Gate, Reply, oa_text_reply, script_server

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits"),
]

FULL = os.environ.get("MCP_AGENT_FULL") == "1"
RUNS = 1100 if FULL else 150
RUNS_THAT_FIT = 56  # runtime.descriptors: (1024 - 128) // 2 // 8
FD_LIMIT = 1024


def start_server(
    tmp_path: Path, model_url: str, *flags: str
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(tmp_path / "server.log", "wb")

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    command = [sys.executable, "-m", "mcp_agent", "serve", "--transport", "http", "--no-auth"]
    command += ["--port", str(port), "--db", str(tmp_path / "s.db")]
    command += ["--model", "openai:gpt-4o-mini", *flags]
    env = {**os.environ, "OPENAI_BASE_URL": f"{model_url}/v1", "OPENAI_API_KEY": "test"}
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=log, env=env, preexec_fn=few_descriptors
    )
    log.close()
    wait_for_port(port, process, tmp_path / "server.log")
    return process, f"http://127.0.0.1:{port}/mcp"


def leases(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM session_leases").fetchone()[0])


async def fire(url: str, count: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Start ``count`` runs without waiting; returns the accepted runs and the refusals."""
    accepted: list[dict[str, Any]] = []
    refused: list[str] = []
    async with Client(url, mode="legacy") as client:
        for n in range(count):
            result = await client.call_tool("agent_run", {"prompt": f"run {n}", "wait": False})
            if result.is_error:
                refused.append(result.content[0].text)  # type: ignore[union-attr]
            else:
                assert result.structured_content is not None
                accepted.append(result.structured_content)
    return accepted, refused


async def wait_for_all(url: str, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ended = []
    async with Client(url, mode="legacy") as client:
        for run in runs:
            with anyio.fail_after(120):
                result = await client.call_tool(
                    "agent_status", {"run_id": run["runId"], "wait_seconds": 60}
                )
            assert result.structured_content is not None
            ended.append(result.structured_content)
        # The server still serves ordinary requests.
        listed = await client.call_tool("session_list", {"limit": 5})
        assert not listed.is_error
    return ended


async def test_runs_beyond_the_limit_are_refused_under_a_small_descriptor_limit(
    tmp_path: Path,
) -> None:
    async with script_server() as model:
        gate = Gate()
        model.add(*[Reply(body=[gate, *oa_text_reply("done").body]) for _ in range(RUNS)])
        process, url = start_server(
            tmp_path, model.base, "--max-runs", "32", "--max-runs-per-client", "0"
        )
        try:
            accepted, refused = await fire(url, RUNS)
            assert len(accepted) == 32
            assert len(refused) == RUNS - 32
            assert all(
                "too many runs" in text
                and "operator can raise it (MCP_AGENT_MAX_RUNS)" in text
                and "--" not in text
                for text in refused
            )
            gate.open()
            ended = await wait_for_all(url, accepted)
            assert {run["status"] for run in ended} == {"completed"}
            assert all(run["answer"] == "done" for run in ended)
            assert process.poll() is None
        finally:
            process.terminate()
            process.wait(timeout=20)
    assert leases(tmp_path / "s.db") == 0
    with sqlite3.connect(tmp_path / "s.db") as conn:
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert sessions == 32  # a refused start writes nothing


async def test_with_no_run_limit_the_descriptor_limit_still_bounds_the_runs(
    tmp_path: Path,
) -> None:
    """--max-runs 0 means no limit of ours; the runs that fit in the descriptors still bound
    them, so the server never runs out (an accept, a database file or a log line that fails
    for want of a descriptor is what took the process down before)."""
    async with script_server() as model:
        gate = Gate()
        model.add(*[Reply(body=[gate, *oa_text_reply("done").body]) for _ in range(RUNS)])
        process, url = start_server(
            tmp_path, model.base, "--max-runs", "0", "--max-runs-per-client", "0"
        )
        try:
            with anyio.fail_after(240):
                accepted, refused = await fire(url, RUNS)
                assert len(accepted) == RUNS_THAT_FIT
                assert all("file descriptor limit" in text for text in refused)
                gate.open()
                ended = await wait_for_all(url, accepted)
            assert {run["status"] for run in ended} == {"completed"}
            assert process.poll() is None, "the server died"
            log = (tmp_path / "server.log").read_text()
            assert "Too many open files" not in log
        finally:
            process.terminate()
            process.wait(timeout=20)
    assert leases(tmp_path / "s.db") == 0
