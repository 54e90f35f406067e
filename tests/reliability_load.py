"""Load over streamable HTTP: many MCP clients at once, each doing a mix of session operations
against a real server process on a loopback port. Used by tests/test_reliability_load.py and
benchmarks/bench_load.py.

The baseline is a bare ``MCPServer`` with no-op tools of the same names and arguments, served
the same way (uvicorn, streamable HTTP), so that the difference is what our server does.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent
from mcp_support import free_port, wait_for_port
from narrow import narrow

ROOT = Path(__file__).resolve().parent.parent

# The operation mix: (operation, weight).
MIX = [("append", 40), ("get", 20), ("list", 15), ("context", 15), ("create", 10)]

# With a file name as its second argument, each tool first makes one hop to a worker thread of
# ours (mcp_agent.blocking) and back, and session_create and session_append write and fsync
# a few bytes there: the least a server pays whose storage is kept off the event loop.
BARE_SERVER = textwrap.dedent(
    """
    import os
    import sys
    import uuid
    from typing import Any

    import uvicorn
    from mcp.server import MCPServer

    server = MCPServer("bare", log_level="WARNING")

    if len(sys.argv) > 2:
        from mcp_agent.blocking import worker_threads

        offload = worker_threads(8)
        fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

        def write(data: Any) -> None:
            os.write(fd, repr(data).encode())
            os.fsync(fd)

        async def hop(data: Any = None) -> None:
            await offload(lambda: None if data is None else write(data))
    else:
        async def hop(data: Any = None) -> None:
            pass

    @server.tool()
    async def session_create(
        name: str | None = None, cwd: str | None = None, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        await hop(name or "")
        return {"id": str(uuid.uuid4()), "name": name, "entry_count": 0, "leaf_id": None}

    @server.tool()
    async def session_append(session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        await hop(entry)
        return {"session_id": session_id, "entry_id": "00000000", "leaf_id": "00000000"}

    @server.tool()
    async def session_get(session_id: str, view: str = "branch") -> dict[str, Any]:
        await hop()
        return {"session": {"id": session_id}, "view": view, "leaf_id": None, "entries": []}

    @server.tool()
    async def session_list(
        query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        await hop()
        return {"sessions": [], "next_cursor": None}

    @server.tool()
    async def session_context(session_id: str) -> dict[str, Any]:
        await hop()
        return {"session_id": session_id, "messages": [], "thinking_level": "off"}

    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)


def _cpu_seconds(stat_file: Path) -> float | None:
    """User + system CPU time in a /proc stat file (a process's or a thread's)."""
    try:
        stat = stat_file.read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: state is field 3
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerProcess:
    """A server on a loopback port in a child process; its stderr goes to a file (a pipe
    nobody reads could fill up and stall it)."""

    def __init__(self, command: list[str], port: int, folder: Path, env: dict[str, str]) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.log = folder / f"server-{port}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **env}
            )
        wait_for_port(port, self.process, self.log)

    @classmethod
    def ours(cls, folder: Path, durability: str = "full") -> ServerProcess:
        port = free_port()
        command = [sys.executable, "-m", "mcp_agent", "serve", "--transport", "http"]
        command += ["--port", str(port), "--db", str(folder / "load.db"), "--no-auth"]
        return cls(command, port, folder, {"MCP_AGENT_DURABILITY": durability})

    @classmethod
    def replica(cls, folder: Path, db_url: str, **env: str) -> ServerProcess:
        """A replica over PostgreSQL with the test models (tests/replica_server.py)."""
        port = free_port()
        command = [sys.executable, str(ROOT / "tests" / "replica_server.py"), db_url, str(port)]
        (folder / str(port)).mkdir()
        return cls([*command, str(folder / str(port))], port, folder, env)

    @classmethod
    def bare(cls, folder: Path, hop: bool = False) -> ServerProcess:
        """The bare server; with ``hop``, its tools go through a worker thread (BARE_SERVER)."""
        script = folder / "bare_http_server.py"
        script.write_text(BARE_SERVER)
        port = free_port()
        command = [sys.executable, str(script), str(port)]
        if hop:
            command.append(str(folder / "bare_writes.bin"))
        return cls(command, port, folder, {"PYTHONPATH": str(ROOT)})

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the server process has used so far; None off Linux."""
        return _cpu_seconds(Path(f"/proc/{self.process.pid}/stat"))

    def loop_cpu_seconds(self) -> float | None:
        """The part of ``cpu_seconds`` its main thread used: the event loop, where the HTTP
        layers, the SDK and the tools' code outside worker threads run (the rest is worker
        threads: storage); None off Linux."""
        return _cpu_seconds(Path(f"/proc/{self.process.pid}/task/{self.process.pid}/stat"))

    def stop(self) -> int:
        """Stop gracefully (SIGTERM), or kill after 10 s; returns the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@dataclass
class LoadResult:
    clients: int
    ops_per_client: int
    latencies: list[float] = field(default_factory=list)  # seconds, one per operation
    # Those of each client's first operation: its first tool call, for which an MCP client
    # also lists the server's tools and compiles the tool's output schema.
    first_calls: list[float] = field(default_factory=list)
    by_op: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    # What the clients stored: session id -> messages appended (for checking the database).
    appended: Counter[str] = field(default_factory=Counter)
    created: list[str] = field(default_factory=list)
    # CPU time used while the operations ran: by the clients (this process), by the server.
    client_cpu: float = 0.0
    server_cpu: float | None = None
    # Of server_cpu, what the server's event loop (its main thread) used.
    loop_cpu: float | None = None

    def percentile(self, p: float, latencies: list[float] | None = None) -> float:
        """The ``p``th percentile of ``latencies`` (default: all of them)."""
        ordered = sorted(self.latencies if latencies is None else latencies)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    @property
    def p50_ms(self) -> float:
        return self.percentile(50) * 1000

    @property
    def p99_ms(self) -> float:
        return self.percentile(99) * 1000

    @property
    def p99_after_first_ms(self) -> float:
        """p99 over every operation but each client's first."""
        rest = list(self.latencies)
        for first in self.first_calls:
            rest.remove(first)
        return self.percentile(99, rest) * 1000

    @property
    def ops_per_second(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    @property
    def server_cpu_ms_per_op(self) -> float | None:
        if self.server_cpu is None or not self.latencies:
            return None
        return self.server_cpu / len(self.latencies) * 1000

    def summary(self) -> str:
        ops = ", ".join(
            f"{name} p50 {statistics.median(times) * 1000:.1f} ms"
            for name, times in sorted(self.by_op.items())
        )
        cpu = f"clients' CPU {self.client_cpu / self.elapsed:.0%} of one core"
        if self.server_cpu_ms_per_op is not None:
            cpu += f", server CPU {self.server_cpu_ms_per_op:.2f} ms/op"
        if self.loop_cpu is not None and self.latencies:
            cpu += f" ({self.loop_cpu / len(self.latencies) * 1000:.2f} on its event loop)"
        return (
            f"{self.clients} clients x {self.ops_per_client} ops: {len(self.latencies)} ops in "
            f"{self.elapsed:.1f} s ({self.ops_per_second:.0f} ops/s), p50 {self.p50_ms:.1f} ms, "
            f"p99 {self.p99_ms:.1f} ms ({self.p99_after_first_ms:.1f} after each client's first call),"
            f" {len(self.errors)} errors; {cpu}; {ops}"
        )


def _entry(rng: random.Random, n: int) -> dict[str, Any]:
    if rng.random() < 0.5:
        return {"type": "message", "role": "user", "content": f"question {n}"}
    # An assistant message with usage: in pi's form, as JSON text.
    return {
        "type": "pi",
        "json": json.dumps(
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"answer {n} " + "word " * rng.randint(5, 60)}
                    ],
                    "provider": "load",
                    "model": "load",
                    "usage": {"input": 100, "output": 20, "totalTokens": 120},
                    "stopReason": "stop",
                },
            }
        ),
    }


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer inside the client: each request goes to the next of ``urls`` (server
    replicas; a 2026-07-28 client's requests each stand alone)."""

    def __init__(self, urls: list[str], first: int = 0) -> None:
        self.ports = [httpx2.URL(url).port for url in urls]
        self.turn = first
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(port=self.ports[self.turn % len(self.ports)])
        self.turn += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _one_client(
    urls: list[str], index: int, ops: int, seed: int, result: LoadResult, start: anyio.Event
) -> None:
    rng = random.Random(seed * 1000 + index)
    names = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    sessions: list[str] = []

    async def timed(
        op: str, tool: str, arguments: dict[str, Any], first: bool = False
    ) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            with anyio.fail_after(120):
                answer = await client.call_tool(tool, arguments)
        except Exception as error:
            result.errors.append(f"client {index} {tool}: {type(error).__name__}: {error}")
            return None
        elapsed = time.perf_counter() - started
        result.latencies.append(elapsed)
        if first:
            result.first_calls.append(elapsed)
        result.by_op.setdefault(op, []).append(elapsed)
        if answer.is_error:
            text = narrow(answer.content[0], TextContent).text if answer.content else "(no text)"
            result.errors.append(f"client {index} {tool}: {text}")
            return None
        return answer.structured_content

    transport = RoundRobin(urls, index) if len(urls) > 1 else None
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(120), transport=transport) as http,
        Client(streamable_http_client(urls[0], http_client=http)) as client,
    ):
        await start.wait()
        for n in range(ops):
            op = "create" if not sessions else rng.choices(names, weights)[0]
            if op == "create":
                name = f"load {index}.{n}"
                created = await timed(op, "session_create", {"name": name}, first=n == 0)
                if created is not None:
                    sessions.append(created["id"])
                    result.created.append(created["id"])
                continue
            sid = rng.choice(sessions)
            if op == "append":
                done = await timed(
                    op, "session_append", {"session_id": sid, "entry": _entry(rng, n)}
                )
                if done is not None:
                    result.appended[sid] += 1
            elif op == "get":
                await timed(op, "session_get", {"session_id": sid})
            elif op == "list":
                arguments: dict[str, Any] = {"limit": 20}
                if rng.random() < 0.3:
                    arguments["query"] = "question"
                await timed(op, "session_list", arguments)
            else:
                await timed(op, "session_context", {"session_id": sid})


async def run_load(
    url: str | list[str],
    clients: int,
    ops: int,
    seed: int = 0,
    server: ServerProcess | None = None,
) -> LoadResult:
    """``clients`` MCP clients over streamable HTTP, each connected first, then all doing
    ``ops`` operations at once (the first one a session_create). Given several URLs (replicas),
    each client sends its requests to them in turn. With ``server``, its CPU time during the
    operations is recorded too."""
    urls = [url] if isinstance(url, str) else url
    result = LoadResult(clients, ops)
    start = anyio.Event()
    async with anyio.create_task_group() as group:
        for index in range(clients):
            group.start_soon(_one_client, urls, index, ops, seed, result, start)
        await anyio.sleep(0.5 + clients * 0.02)  # every client has connected by then
        began, client_cpu = time.perf_counter(), time.process_time()
        server_cpu = server.cpu_seconds() if server is not None else None
        loop_cpu = server.loop_cpu_seconds() if server is not None else None
        start.set()
    result.elapsed = time.perf_counter() - began
    result.client_cpu = time.process_time() - client_cpu
    if server is not None and server_cpu is not None:
        after = server.cpu_seconds()
        result.server_cpu = after - server_cpu if after is not None else None
        loop_after = server.loop_cpu_seconds()
        if loop_cpu is not None and loop_after is not None:
            result.loop_cpu = loop_after - loop_cpu
    return result


def measure(server: str, clients: int, ops: int, durability: str = "full") -> LoadResult:
    """Start ``server`` ("ours", "bare", or "bare-hop": the bare one through a worker thread)
    in a child process, load it, stop it."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        if server == "ours":
            process = ServerProcess.ours(folder, durability)
        else:
            process = ServerProcess.bare(folder, hop=server == "bare-hop")
        try:
            return anyio.run(run_load, process.url, clients, ops, 0, process)
        finally:
            process.stop()
