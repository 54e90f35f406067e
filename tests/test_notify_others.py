"""What other processes write to a served SQLite file reaches the server's subscribers: a
``serve --transport http`` process on loopback, clients listening (``subscriptions/listen``, as
the viewer page does) or subscribed (``resources/subscribe``, the 2025 handshake), and the
command line (``python -m mcp_agent sessions ...``) or a second server writing to the same
file. The server's own writes are notified once, not again when it sees them in the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from anyio.streams.text import TextReceiveStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp_support import Served, call, server_env
from slow_support import NODE, PEERS, ROOT, needs_node
from test_notify_http import Sessions, legacy_subscriber

# A hang guard for each wait, not a speed check: a notification comes within about a second.
HANG_GUARD_S = 60


@pytest.fixture(name="served", scope="module")
def served_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    """One ``serve --no-auth`` on ``http.db`` in a folder of its own, shared by the module (a
    start is seconds of a loaded machine); each test makes sessions of its own."""
    tmp = tmp_path_factory.mktemp("notify-others")
    with Served(tmp, "--no-auth") as server:
        yield server, tmp


def cli(tmp: Path, *args: str) -> None:
    """The command line, a process of its own, on the served file."""
    command = [sys.executable, "-m", "mcp_agent", *args, "--db", str(tmp / "http.db")]
    done = subprocess.run(
        command, env=server_env(tmp), capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr


@asynccontextmanager
async def connect(server: Served) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(HANG_GUARD_S)) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        yield client


@pytest.mark.anyio
async def test_a_rename_from_the_command_line_reaches_a_listener(
    served: tuple[Served, Path],
) -> None:
    server, tmp = served
    async with connect(server) as client:
        sid = (await call(client, "session_create", name="before"))["id"]
        uri = f"session://{sid}"
        async with client.listen(resource_subscriptions=[uri]) as events:
            await anyio.to_thread.run_sync(cli, tmp, "sessions", "rename", sid, "after")
            with anyio.fail_after(HANG_GUARD_S):
                event = await events.__anext__()
        assert isinstance(event, ResourceUpdated) and event.uri == uri
        read = await call(client, "session_get", session_id=sid, limit=0)
        assert read["session"]["name"] == "after"


@pytest.mark.anyio
async def test_a_rename_from_the_command_line_changes_the_listed_resources(
    served: tuple[Served, Path],
) -> None:
    """A client that lists resources (and subscribes to none) hears of another process's
    rename as of this server's own: the name is what resources/list shows."""
    server, tmp = served
    async with connect(server) as client:
        sid = (await call(client, "session_create", name="before"))["id"]
        async with client.listen(resources_list_changed=True) as events:
            await anyio.to_thread.run_sync(cli, tmp, "sessions", "rename", sid, "after")
            with anyio.fail_after(HANG_GUARD_S):
                event = await events.__anext__()
        assert isinstance(event, ResourcesListChanged)
        listed = (await client.list_resources()).resources
        assert {r.name for r in listed if str(r.uri) == f"session://{sid}"} == {"after"}


@needs_node
@pytest.mark.anyio
async def test_a_typescript_sdk_subscriber_hears_the_command_lines_writes(
    served: tuple[Served, Path],
) -> None:
    """The TypeScript SDK's client subscribed to a session (resources/subscribe) while the
    command line, a process of its own, renames it in the same file: it hears the session
    updated and the list changed, and reads the new name back."""
    server, tmp = served
    async with connect(server) as client:
        sid = (await call(client, "session_create", name="before"))["id"]
    script = PEERS / "ts_subscribe.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_subscribe.mjs", script)
    command = [str(NODE), str(script), server.url, sid, "1", "1"]
    lines: list[str] = []
    async with await anyio.open_process(command, stdin=subprocess.DEVNULL) as process:
        assert process.stdout is not None
        try:
            with anyio.fail_after(HANG_GUARD_S):
                async for chunk in TextReceiveStream(process.stdout):
                    for line in chunk.splitlines():
                        lines.append(line)
                        if line == "subscribed":
                            await anyio.to_thread.run_sync(
                                cli, tmp, "sessions", "rename", sid, "after"
                            )
                await process.wait()
        finally:
            if process.returncode is None:  # it waits on, for what it did not hear
                process.kill()
    assert process.returncode == 0, lines[-20:]
    heard = json.loads(lines[-1])
    assert f"session://{sid}" in heard["updated"] and heard["listChanged"] >= 1, heard
    assert heard["name"] == "after" and heard["messages"] == 0, heard


@pytest.mark.anyio
async def test_a_deletion_from_the_command_line_reaches_a_listener(
    served: tuple[Served, Path],
) -> None:
    """The viewer's way: the open session and list changes on one stream; the session
    deleted by another process is said to be updated (reading it says it is gone), and the
    list to have changed."""
    server, tmp = served
    async with connect(server) as client:
        sid = (await call(client, "session_create"))["id"]
        uri = f"session://{sid}"
        heard: set[str] = set()
        async with client.listen(
            resource_subscriptions=[uri], resources_list_changed=True
        ) as events:
            await anyio.to_thread.run_sync(cli, tmp, "sessions", "delete", sid, "--yes")
            with anyio.fail_after(HANG_GUARD_S):
                async for event in events:
                    if isinstance(event, ResourcesListChanged):
                        heard.add("list_changed")
                    elif isinstance(event, ResourceUpdated) and event.uri == uri:
                        heard.add(uri)
                    if heard == {"list_changed", uri}:
                        break


@pytest.mark.anyio
async def test_a_second_servers_append_reaches_a_subscriber_and_own_writes_come_once(
    served: tuple[Served, Path],
) -> None:
    """A 2025 subscriber of two sessions: an append through this server is notified once (it
    is in the file too, where the server sees it and knows it for its own); an append through
    a second server on the same file comes next, and nothing else between."""
    server, tmp = served
    with Served(tmp, "--no-auth") as second:
        async with httpx.AsyncClient(timeout=HANG_GUARD_S) as http, connect(second) as other:
            sessions = Sessions(http, server.url)
            writer = await sessions.open()
            own = (await sessions.tool(writer, "session_create"))["id"]
            theirs = (await sessions.tool(writer, "session_create"))["id"]
            uris = [f"session://{own}", f"session://{theirs}"]
            async with legacy_subscriber(sessions, uris, list_changes=True) as updates:
                described: list[str] = []

                async def next_update() -> str:
                    # The first user message of a session made here is its description in
                    # resources/list: that list change once, before or after its update.
                    with anyio.fail_after(HANG_GUARD_S):
                        while (got := await updates.receive()) == "list_changed":
                            described.append(got)
                    return got

                await sessions.append(writer, own)
                assert await next_update() == uris[0]
                entry = {"type": "message", "role": "user", "content": "from the second"}
                await call(other, "session_append", session_id=theirs, entry=entry)
                # The look that finds the second server's append has the first append in the
                # file as well, written before it: a second notice of it would come first.
                assert await next_update() == uris[1]
                assert len(described) <= 1


@needs_node
@pytest.mark.anyio
async def test_two_clients_in_two_processes_append_to_one_session_at_once(
    served: tuple[Served, Path],
) -> None:
    """The TypeScript SDK's client (tests/peers/ts_append_along.mjs) and the Python SDK's, each
    subscribed to one session, append to it at the same time: every entry is kept, each
    client's in its order, on one line of entries (no append forks the branch), and each
    client sees all of the other's through what its subscription tells it."""
    server, _ = served
    count = 20
    script = PEERS / "ts_append_along.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_append_along.mjs", script)
    async with connect(server) as client:
        sid = (await call(client, "session_create"))["id"]
        uri = f"session://{sid}"
        command = [str(NODE), str(script), server.url, sid, "ts", str(count), "py"]
        mine: list[str] = []
        seen_of_ts: set[str] = set()
        lines: list[str] = []

        async def append_along() -> None:
            for n in range(count):
                entry = {"type": "message", "role": "user", "content": f"py {n}"}
                mine.append(
                    (await call(client, "session_append", session_id=sid, entry=entry))["entryId"]
                )

        async with (
            await anyio.open_process(command) as process,
            client.listen(resource_subscriptions=[uri]) as events,
        ):
            assert process.stdout is not None and process.stdin is not None
            output = TextReceiveStream(process.stdout)
            try:
                with anyio.fail_after(HANG_GUARD_S):
                    async for chunk in output:
                        lines += chunk.splitlines()
                        if "subscribed" in lines:
                            break
                    await process.stdin.send(b"go\n")
                    async with anyio.create_task_group() as both:
                        both.start_soon(append_along)
                        async for event in events:
                            if not (isinstance(event, ResourceUpdated) and event.uri == uri):
                                continue
                            read = await call(client, "session_get", session_id=sid, limit=0)
                            texts = [
                                e["message"]["content"]
                                for e in read["entries"]
                                if e["type"] == "message"
                            ]
                            texts = [t if isinstance(t, str) else t[0]["text"] for t in texts]
                            seen_of_ts = {t for t in texts if t.startswith("ts ")}
                            if len(seen_of_ts) == count and len(mine) == count:
                                break
                    async for chunk in output:
                        lines += chunk.splitlines()
                    await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
        assert process.stderr is not None
        assert process.returncode == 0, (lines[-20:], await process.stderr.receive())
        theirs = json.loads(lines[-1])
        entries = (await call(client, "session_get", session_id=sid, view="entries", limit=0))[
            "entries"
        ]
        branch = (await call(client, "session_get", session_id=sid, limit=0))["entries"]
    # Each saw every message of the other's through its subscription.
    assert seen_of_ts == {f"ts {n}" for n in range(count)}
    assert sorted(theirs["otherSeen"]) == sorted(f"py {n}" for n in range(count)), theirs
    # Every entry kept, on one line: each the child of the one appended before it.
    ids = [e["id"] for e in entries]
    assert len(ids) == 2 * count and set(ids) == set(mine) | set(theirs["mine"])
    assert [e["parentId"] for e in entries] == [None, *ids[:-1]]
    assert [e["id"] for e in branch] == ids
    # Each client's entries in the order it appended them.
    assert [i for i in ids if i in set(mine)] == mine
    assert [i for i in ids if i in set(theirs["mine"])] == theirs["mine"]
    said = {e["id"]: e["message"]["content"] for e in entries}
    text = {i: c if isinstance(c, str) else c[0]["text"] for i, c in said.items()}
    assert [text[i] for i in mine] == [f"py {n}" for n in range(count)]
    assert [text[i] for i in theirs["mine"]] == [f"ts {n}" for n in range(count)]
