"""Notifications over real streamable HTTP (a ``serve`` process on loopback, 2025 handshake):
a subscriber that stops reading its event stream, with a 4 KB receive buffer, neither delays a
healthy subscriber nor holds the server's memory: its sends block once the (bounded,
``--http-send-buffer``) socket buffers are full, and it is dropped after
``--notification-timeout``."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_support import (
    HTTP_HEADERS,
    Served,
    initialize_request,
    poll,
    posted_answer,
    started_fixture,  # noqa: F401  (the started fixture)
)

HANG_GUARD_S = 60
SESSIONS = 10  # the stuck subscriber watches all four resources of each
# The servers' kernel send buffer for each connection, the smallest --http-send-buffer takes
# (the kernel doubles it): the stuck subscriber's sends block after far fewer requests than at
# the default 256 KiB (at which this test took some 1,700 requests).
SEND_BUFFER = 4096
# Rounds of one append to each session: 4 notifications of about 160 bytes each per append.
# The buffers between the stuck subscriber and the server (the server's 8 KiB send buffer, a
# 4 KB receive buffer, uvicorn's 64 KiB write buffer) are full after about 12 rounds (measured:
# a 1 s --notification-timeout fired first at the 12th, with a pause after each); twice that.
ROUNDS_TO_FILL = 24
DROPPED = "legacy connection dropped from notifications"
# The other way the server stops waiting for a stuck subscriber, with the same timeout: its
# event stream closed (what it missed kept for a resume), after which sends to it never block.
STREAM_CLOSED = "closed event stream"


def gave_up(server: Served) -> bool:
    """Whether the server stopped waiting for the stuck subscriber, either way."""
    banner = server.banner()
    return DROPPED in banner or STREAM_CLOSED in banner


class Sessions:
    """Raw JSON-RPC over HTTP, one MCP session per ``open()``."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url

    def headers(self, session: str) -> dict[str, str]:
        return {**HTTP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}

    async def open(self) -> str:
        response = await self.http.post(self.url, json=initialize_request(), headers=HTTP_HEADERS)
        session = response.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self.http.post(self.url, json=note, headers=self.headers(session))
        return session

    async def call(self, session: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await self.http.post(self.url, json=body, headers=self.headers(session))
        assert response.status_code == 200, response.text
        data = posted_answer(response)
        assert "result" in data, response.text
        result: dict[str, Any] = data["result"]
        assert not result.get("isError"), result
        return result

    async def tool(self, session: str, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(session, "tools/call", {"name": name, "arguments": arguments})
        structured: dict[str, Any] = result["structuredContent"]
        return structured

    async def append(self, session: str, session_id: str) -> None:
        entry = {"type": "message", "role": "user", "content": "hi"}
        await self.tool(session, "session_append", session_id=session_id, entry=entry)


def unsent_bytes(server: Served, client: socket.socket) -> int:
    """What the server's kernel holds, written and not taken, on its end of ``client``'s
    connection (Linux's /proc/net/tcp: the server is on 127.0.0.1)."""
    ends = {(server.port, client.getsockname()[1])}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(field.split(":")[1], 16) for field in fields[1:3])
        if (local, remote) in ends:
            return int(fields[4].split(":")[0], 16)
    raise AssertionError(f"no connection from port {client.getsockname()[1]} in /proc/net/tcp")


def stop_reading(server: Served, session: str) -> socket.socket:
    """Open the session's event stream on a socket with a 4 KB receive buffer, never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    request = (
        f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Accept: text/event-stream\r\n"
        f"mcp-session-id: {session}\r\nmcp-protocol-version: 2025-06-18\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


LIST_CHANGED_METHOD = "notifications/resources/list_changed"


@asynccontextmanager
async def legacy_subscriber(
    sessions: Sessions, uris: list[str], list_changes: bool = False
) -> AsyncIterator[anyio.abc.ObjectReceiveStream[str]]:
    """A 2025 client subscribed to ``uris`` whose event stream is read: yields the URIs of the
    updates it receives (and, with ``list_changes``, "list_changed" for list changes), as they
    come."""
    session = await sessions.open()
    for uri in uris:
        await sessions.call(session, "resources/subscribe", {"uri": uri})
    send, receive = anyio.create_memory_object_stream[str](10_000)
    opened = anyio.Event()

    async def read() -> None:
        stream = sessions.http.stream("GET", sessions.url, headers=sessions.headers(session))
        async with stream as response:
            assert response.status_code == 200
            opened.set()
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                message: dict[str, Any] = json.loads(line[len("data: ") :])
                if message.get("method") == "notifications/resources/updated":
                    await send.send(message["params"]["uri"])
                elif list_changes and message.get("method") == LIST_CHANGED_METHOD:
                    await send.send("list_changed")

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        await opened.wait()
        yield receive
        group.cancel_scope.cancel()


async def fill_a_stuck_subscriber(
    server: Served, rounds: int, until_dropped: bool = False
) -> tuple[int, int, int]:
    """A stuck subscriber watching ``SESSIONS`` sessions and a healthy one watching one more;
    ``rounds`` rounds of an append to each (or until the stuck one is dropped). After each
    round the healthy one must get its update before the next round starts: a notifier that
    waits for the stuck one never gets there. Returns (rounds run, updates the healthy got,
    bytes the server's kernel held for the stuck one at the end). Each request and each wait
    for an update has its own bound: the whole (then some 1,700 requests) took over three
    minutes at a load of 20 on 2 cores, past a bound on all of it."""
    async with httpx.AsyncClient(timeout=HANG_GUARD_S) as http:
        sessions = Sessions(http, server.url)
        writer = await sessions.open()
        ids = [(await sessions.tool(writer, "session_create"))["id"] for _ in range(SESSIONS)]
        mine = (await sessions.tool(writer, "session_create"))["id"]
        stuck = await sessions.open()
        for session_id in ids:
            for suffix in ("", "/tree", "/context", "/export.jsonl"):
                uri = f"session://{session_id}{suffix}"
                await sessions.call(stuck, "resources/subscribe", {"uri": uri})
        sock = stop_reading(server, stuck)
        got = 0
        try:
            async with legacy_subscriber(sessions, [f"session://{mine}"]) as updates:
                for done in range(1, rounds + 1):
                    for session_id in ids:
                        await sessions.append(writer, session_id)
                    await sessions.append(writer, mine)
                    with anyio.fail_after(HANG_GUARD_S):
                        assert await updates.receive() == f"session://{mine}"
                    got += 1
                    if until_dropped and gave_up(server):
                        return done, got, unsent_bytes(server, sock)
            return rounds, got, unsent_bytes(server, sock)
        finally:
            sock.close()


def test_a_stuck_subscriber_never_delays_a_healthy_one(
    tmp_path: Path, started: list[Served]
) -> None:
    # Sends to the stuck subscriber block for good (it is never dropped in this test).
    server = Served(
        tmp_path,
        "--no-auth",
        "--notification-timeout",
        "3600",
        "--http-send-buffer",
        str(SEND_BUFFER),
    )
    started.append(server)
    rounds, got, unsent = anyio.run(fill_a_stuck_subscriber, server, ROUNDS_TO_FILL)
    assert got == rounds == ROUNDS_TO_FILL
    # What waits for it in the kernel is what --http-send-buffer allows (doubled), all of it
    # full: no more (the rest waits in the server, then blocks its sends).
    assert SEND_BUFFER < unsent <= 2 * SEND_BUFFER
    assert DROPPED not in server.banner()
    assert server.process.poll() is None


def test_a_stuck_subscriber_is_dropped_once_its_send_blocks(
    tmp_path: Path, started: list[Served]
) -> None:
    """Once a subscriber's send blocks for --notification-timeout, it is dropped from
    notifications, or its event stream is closed (the two watches share the timeout, and the
    one that fires first is the one that ends the wait), and only once."""
    server = Served(
        tmp_path, "--no-auth", "--notification-timeout", "1", "--http-send-buffer", str(SEND_BUFFER)
    )
    started.append(server)
    rounds, got, _ = anyio.run(
        lambda: fill_a_stuck_subscriber(server, ROUNDS_TO_FILL * 5, until_dropped=True)
    )
    poll(lambda: gave_up(server), "the stuck subscriber was never dropped")
    assert got == rounds
    assert server.banner().count(DROPPED) <= 1


@pytest.fixture(name="server", scope="module")
def server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``serve --no-auth`` for the tests that only need a server that answers (a start is
    seconds of a loaded machine); each opens sessions of its own."""
    with Served(tmp_path_factory.mktemp("notify-http"), "--no-auth") as server:
        yield server


def test_a_client_that_only_initialized_hears_list_changes(server: Served) -> None:
    """A legacy client with its event stream open hears another client's list changes from
    its handshake on (before: only once it had called a tool, listed resources or subscribed,
    so a client waiting for the list to change never heard of it)."""

    async def scenario() -> None:
        with anyio.fail_after(HANG_GUARD_S):
            async with httpx.AsyncClient(timeout=HANG_GUARD_S) as http:
                sessions = Sessions(http, server.url)
                listener = await sessions.open()
                writer = await sessions.open()
                heard = anyio.Event()
                opened = anyio.Event()

                async def listen() -> None:
                    headers = sessions.headers(listener)
                    async with http.stream("GET", server.url, headers=headers) as response:
                        assert response.status_code == 200
                        opened.set()
                        async for line in response.aiter_lines():
                            if "notifications/resources/list_changed" in line:
                                heard.set()
                                return

                async with anyio.create_task_group() as group:
                    group.start_soon(listen)
                    await opened.wait()
                    await sessions.tool(writer, "session_create")
                    await heard.wait()

    anyio.run(scenario)


@pytest.mark.anyio
async def test_an_event_stream_asked_to_resume_opens_afresh(server: Served) -> None:
    """A GET with a Last-Event-ID that is no id of ours (junk, or another server's) got a bare
    500 from the SDK; now it is the session's event stream, and carries its notifications.
    (Ids of ours resume: tests/test_http_resume.py.)"""
    async with httpx.AsyncClient(timeout=HANG_GUARD_S) as http:
        sessions = Sessions(http, server.url)
        session = await sessions.open()
        headers = {**sessions.headers(session), "Last-Event-ID": "no-such-event"}
        async with http.stream("GET", server.url, headers=headers) as events:
            assert events.status_code == 200
            assert events.headers["content-type"].startswith("text/event-stream")
            await sessions.tool(session, "session_create")
            async for line in events.aiter_lines():
                if line.startswith("data: "):
                    message = json.loads(line[len("data: ") :])
                    assert message["method"] == "notifications/resources/list_changed"
                    break
