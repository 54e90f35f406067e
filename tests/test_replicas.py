"""Three server replicas (real processes, streamable HTTP on loopback) over one PostgreSQL
database behave as one server: a session made on one is appended to on another and read on the
third; a subscriber on one hears appends made through another; a run on one is watched and
cancelled through another; a replica killed mid-run frees its session and its run is marked
ended within the lease time; many clients going round-robin over the replicas lose nothing.

CI runs the load with 10 clients x 20 operations; ``MCP_AGENT_FULL=1`` runs 50 x 100.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated
from mcp_support import HTTP_HEADERS, call, call_error, initialize_request
from narrow import narrow
from pg_support import Cluster
from reliability_load import RoundRobin, ServerProcess, run_load
from reliability_support import size
from test_server import user

from mcp_agent.sessions import MessageEntry

LEASE_SECONDS = 6  # the shortest allowed
CLIENTS = size(10, 50)
OPS = size(20, 100)


@pytest.fixture(scope="module")
def replica_db(pg_cluster: Cluster) -> str:
    return pg_cluster.new_database()


@pytest.fixture(scope="module")
def started_replicas(
    tmp_path_factory: pytest.TempPathFactory, replica_db: str
) -> Iterator[tuple[list[ServerProcess], Callable[[int], ServerProcess]]]:
    """Three replicas, started once for the module (each takes seconds to start on a busy
    machine), and how to start the nth again."""
    tmp_path = tmp_path_factory.mktemp("replicas")
    from concurrent.futures import ThreadPoolExecutor

    def start(n: int) -> ServerProcess:
        return ServerProcess.replica(
            tmp_path,
            replica_db,
            MCP_AGENT_LEASE_SECONDS=str(LEASE_SECONDS),
            MCP_AGENT_REPLICA=f"r{n}",
        )

    started: list[ServerProcess] = []
    try:
        with ThreadPoolExecutor(3) as pool:  # they start side by side, as replicas do
            for future in [pool.submit(start, n) for n in range(3)]:
                started.append(future.result())
        yield started, start
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture
def replicas(
    started_replicas: tuple[list[ServerProcess], Callable[[int], ServerProcess]],
) -> list[ServerProcess]:
    """The module's three replicas, all up: one a test killed (the kill test, last in file
    order) is started again for the tests after it, whatever their order."""
    started, start = started_replicas
    for n, replica in enumerate(started):
        if replica.process.poll() is not None:
            started[n] = start(n)
    return started


@asynccontextmanager
async def connect(replica: ServerProcess, **options: Any) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http,
        Client(streamable_http_client(replica.url, http_client=http), **options) as client,
    ):
        yield client


@pytest.mark.anyio
async def test_created_appended_read_and_heard_on_different_replicas(
    replicas: list[ServerProcess],
) -> None:
    async with (
        connect(replicas[0]) as first,
        connect(replicas[1]) as second,
        connect(replicas[2]) as third,
    ):
        sid = (await call(first, "session_create", name="shared"))["id"]
        # A word of this test's own: the module's other tests (in any order) append m0, m1...
        word = f"w{uuid.uuid4().hex}"
        ids = [
            (await call(second, "session_append", session_id=sid, entry=user(f"{word}{i}")))[
                "entryId"
            ]
            for i in range(3)
        ]
        branch = await call(third, "session_get", session_id=sid, limit=0)
        assert [e["id"] for e in branch["entries"] if e["type"] == "message"] == ids
        listing = await call(third, "session_list", query=f"{word}1")
        assert [s["id"] for s in listing["sessions"]] == [sid]

        async with first.listen(resource_subscriptions=[f"session://{sid}"]) as events:
            # The listen stream is open once the ack is in: an append through another replica
            # now reaches it (through PostgreSQL NOTIFY).
            sent = time.perf_counter()
            await call(second, "session_append", session_id=sid, entry=user("heard?"))
            with anyio.fail_after(10):  # a hang guard, not a speed check (benchmarks measure)
                event = await events.__anext__()
            print(f"cross-replica notification after {1000 * (time.perf_counter() - sent):.0f} ms")
        assert type(event).__name__ == "ResourceUpdated"
        assert narrow(event, ResourceUpdated).uri == f"session://{sid}"


@pytest.mark.anyio
async def test_a_run_on_one_replica_is_watched_and_cancelled_through_another(
    replicas: list[ServerProcess],
) -> None:
    async with connect(replicas[0]) as first, connect(replicas[1]) as second:
        run = await call(first, "agent_run", prompt="slow please", wait=False)
        text = await call_error(second, "agent_run", prompt="me too", session_id=run["sessionId"])
        assert "busy" in text and run["runId"] in text
        seen = await call(second, "agent_status", run_id=run["runId"])
        assert seen["status"] == "running"
        cancelled = await call(second, "agent_cancel", run_id=run["runId"])
        assert cancelled["status"] == "aborted" and "agent_cancel" in cancelled["error"]
        after = await call(second, "agent_run", prompt="hello", session_id=run["sessionId"])
        assert after["answer"] == "echo: hello"


class Sticky(RoundRobin):
    """The load balancer of manifests/deploy/nginx.conf, inside the client: a request with an
    Mcp-Session-Id goes to the replica its prefix names ("r1." -> the second), any other to
    the next replica in turn."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = request.headers.get("mcp-session-id", "")
        if session.startswith("r") and "." in session:
            port = self.ports[int(session[1 : session.index(".")])]
            request.url = request.url.copy_with(port=port)
            return await self.inner.handle_async_request(request)
        return await super().handle_async_request(request)


@pytest.mark.anyio
async def test_legacy_clients_work_through_a_balancer_sticky_on_their_session_id(
    replicas: list[ServerProcess],
) -> None:
    """Why the balancer must route legacy clients by Mcp-Session-Id (README: Several replicas): their
    session lives in one replica, whose name begins its id."""
    async with httpx.AsyncClient(timeout=30) as raw:
        made = await raw.post(replicas[1].url, json=initialize_request(), headers=HTTP_HEADERS)
        session_id = made.headers["mcp-session-id"]
        assert session_id.startswith("r1.")
        headers = {
            **HTTP_HEADERS,
            "mcp-session-id": session_id,
            "mcp-protocol-version": "2025-06-18",
        }
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert (await raw.post(replicas[1].url, json=ping, headers=headers)).status_code == 200
        # Anywhere else the session is unknown: the client would have to start again.
        assert (await raw.post(replicas[2].url, json=ping, headers=headers)).status_code == 404

    urls = [r.url for r in replicas]
    for first in range(3):  # whichever replica the handshake lands on
        async with (
            httpx2.AsyncClient(timeout=httpx2.Timeout(60), transport=Sticky(urls, first)) as http,
            Client(streamable_http_client(urls[0], http_client=http), mode="legacy") as client,
        ):
            sid = (await call(client, "session_create"))["id"]
            for n in range(3):
                await call(client, "session_append", session_id=sid, entry=user(f"m{n}"))
            branch = await call(client, "session_get", session_id=sid, limit=0)
            assert len(branch["entries"]) == 3


@pytest.mark.slow
def test_many_clients_round_robin_over_three_replicas(
    replicas: list[ServerProcess], replica_db: str
) -> None:
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    result = anyio.run(run_load, [r.url for r in replicas], CLIENTS, OPS)
    print(result.summary())
    assert result.errors == [], result.errors[:5]
    assert len(result.latencies) == CLIENTS * OPS
    with PostgresSessionRepo(replica_db) as repo:
        stored = {}
        for sid in result.created:
            entries = repo.open(sid).get_entries()
            stored[sid] = sum(isinstance(e, MessageEntry) for e in entries)
    assert +Counter(stored) == +result.appended  # every acknowledged append, and only those


@pytest.mark.anyio
async def test_a_replica_killed_mid_run_frees_its_session_and_loses_nothing_acknowledged(
    replicas: list[ServerProcess],
) -> None:
    doomed = replicas[0]
    async with connect(replicas[1]) as survivor:
        async with connect(doomed) as client:
            sid = (await call(client, "session_create"))["id"]
            acked = [
                (await call(client, "session_append", session_id=sid, entry=user(f"kept {i}")))[
                    "entryId"
                ]
                for i in range(5)
            ]
            run = await call(client, "agent_run", prompt="slow please", session_id=sid, wait=False)
            # Killed once the model streams (its prompt stored before it was called): the board
            # says "running" from the start, before the run has stored anything, and a kill
            # then left no prompt to find on a busy machine.
            seen: dict[str, Any] = {}
            for _ in range(200):  # bounded: the board is written twice a second
                seen = await call(survivor, "agent_status", run_id=run["runId"])
                if seen["lastEvent"].startswith("text_delta"):
                    break
                await anyio.sleep(0.05)
            assert seen["status"] == "running" and seen["lastEvent"].startswith("text_delta")
            doomed.process.kill()  # SIGKILL, mid-run
            doomed.process.wait(10)
        ended = None
        for _ in range(20 * LEASE_SECONDS):  # bounded: the lease time and then some
            ended = await call(survivor, "agent_status", run_id=run["runId"])
            if ended["status"] != "running":
                break
            await anyio.sleep(0.25)
        assert ended is not None and ended["status"] == "error"
        assert ended["error"] == "the server running it stopped"
        entries = (await call(survivor, "session_get", session_id=sid, view="entries", limit=0))[
            "entries"
        ]
        stored = [e["id"] for e in entries]
        assert stored[: len(acked)] == acked
        assert "slow please" in json.dumps(entries)
        again = await call(survivor, "agent_run", prompt="still here?", session_id=sid)
        assert again["answer"] == "echo: still here?"
