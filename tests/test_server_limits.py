"""What one client can no longer do to everybody: hold the event loop with database work, start
runs without end, or stall a run by not reading its progress."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp_support import (
    HTTP_HEADERS,
    Served,
    call,
    call_error,
    initialize_request,
    make_server,
    poll,
    posted_answer,
    server_env,
    started_fixture,  # noqa: F401  (the started fixture)
)

from mcp_agent.sessions.sqlite import SqliteSessionRepo

pytestmark = pytest.mark.anyio


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


async def test_a_held_write_lock_delays_only_the_write(tmp_path: Path) -> None:
    """Another process holds the database's write lock: reads and calls that need no database
    answer meanwhile (they could not if the waiting append held the event loop), and the
    append goes through once the lock is let go."""
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create", name="held"))["id"]
        holder = sqlite3.connect(tmp_path / "sessions.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        appended: dict[str, Any] = {}
        try:
            async with anyio.create_task_group() as group:

                async def append() -> None:
                    appended.update(
                        await call(client, "session_append", session_id=sid, entry=user("late"))
                    )

                group.start_soon(append)
                with anyio.fail_after(30):
                    agents = await call(client, "agent_list")
                    view = await call(client, "session_get", session_id=sid)
                    listed = await call(client, "session_list")
                assert agents["agents"]
                assert view["session"]["id"] == sid
                assert [s["id"] for s in listed["sessions"]] == [sid]
                assert not appended  # still waiting for the lock
                holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert appended["entryId"]
        view = await call(client, "session_get", session_id=sid)
        assert view["entries"][-1]["id"] == appended["entryId"]


async def test_runs_beyond_the_server_limit_are_refused_and_write_nothing(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path, max_runs=2, max_runs_per_client=0)) as client:
        first = await call(client, "agent_run", prompt="slow one", wait=False)
        await call(client, "agent_run", prompt="slow two", wait=False)
        sessions = len((await call(client, "session_list"))["sessions"])
        text = await call_error(client, "agent_run", prompt="slow three", wait=False)
        assert "too many runs" in text and "the limit is 2" in text
        # The limit by the setting that raises it, not a command-line flag.
        assert "operator can raise it (MCP_AGENT_MAX_RUNS)" in text and "--" not in text
        assert len((await call(client, "session_list"))["sessions"]) == sessions  # nothing new
        await call(client, "agent_cancel", run_id=first["runId"])
        third = await call(client, "agent_run", prompt="slow three", wait=False)
        assert third["status"] == "running"
        for run in (await call(client, "agent_runs"))["runs"]:
            await call(client, "agent_cancel", run_id=run["runId"])


async def test_runs_beyond_the_client_limit_are_refused(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path, max_runs=10, max_runs_per_client=1)) as client:
        first = await call(client, "agent_run", prompt="slow one", wait=False)
        text = await call_error(client, "agent_run", prompt="slow two", wait=False)
        assert "too many runs for this client" in text
        assert "operator can raise it (MCP_AGENT_MAX_RUNS_PER_CLIENT)" in text and "--" not in text
        await call(client, "agent_status", run_id=first["runId"], wait_seconds=30)
        second = await call(client, "agent_run", prompt="now", wait=True)
        assert second["status"] == "completed"


async def test_sub_agents_count_against_the_client_whose_run_started_them(
    tmp_path: Path,
) -> None:
    async with Client(make_server(tmp_path, max_runs=10, max_runs_per_client=1)) as client:
        run = await call(client, "agent_run", prompt="delegate:loner:say cheese", agent="helper")
        assert run["status"] == "completed"
        assert "too many runs for this client" in run["answer"]
        assert "echo: say cheese" not in run["answer"]
    async with Client(make_server(tmp_path, max_runs=10, max_runs_per_client=2)) as client:
        for _ in range(2):  # both runs are counted out when they end
            run = await call(client, "agent_run", prompt="delegate:loner:cheese", agent="helper")
            assert "echo: cheese" in run["answer"]


def test_a_client_that_stops_reading_does_not_stall_its_run(tmp_path: Path) -> None:
    """Over stdio, a client asks for a run with progress and then never reads: the progress
    messages fill the pipe, yet the run ends, its answer is stored and its lease let go."""
    db = tmp_path / "s.db"
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(db), "--model", "scripted:echo"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    prompt = "word " * 20_000  # echoed in 16-character chunks: thousands of progress messages
    try:
        send(initialize_request(0))
        assert b'"id":0' in server.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "agent_run",
                    "arguments": {"prompt": prompt},
                    "_meta": {"progressToken": "p"},
                },
            }
        )

        # From here on nothing is read from the server.
        def answered() -> str | None:
            assert server.poll() is None, "the server exited"
            return stored_answer(db)

        answer = poll(answered, "the run never stored its answer", tries=600, every=0.2)
        assert answer.strip() == prompt.strip()
        poll(lambda: not leases_held(db), "the run's lease was never let go", tries=600, every=0.2)
    finally:
        server.kill()
        server.wait(timeout=20)
        server.stdout.close()
        server.stdin.close()


def stored_answer(db: Path) -> str | None:
    if not db.exists():
        return None
    with SqliteSessionRepo(db) as repo:
        for summary in repo.list().items:
            for entry in repo.open(summary.id).get_entries():
                message = getattr(entry, "message", None)
                if message is not None and message.role == "assistant":
                    return str(message.text)
    return None


def leases_held(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM session_leases").fetchone()[0])


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, where this machine lets us mount one (root, and a kernel that allows it)."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip() or made.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_is_a_clear_tool_error_and_keeps_what_was_acknowledged(
    tmp_path: Path, small_disk: Path
) -> None:
    async with Client(make_server(tmp_path, db_path=small_disk / "sessions.db")) as client:
        sid = (await call(client, "session_create"))["id"]
        acknowledged: list[str] = []
        error = ""
        for n in range(200):
            result = await client.call_tool(
                "session_append", {"session_id": sid, "entry": user(f"{n} " + "x" * 100_000)}
            )
            if result.is_error:
                error = result.content[0].text  # type: ignore[union-attr]
                break
            assert result.structured_content is not None
            acknowledged.append(result.structured_content["entryId"])
        assert error, "the disk never filled"
        assert "full" in error and "nothing was written" in error, error
        assert acknowledged
        # The server still answers, and has every acknowledged entry and nothing else.
        every = await call(client, "session_get", session_id=sid, view="entries", limit=0)
        assert not every["truncated"] and len(every["entries"]) == every["total"]
        ids = [e["id"] for e in every["entries"] if e["type"] == "message"]
        assert ids == acknowledged


async def test_subscriptions_beyond_the_limit_are_refused(tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    async with Client(make_server(tmp_path, max_subscriptions=3), mode="legacy") as client:
        sids = [(await call(client, "session_create"))["id"] for _ in range(4)]
        for sid in sids[:3]:
            await client.session.subscribe_resource(f"session://{sid}")
        await client.session.subscribe_resource(f"session://{sids[0]}")  # again: no new one
        with pytest.raises(MCPError) as raised:
            await client.session.subscribe_resource(f"session://{sids[3]}")
        assert "too many subscriptions" in str(raised.value) and "limit is 3" in str(raised.value)
        assert "operator can raise it (MCP_AGENT_MAX_SUBSCRIPTIONS)" in str(raised.value)
        assert "--" not in str(raised.value)
        await client.session.unsubscribe_resource(f"session://{sids[1]}")
        await client.session.subscribe_resource(f"session://{sids[3]}")


async def test_subscriptions_to_deleted_sessions_do_not_count_against_the_limit(
    tmp_path: Path,
) -> None:
    """A client watching sessions come and go ran out of subscriptions for ones deleted long
    since, until it unsubscribed from each by hand."""
    from mcp.shared.exceptions import MCPError

    async with Client(make_server(tmp_path, max_subscriptions=3), mode="legacy") as client:
        sids = [(await call(client, "session_create"))["id"] for _ in range(5)]
        await client.session.subscribe_resource("note://not-a-session")  # counts, kept
        for sid in sids[:2]:
            await client.session.subscribe_resource(f"session://{sid}/tree")
        await call(client, "session_delete", session_id=sids[0])
        await client.session.subscribe_resource(f"session://{sids[2]}")
        with pytest.raises(MCPError) as raised:  # no deleted one left to let go of
            await client.session.subscribe_resource(f"session://{sids[3]}")
        assert "limit is 3" in str(raised.value)
        await call(client, "session_delete", session_id=sids[1])
        await client.session.subscribe_resource(f"session://{sids[3]}")


async def test_a_subscription_to_a_uri_of_megabytes_is_refused(tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    server = make_server(tmp_path)
    async with Client(server, mode="legacy") as client:
        sid = (await call(client, "session_create"))["id"]
        long = f"session://{sid}/entries/" + "x" * 5_000
        with pytest.raises(MCPError) as raised:
            await client.session.subscribe_resource(long + "x" * 1_000_000)
        assert "at most 4,096 characters, not 1,005,0" in str(raised.value)
        await client.session.subscribe_resource(long[:4_096])  # at the bound: taken
        assert (await call(client, "session_list"))["sessions"][0]["id"] == sid


async def test_an_error_never_repeats_a_value_of_megabytes(tmp_path: Path) -> None:
    """Whatever a request sends, its error answer stays short: a long value it names comes
    back as its start and how long it was."""
    from mcp.shared.exceptions import MCPError

    huge = "q" * 1_000_000
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]
        before = await call(client, "session_get", session_id=sid, view="entries", limit=0)
        answers = [
            await call_error(client, "session_get", session_id=huge),
            await call_error(client, "session_move_to", session_id=sid, entry_id=huge),
            await call_error(
                client,
                "session_append",
                session_id=sid,
                entry={"type": "label", "target_id": huge, "label": "x"},
            ),
            await call_error(client, "agent_status", run_id=huge),
            await call_error(client, huge),
            await call_error(client, "session_list", **{huge: 1}),
        ]
        for text in answers:
            assert len(text) < 5_000, text[:200]
            assert "\n" not in text
        assert "1,000,000 characters in all" in answers[0]
        assert "not_found: session qqq" in answers[0]
        assert all("1,000,000 characters in all" in text for text in answers[:5])
        assert "there is no tool 'qqq" in answers[4]
        assert "unknown argument 'qqq" in answers[5]
        after = await call(client, "session_get", session_id=sid, view="entries", limit=0)
        assert after == before  # nothing refused was stored

        with pytest.raises(MCPError) as read:
            await client.read_resource("session://" + huge)
        assert "at most 4,096 characters, not 1,000,010" in read.value.error.message
        assert read.value.error.data is None
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("continue_session", {"session_id": huge})
        message = prompt.value.error.message
        assert len(message) < 5_000 and "1,000,000 characters in all" in message


async def test_one_clients_flood_of_writes_leaves_a_thread_to_another_client(
    tmp_path: Path, started: list[Served]
) -> None:
    """Two legacy HTTP sessions, two database threads, and another process holding the write
    lock: the first client's appends wait for it on one thread only, and the second client's
    read is answered meanwhile (before, the appends held every thread and it waited too)."""
    server = Served(tmp_path, "--no-auth", env=server_env(tmp_path, MCP_AGENT_DB_THREADS="2"))
    started.append(server)

    async def session(http: httpx.AsyncClient) -> dict[str, str]:
        opened = await http.post(server.url, json=initialize_request(), headers=HTTP_HEADERS)
        headers = {
            **HTTP_HEADERS,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-06-18",
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(server.url, json=initialized, headers=headers)
        return headers

    ids = itertools.count(2)

    def tool(name: str, **arguments: Any) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments}
        return {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": params}

    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        flood, other = await session(http), await session(http)
        created = await http.post(server.url, json=tool("session_create"), headers=other)
        sid = posted_answer(created)["result"]["structuredContent"]["id"]
        holder = sqlite3.connect(tmp_path / "http.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        appended: list[dict[str, Any]] = []
        try:
            async with anyio.create_task_group() as group:

                async def append(n: int) -> None:
                    call = tool("session_append", session_id=sid, entry=user(f"m{n}"))
                    appended.append(
                        posted_answer(await http.post(server.url, json=call, headers=flood))
                    )

                for n in range(4):
                    group.start_soon(append, n)
                await anyio.sleep(0.5)  # the appends reach the server and wait for the lock
                with anyio.move_on_after(30):
                    read = await http.post(
                        server.url, json=tool("session_stats", session_id=sid), headers=other
                    )
                answered_meanwhile = not appended and read.status_code == 200
                holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert answered_meanwhile
        assert "result" in posted_answer(read)
        assert all("entryId" in a["result"]["structuredContent"] for a in appended)
