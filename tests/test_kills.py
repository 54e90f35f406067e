"""A real ``serve`` process killed (SIGKILL) in the middle of a write, then started again."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from agent_support import check_tool_results
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_support import Served, call, poll, server_env, write_manifests
from providers_support import (
    Gate,
    Reply,
    oa_chunk,
    oa_text_reply,
    oa_tool_call_reply,
    script_server,
)
from reliability_support import check_sqlite_store
from test_unreadable import StdioServer

from mcp_agent.sessions import MessageEntry
from mcp_agent.sessions.file_lock import TEMP_GRACE_SECONDS

AGENT = 'description = "test default"\ntools = ["subagent"]\n'


def start(folder: Path, leases: Path) -> StdioServer:
    server = StdioServer("--sessions-dir", str(folder), "--db", str(leases))
    server.initialize()
    return server


def tool_call(request_id: int, tool: str, **arguments: object) -> str:
    params = {"name": tool, "arguments": arguments}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    )


def big_pi_file(entries: int) -> str:
    """A pi v3 session file of ``entries`` user messages, a few MB: long to write."""
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": "0b6c0c4e-8a4e-4a0e-9d4e-3c0e6a7b9f10",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/tmp",
        }
    ]
    parent = None
    for number in range(entries):
        entry_id = f"{number:08x}"
        message = {"role": "user", "content": f"message {number} " + "lorem " * 40}
        lines.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "message": {**message, "timestamp": 1767225600000 + number},
            }
        )
        parent = entry_id
    return "".join(json.dumps(line) + "\n" for line in lines)


def killed_mid_import(folder: Path, leases: Path, text: str) -> list[Path]:
    """Start a server, have it import ``text`` and kill it as soon as the temporary file of
    the import appears: that file (none if the import was over by then)."""
    server = start(folder, leases)
    server.send(tool_call(1, "session_import", jsonl=text))

    def writing() -> list[Path] | bool | None:
        return list(folder.glob("*.tmp")) or server.process.poll() is not None or None

    poll(writing, "an import that never wrote", tries=20_000, every=0.005)
    server.process.kill()
    server.process.wait()
    return [path for path in folder.glob("*.tmp") if path.exists()]


def test_a_temporary_file_left_by_an_import_killed_mid_write_is_removed_at_the_next_start(
    tmp_path: Path,
) -> None:
    """An import writes its file under a temporary name, renamed once whole. Killed before,
    that file stayed for good, one as large as the session for each killed import; the next
    server removes it (one whose writer lives, locked, it leaves)."""
    folder, leases = tmp_path / "sessions", tmp_path / "leases.db"
    folder.mkdir()
    text = big_pi_file(20_000)
    temps: list[Path] = []
    for _ in range(5):  # killed once the file is being written (not before, not after)
        temps = killed_mid_import(folder, leases, text)
        if temps:
            break
        for done in folder.glob("*.jsonl"):  # the import was done before it was killed
            done.unlink()
    else:
        raise AssertionError("the import was never caught writing")
    (left,) = temps
    assert not list(folder.glob("*.jsonl")), "a session was imported half"
    # Another writer's, alive (it holds its temporary file locked): kept, however old.
    alive = folder / "0b6c0c4e.jsonl12345678.tmp"
    alive.write_text("{}\n")
    # The next start may come at once (a client restarting its server), or later.
    old = time.time() - TEMP_GRACE_SECONDS - 1
    for path in (left, alive):
        os.utime(path, (old, old))
    with open(alive, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        server = start(folder, leases)
        try:
            assert not left.exists(), "the killed import's file is still there"
            assert alive.exists()
            server.send(tool_call(2, "session_import", jsonl=text))
            answer = server.answer()
            assert not answer["result"].get("isError"), answer
        finally:
            said = server.stop()
    assert "removed 1 temporary file(s) left by a process stopped while it wrote" in said
    assert sorted(path.suffix for path in folder.iterdir()) == [".jsonl", ".tmp"]


class EnvStdioServer(StdioServer):
    """``serve`` over stdio with an environment of the test's."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mcp_agent", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=env,
        )

    def call(self, request_id: int, tool: str, **arguments: object) -> dict[str, Any]:
        self.send(tool_call(request_id, tool, **arguments))
        result: dict[str, Any] = self.answer()["result"]
        return result


def delegating_to_a_held_subagent(api: Any, tmp_path: Path) -> tuple[dict[str, str], Gate]:
    """A server's environment whose model (``api``) delegates to a sub-agent, whose answer
    holds at the gate: the run's tool call stays under way until it opens."""
    env = server_env(
        tmp_path,
        OPENAI_BASE_URL=f"{api.base}/v1",
        OPENAI_API_KEY="test-key",
        MCP_AGENT_MODEL="openai:gpt-4o-mini",
    )
    held = Gate()
    api.add(
        oa_tool_call_reply("subagent", {"agent": "default", "task": "look around"}),
        Reply(body=[oa_chunk({"role": "assistant"}), oa_chunk({"content": "Look"}), held]),
    )
    return env, held


@pytest.mark.anyio
async def test_a_run_whose_server_was_killed_with_a_tool_call_in_flight_says_it_was_interrupted(
    tmp_path: Path,
) -> None:
    """A stdio server killed (SIGKILL) while its run's tool call runs: the next server on the
    database said of the run only "no run here", as of an id never given. It now says the run
    was interrupted, where, and in which session to carry on; its lease binds nobody, and a
    run in that session goes on at once, the session whole."""
    manifests = write_manifests(tmp_path / "manifests", {"default": AGENT})
    db = tmp_path / "s.db"
    async with script_server() as api:
        env, held = delegating_to_a_held_subagent(api, tmp_path)
        args = ("--db", str(db), "--manifests", str(manifests))
        first = EnvStdioServer(env, *args)
        try:
            await anyio.to_thread.run_sync(first.initialize)
            started = await anyio.to_thread.run_sync(
                lambda: first.call(2, "agent_run", prompt="delegate", wait=False)
            )
            run_id = started["structuredContent"]["runId"]
            session_id = started["structuredContent"]["sessionId"]
            with anyio.fail_after(60):
                await held.reached.wait()  # the tool (a sub-agent) is under way
            first.process.kill()
            first.process.wait(15)
        finally:
            held.open()
            if first.process.poll() is None:
                first.process.kill()
                first.process.wait(15)
        api.add(oa_text_reply("Carried on."))
        second = EnvStdioServer(env, *args)
        try:
            await anyio.to_thread.run_sync(second.initialize)
            status = await anyio.to_thread.run_sync(
                lambda: second.call(2, "agent_status", run_id=run_id)
            )
            assert status["isError"], status
            text = status["content"][0]["text"]
            assert f"run {run_id} was interrupted" in text and session_id in text, text
            done = await anyio.to_thread.run_sync(
                lambda: second.call(3, "agent_run", prompt="go on", session_id=session_id)
            )
            assert not done["isError"], done
            assert done["structuredContent"]["status"] == "completed"
        finally:
            said = await anyio.to_thread.run_sync(second.stop)
        assert "Traceback" not in said
    stored = check_sqlite_store(db)
    messages = [e.message for e in stored[session_id] if isinstance(e, MessageEntry)]
    check_tool_results(messages, "the session")


@pytest.mark.anyio
async def test_a_server_killed_mid_stream_of_a_waited_run_leaves_its_session_whole(
    tmp_path: Path,
) -> None:
    """HTTP: a waited agent_run streams its progress (SSE) while its tool call runs, and the
    server is killed (SIGKILL) mid-stream. The next server on the database finds the session
    whole (every call has its result once the next run starts) and no lease of the dead
    server in its way."""
    manifests = write_manifests(tmp_path / "manifests", {"default": AGENT})
    async with script_server() as api:
        env, held = delegating_to_a_held_subagent(api, tmp_path)
        extra = ("--no-auth", "--manifests", str(manifests))
        first = Served(tmp_path, *extra, env=env)
        said: list[str] = []

        async def waited_run(client: Client) -> None:
            async def heard(progress: float, total: float | None, message: str | None) -> None:
                said.append(message or "")

            with contextlib.suppress(Exception):
                await client.call_tool("agent_run", {"prompt": "delegate"}, progress_callback=heard)

        try:
            with anyio.fail_after(120):
                async with Client(streamable_http_client(first.url)) as client:
                    async with anyio.create_task_group() as group:
                        group.start_soon(waited_run, client)
                        await held.reached.wait()  # streaming, the tool under way
                        first.process.kill()
                        first.process.wait(15)
                        group.cancel_scope.cancel()
        except Exception:  # the client's own end of a connection cut: not what is tested
            pass
        finally:
            held.open()
            first.stop()
        api.add(oa_text_reply("Carried on."))
        with Served(tmp_path, *extra, env=env) as second:
            async with Client(streamable_http_client(second.url)) as client:
                listing = await call(client, "session_list")
                session_id = listing["sessions"][-1]["id"]  # the oldest: the run's own
                done = await call(client, "agent_run", prompt="go on", session_id=session_id)
                assert done["status"] == "completed" and done["answer"] == "Carried on."
    stored = check_sqlite_store(tmp_path / "http.db")
    messages = [e.message for e in stored[session_id] if isinstance(e, MessageEntry)]
    check_tool_results(messages, "the session")
    assert [m.role for m in messages][:3] == ["user", "assistant", "toolResult"]
