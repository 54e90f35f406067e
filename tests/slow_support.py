"""A real server with a slow test model (tests/servers/slow_model_server.py), and the
TypeScript SDK's client waiting on one of its runs (tests/peers/ts_agent_run.mjs)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.text import TextReceiveStream
from mcp_support import free_port, server_env, wait_for_port
from viewer_support import delete_every_session

ROOT = Path(__file__).resolve().parent.parent
SLOW_SERVER = ROOT / "tests" / "servers" / "slow_model_server.py"
# Progress beats of the slow server, in seconds (the default is 15).
BEAT_EVERY = 0.2


@pytest.fixture(name="shared_slow_server", scope="module")
def shared_slow_server_fixture(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Path]]:
    """One server with the slow test model for a module's tests (a start is a second or more
    of a loaded machine): its URL and database."""
    tmp = tmp_path_factory.mktemp("slow-server")
    with slow_server(tmp) as url:
        yield url, tmp / "sessions.db"


@pytest.fixture(name="slow_server")
def slow_server_fixture(shared_slow_server: tuple[str, Path]) -> str:
    """Our HTTP server with the slow test model (tests/servers/slow_model_server.py), the
    module's, its database empty (as if new): its URL."""
    url, db = shared_slow_server
    delete_every_session(url, db, token="")
    return url


@contextlib.contextmanager
def slow_server(tmp_path: Path, **env: str) -> Iterator[str]:
    """tests/servers/slow_model_server.py in a child process, ``env`` added to its
    environment; its URL."""
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(SLOW_SERVER), str(port), str(tmp_path), str(BEAT_EVERY)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=server_env(tmp_path, PYTHONPATH=str(ROOT), **env),
        )
    try:
        wait_for_port(port, process, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


PEERS = Path(os.environ.get("MCP_AGENT_PEERS", ROOT / ".ci" / "node"))
NODE = PEERS / "node_modules" / "node" / "bin" / "node"
needs_node = pytest.mark.skipif(not NODE.exists(), reason="Node peers not installed (.ci/peers)")


async def ts_agent_run(
    url: str, prompt: str, timeout_ms: int, reset: bool, on_progress: Callable[[int], None]
) -> dict[str, Any]:
    """tests/peers/ts_agent_run.mjs: the TypeScript SDK's client waiting on one agent_run;
    ``on_progress`` hears how many progress notifications came, as each comes."""
    script = PEERS / "ts_agent_run.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_agent_run.mjs", script)
    command = [str(NODE), str(script), url, prompt, str(timeout_ms), str(reset).lower()]
    async with await anyio.open_process(command, stdin=subprocess.DEVNULL) as process:
        assert process.stdout is not None
        lines: list[str] = []
        count = 0
        with anyio.fail_after(60):
            async for line in TextReceiveStream(process.stdout).__aiter__():
                for each in line.splitlines():
                    lines.append(each)
                    if each.startswith("progress "):
                        count += 1
                        on_progress(count)
            await process.wait()
    assert process.returncode == 0, lines[-20:]
    return dict(json.loads(lines[-1]))
