"""Load: many MCP clients at once over streamable HTTP against a real server process on a
loopback port, each doing a mix of session operations (create, append, get, list, context).
Zero errors, every write stored, p50/p99 latency reported (not asserted).

CI runs 16 clients x 25 operations; ``MCP_AGENT_FULL=1`` runs the full 50 x 100.
``python benchmarks/run.py`` reports the same figures beside a bare MCP server.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from mcp_support import LOOPBACK_HTTP, initialize_request
from reliability_load import ServerProcess, run_load
from reliability_support import check_sqlite_store, size

from mcp_agent.sessions import MessageEntry

CLIENTS = size(16, 50)
OPS = size(25, 100)

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess.ours(tmp_path)
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.slow
def test_concurrent_clients_over_http(
    server: ServerProcess, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    result = anyio.run(run_load, server.url, CLIENTS, OPS, 0, server)
    print(result.summary())
    record_property("load", result.summary())
    # No errors also means nobody waited out a lock timeout: that is an error that says so.
    # (Latency is reported above and compared in benchmarks/bench_load.py, not asserted.)
    assert result.errors == [], result.errors[:5]
    assert len(result.latencies) == CLIENTS * OPS
    assert len(result.first_calls) == CLIENTS  # each client's first call, once

    # uvicorn shuts down gracefully on SIGTERM, then re-raises it: -15 is a clean stop.
    assert server.stop() in (0, -signal.SIGTERM), server.log.read_text()[-3000:]
    store = check_sqlite_store(tmp_path / "load.db")
    assert sorted(store) == sorted(result.created)
    stored = Counter(
        {sid: sum(isinstance(e, MessageEntry) for e in entries) for sid, entries in store.items()}
    )
    assert +stored == +result.appended  # every acknowledged append is there, and only those
    log = server.log.read_text()
    assert "Traceback" not in log, log[-3000:]


def test_garbage_requests_get_4xx_and_the_server_carries_on(server: ServerProcess) -> None:
    def post(body: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
        return LOOPBACK_HTTP.post(server.url, content=body, headers=headers or HEADERS, timeout=10)

    initialize = initialize_request()
    garbage: list[tuple[str, httpx.Response]] = [
        ("not JSON", post(b"{this is not json")),
        ("not UTF-8", post(b"\xff\xfe\x00garbage")),
        ("empty body", post(b"")),
        ("a JSON array of junk", post(json.dumps([1, "two", None]))),
        ("a JSON string", post(json.dumps("hello"))),
        ("no method", post(json.dumps({"jsonrpc": "2.0", "id": 1}))),
        ("wrong version", post(json.dumps({**initialize, "jsonrpc": "1.0"}))),
        ("tools/call before initialize", post(json.dumps({**initialize, "method": "tools/call"}))),
        ("unknown session", post(json.dumps(initialize), {**HEADERS, "mcp-session-id": "nope"})),
        (
            "wrong content type",
            post(json.dumps(initialize), {**HEADERS, "Content-Type": "text/plain"}),
        ),
        ("GET without a session", httpx.get(server.url, headers=HEADERS, timeout=10)),
        (
            "DELETE an unknown session",
            httpx.delete(server.url, headers={**HEADERS, "mcp-session-id": "x"}),
        ),
    ]
    for what, response in garbage:
        # Refused as the client's mistake, never a server error (5xx) or a success.
        assert 400 <= response.status_code < 500, (what, response.status_code, response.text)
    # And the server still serves real clients.
    result = anyio.run(run_load, server.url, 2, 5)
    assert result.errors == []
