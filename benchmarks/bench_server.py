"""The MCP server's overhead, side by side with a bare MCPServer in the same run.

Rows:
- ``session_append round trip (in-process)`` / ``(stdio)``: one durable append through our
  server vs. a no-op tool with the same arguments on a bare ``MCPServer``; target ratio ≤ 1.3.
  Over stdio our server uses its event-loop transport (mcp_agent/server/stdio.py) and the bare
  one the SDK's; a third row puts the bare tool on our transport too, which leaves the cost of
  the append itself. At durability full, a reference row sets ours against the bare tool on
  our transport writing and fsyncing a few bytes on one of our worker threads: what any
  durable write kept off the event loop costs, before a database or a session.
- ``server CPU per session_append``: the CPU time (every thread) the stdio server process
  spends per append, ours against the bare tool on our transport (at durability full: fsyncing
  on a worker thread), both measured in the rounds above: what our parsing, validation, write
  turn, SQL and answer cost, apart from waiting for the disk (reference; Linux only).
- ``WAL pages a durable append writes``: the pages its commit's fsync flushes (the entry, its
  two indexes, the session's row and its ``modified`` index, and SQLite's rebalancing of the
  index pages) against a plain insert's; a count, the same on any machine (reference).
- ``fdatasync after N WAL frames vs after 1``: whether the bytes a commit writes matter to
  the fsync on this disk (N: the pages a durable append writes), the two taking turns write by
  write (reference).
- ``server start to first answer (stdio)``: spawning ``mcp-agent-sessions serve`` until
  ``tools/list`` is answered vs. the same for a bare ``MCPServer`` script; target ≤ 1.3.
- ``built-in tool via in-process MCP client``: the overhead per call of reaching a built-in tool
  through the tool hub's in-memory client instead of calling the function; target < 0.5 ms,
  and the same with 20 configured (unstarted) downstream servers.
- ``a downstream server's answer over stdio``: a call to a server we start as a child process,
  through our client transport (mcp_agent/proxy/child_stdio.py) vs the SDK's ``stdio_client``,
  for a small answer and for one of 20 MB on one line (a big picture as base64); reference.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp import Client, StdioServerParameters
from mcp.server import MCPServer

from mcp_agent.abort import AbortController
from mcp_agent.manifests import AgentManifest, ServerConfig
from mcp_agent.proxy.hub import ToolHub
from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server.app import build_server
from mcp_agent.sessions.sqlite import SqliteSessionRepo

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common
from common import quick, row

ROOT = Path(__file__).resolve().parent.parent

BARE_SERVER = textwrap.dedent(
    """
    from typing import Any
    from mcp.server import MCPServer

    server = MCPServer("bare", log_level="WARNING")

    @server.tool()
    async def session_append(session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        return {"session_id": session_id, "entry_id": "00000000", "leaf_id": "00000000"}

    server.run("stdio")
    """
)
# The same bare server on our stdio transport instead of the SDK's.
BARE_ON_OUR_STDIO = BARE_SERVER.replace(
    'server.run("stdio")',
    "import anyio\nfrom mcp_agent.server.stdio import run_stdio\nanyio.run(run_stdio, server)",
)


# The same bare tool on our transport, writing and fsyncing a few bytes on one of our worker
# threads: the least any server pays for a durable write kept off its event loop (the hop to a
# worker thread and back, and one fsync), without a database or a session.
BARE_DURABLE_HOP_ON_OUR_STDIO = textwrap.dedent(
    """
    import os
    import sys
    from typing import Any

    import anyio
    from mcp.server import MCPServer

    from mcp_agent.blocking import worker_threads
    from mcp_agent.server.stdio import run_stdio

    server = MCPServer("bare", log_level="WARNING")
    offload = worker_threads(8)
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(entry: dict[str, Any]) -> None:
        os.write(fd, repr(entry).encode())
        os.fsync(fd)

    @server.tool()
    async def session_append(session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        await offload(lambda: write(entry))
        return {"session_id": session_id, "entry_id": "00000000", "leaf_id": "00000000"}

    anyio.run(run_stdio, server)
    """
)


def bare_server() -> MCPServer:
    server = MCPServer("bare", log_level="WARNING")

    @server.tool()
    async def session_append(session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        return {"session_id": session_id, "entry_id": "00000000", "leaf_id": "00000000"}

    return server


def entry(i: int) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": f"message number {i}"}


async def per_call(
    client: Client, session_id: str, calls: int, server: int | None = None
) -> tuple[float, float | None]:
    """Median seconds per session_append over ``calls`` calls (after a warm-up), and the CPU
    seconds the process ``server`` (if given) spent per call meanwhile (None off Linux)."""
    for i in range(5):
        await client.call_tool("session_append", {"session_id": session_id, "entry": entry(i)})
    samples = []
    cpu_before = None if server is None else cpu_seconds(server)
    for i in range(calls):
        started = time.perf_counter()
        result = await client.call_tool(
            "session_append", {"session_id": session_id, "entry": entry(i)}
        )
        samples.append(time.perf_counter() - started)
        assert not result.is_error, result.content
    cpu_after = None if server is None else cpu_seconds(server)
    cpu = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) / calls
    return statistics.median(samples), cpu


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds the threads of process ``pid`` have run so far (Linux's schedstat, in
    nanoseconds: the clock ticks of /proc/PID/stat are 10 ms, as long as 10 appends); None
    where there is no such file."""
    total = 0
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/schedstat") as found:
                total += int(found.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def child_server() -> int | None:
    """The pid of the one process this one has started and not reaped (the stdio server a
    client just started), or None where /proc does not say."""
    found = []
    try:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.append(int(name))
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


async def ours_session(client: Client) -> str:
    created = await client.call_tool("session_create", {})
    return created.structured_content["id"]


async def append_in_process(
    tmp: Path, calls: int, durability: str, rounds: int
) -> tuple[float, float]:
    """Median seconds per append through our server and the bare one, in process; the two
    take turns, so that machine noise (the disk's fsync moves from one second to the next)
    hits each alike."""
    ours = build_server(
        ServerSettings(db_path=tmp / f"inproc-{durability}.db", durability=durability)
    )
    ours_samples, bare_samples = [], []
    for _ in range(rounds):
        async with Client(ours) as client:
            ours_samples.append((await per_call(client, await ours_session(client), calls))[0])
        async with Client(bare_server()) as client:
            bare_samples.append((await per_call(client, "s", calls))[0])
    return statistics.median(ours_samples), statistics.median(bare_samples)


class StdioAppends:
    """What ``append_stdio`` measured: median seconds per append through each server, one
    fsync on the same disk, and the CPU seconds per append of each server process."""

    def __init__(self, times: list[float], cpus: list[float | None], fsync: float | None) -> None:
        self.ours, self.bare, self.bare_ours = times[:3]
        self.durable_hop = times[3] if len(times) > 3 else None
        self.cpu_ours, _, self.cpu_bare_ours = cpus[:3]
        self.cpu_durable_hop = cpus[3] if len(cpus) > 3 else None
        self.fsync = fsync


def _median(found: list[float | None]) -> float | None:
    known = [value for value in found if value is not None]
    return statistics.median(known) if known and len(known) == len(found) else None


async def append_stdio(tmp: Path, calls: int, durability: str, rounds: int) -> StdioAppends:
    """Median seconds per append through our server, the bare server, the bare server on our
    transport, and (durability full) the bare server on our transport fsyncing a write on a
    worker thread, and one fsync on the same disk (``one_fsync``); servers take turns, so that
    machine noise hits each alike. Each server's CPU per append is measured in the same calls. The fsync takes its turn too, once a round: this shared
    disk's fsync moves between about 0.15 and 4 ms from one second to the next (measured in
    rounds taken in turn), so one measurement after all the rounds set the target's baseline
    from whatever the disk did in that second."""
    ours = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_agent", "serve", "--db", str(tmp / f"stdio-{durability}.db")],
        env={"MCP_AGENT_DURABILITY": durability},
    )
    bare_script, ours_transport_script = tmp / "bare_server.py", tmp / "bare_our_stdio.py"
    durable_script = tmp / "bare_durable_hop.py"
    bare_script.write_text(BARE_SERVER)
    ours_transport_script.write_text(BARE_ON_OUR_STDIO)
    durable_script.write_text(BARE_DURABLE_HOP_ON_OUR_STDIO)
    servers = [
        (ours, None),
        (StdioServerParameters(command=sys.executable, args=[str(bare_script)]), "s"),
        (
            StdioServerParameters(
                command=sys.executable,
                args=[str(ours_transport_script)],
                env={"PYTHONPATH": str(ROOT)},
            ),
            "s",
        ),
    ]
    if durability == "full":
        written = tmp / "bare_durable_hop.bin"
        servers.append(
            (
                StdioServerParameters(
                    command=sys.executable,
                    args=[str(durable_script), str(written)],
                    env={"PYTHONPATH": str(ROOT)},
                ),
                "s",
            )
        )
    samples: list[list[float]] = [[] for _ in servers]
    cpus: list[list[float | None]] = [[] for _ in servers]
    fsyncs: list[float] = []
    for _ in range(rounds):
        for index, (params, session_id) in enumerate(servers):
            async with Client(params) as client:
                sid = session_id or await ours_session(client)
                server = child_server()
                value, cpu = await per_call(client, sid, calls, server)
                samples[index].append(value)
                cpus[index].append(cpu if server is not None else None)
        if durability == "full":
            fsyncs.append(one_fsync(tmp, calls))
    return StdioAppends(
        [statistics.median(found) for found in samples],
        [_median(found) for found in cpus],
        statistics.median(fsyncs) if fsyncs else None,
    )


def plain_commit(tmp: Path, synchronous: str, commits: int) -> float:
    """Median seconds of one insert and commit with plain sqlite3 (WAL) on the same disk:
    what a durable write costs here before any server is involved."""
    path = tmp / f"plain-{synchronous}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE entries (n INTEGER PRIMARY KEY, data TEXT)")
        samples = []
        for i in range(commits):
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO entries (data) VALUES (?)", (json.dumps(entry(i)),))
            conn.execute("COMMIT")
            samples.append(time.perf_counter() - started)
    finally:
        conn.close()
    return statistics.median(samples)


def wal_pages(path: Path, conn: sqlite3.Connection) -> int:
    """Pages (frames) the write-ahead log of the database at ``path`` holds."""
    size = path.with_name(path.name + "-wal").stat().st_size
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    return max(0, size - 32) // (24 + page)  # its header, then a header and a page a frame


def pages_per_append(tmp: Path, appends: int) -> tuple[float, float]:
    """WAL pages each append writes (what its commit's fsync must flush) through our storage,
    into a session that already holds ``appends`` entries, and for a plain ``sqlite3`` insert
    (``plain_commit``'s): a count, the same on any machine. The log is not checkpointed
    meanwhile, so that every page written stays in it."""
    repo = SqliteSessionRepo(tmp / "pages.db", durability="normal")
    try:
        conn = repo.database.conn
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        session_id = repo.create().id
        partial = {"type": "message", "message": {"role": "user", "content": "a message"}}
        for _ in range(appends):
            repo.append_entry(session_id, partial)
        before = wal_pages(repo.database.path, conn)
        for _ in range(appends):
            repo.append_entry(session_id, partial)
        ours = (wal_pages(repo.database.path, conn) - before) / appends
    finally:
        repo.close()
    path = tmp / "pages-plain.db"
    plain = sqlite3.connect(path, isolation_level=None)
    try:
        plain.execute("PRAGMA journal_mode = WAL")
        plain.execute("PRAGMA wal_autocheckpoint = 0")
        plain.execute("CREATE TABLE entries (n INTEGER PRIMARY KEY, data TEXT)")
        before = wal_pages(path, plain)
        for i in range(appends):
            plain.execute("INSERT INTO entries (data) VALUES (?)", (json.dumps(entry(i)),))
        baseline = (wal_pages(path, plain) - before) / appends
    finally:
        plain.close()
    return ours, baseline


def fsync_by_pages(tmp: Path, pages: int, writes: int) -> tuple[float, float]:
    """Median seconds of writing ``pages`` WAL frames (a 24-byte header and a 4 KB page each,
    one ``pwrite`` each, as SQLite writes them) into a file of reused frames, as a checkpointed
    WAL is, then ``fdatasync``, and the same after one frame; the two take turns write by
    write, so that the disk's moods hit both alike."""
    frame = 24 + 4096
    slots = 1000
    fd = os.open(tmp / "frames.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, bytes(frame * slots))
        os.fsync(fd)
        data = os.urandom(frame)
        samples: dict[int, list[float]] = {pages: [], 1: []}
        place = 0
        for i in range(writes):
            for count in (pages, 1) if i % 2 else (1, pages):
                started = time.perf_counter()
                for _ in range(count):
                    os.pwrite(fd, data, place * frame)
                    place = (place + 1) % slots
                os.fdatasync(fd)
                samples[count].append(time.perf_counter() - started)
    finally:
        os.close(fd)
    return statistics.median(samples[pages]), statistics.median(samples[1])


def one_fsync(tmp: Path, writes: int) -> float:
    """Median seconds of writing a few bytes to a file and fsyncing it, on the same disk: the
    least a durable append must wait for."""
    path = tmp / "fsync.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        samples = []
        for i in range(writes):
            started = time.perf_counter()
            os.write(fd, json.dumps(entry(i)).encode())
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
    return statistics.median(samples)


async def time_to_first_answer(params: StdioServerParameters) -> float:
    started = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        elapsed = time.perf_counter() - started
    return elapsed


async def startup(tmp: Path, rounds: int) -> tuple[float, float]:
    """Median seconds from spawning to the first answered request; the database exists
    already (a user's does), so one untimed start creates it first."""
    script = tmp / "bare_server.py"
    script.write_text(BARE_SERVER)
    ours = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_agent", "serve", "--db", str(tmp / "start.db")]
    )
    bare = StdioServerParameters(command=sys.executable, args=[str(script)])
    await time_to_first_answer(ours)
    ours_times, bare_times = [], []
    for _ in range(rounds):  # interleaved, so that machine noise hits both alike
        ours_times.append(await time_to_first_answer(ours))
        bare_times.append(await time_to_first_answer(bare))
    return statistics.median(ours_times), statistics.median(bare_times)


async def builtin_overhead(downstream_servers: int, calls: int) -> float:
    """Seconds added per call by going through the hub's in-memory MCP client."""
    builtin = MCPServer("builtin", log_level="WARNING")

    async def note(text: str) -> str:
        return text

    builtin.add_tool(note, name="note", description="echo")
    servers = {
        f"s{i}": ServerConfig(command=sys.executable, args=["-c", "pass"])
        for i in range(downstream_servers)
    }
    signal = AbortController().signal
    async with ToolHub(servers, builtin=lambda: builtin) as hub:
        agent = AsyncTimer()
        [tool] = await hub.tools(AgentManifest(name="bench", servers=[]))

        async def via_hub() -> None:
            await tool.execute("c", {"text": "x"}, signal, lambda _: None, None)

        async def direct() -> None:
            await note("x")

        through = await agent.median(via_hub, calls)
        plain = await agent.median(direct, calls)
    return through - plain


class AsyncTimer:
    async def median(self, fn: Callable[[], Awaitable[None]], calls: int) -> float:
        for _ in range(20):
            await fn()
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            await fn()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)


RAW_SERVER = ROOT / "tests" / "servers" / "raw_server.py"


async def downstream_answer(size: int, calls: int, rounds: int) -> tuple[float, float]:
    """Median seconds of a call answering ``size`` characters (0: a word) through our child
    transport and through the SDK's stdio client, the two taking turns."""
    from mcp.client.stdio import stdio_client

    from mcp_agent.proxy.child_stdio import child_stdio

    params = StdioServerParameters(command=sys.executable, args=[str(RAW_SERVER)])
    tool, arguments = ("long", {"size": size}) if size else ("good", {})
    samples: dict[str, list[float]] = {"ours": [], "sdk": []}
    for _ in range(rounds):
        for name, transport in (("ours", child_stdio), ("sdk", stdio_client)):
            async with Client(transport(params)) as client:
                await client.call_tool("good", {})
                for _ in range(calls):
                    started = time.perf_counter()
                    await client.call_tool(tool, arguments)
                    samples[name].append(time.perf_counter() - started)
    return statistics.median(samples["ours"]), statistics.median(samples["sdk"])


def run() -> list[dict[str, Any]]:
    calls = 100 if quick() else 500
    rounds = 3 if quick() else 7
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for durability in ("full", "normal"):
            value, baseline = anyio.run(append_in_process, tmp, calls, durability, rounds)
            name = f"session_append round trip (in-process, durability {durability})"
            rows.append(row(name, value * 1e3, baseline * 1e3, "ms", "≤ 1.3"))
            stdio = anyio.run(append_stdio, tmp, calls, durability, rounds)
            value, baseline, same_transport = stdio.ours, stdio.bare, stdio.bare_ours
            durable_hop, fsync = stdio.durable_hop, stdio.fsync
            name = f"session_append round trip (stdio, durability {durability})"
            rows.append(row(name, value * 1e3, baseline * 1e3, "ms", "≤ 1.3"))
            name = (
                f"session_append round trip (stdio, durability {durability}) vs the bare tool "
                "on our stdio transport: the append's own cost"
            )
            rows.append(row(name, value * 1e3, same_transport * 1e3, "ms", ""))
            if fsync is not None:
                name = (
                    "session_append round trip (stdio, durability full) vs bare SDK no-op round "
                    f"trip + one fsync on the same disk ({fsync * 1e3:.2f} ms)"
                )
                rows.append(row(name, value * 1e3, (baseline + fsync) * 1e3, "ms", "≤ 1.1"))
            if durable_hop is not None:
                name = (
                    f"session_append round trip (stdio, durability {durability}) vs the bare "
                    "tool on our transport fsyncing a write on a worker thread (the floor of a "
                    "durable write off the event loop; reference)"
                )
                rows.append(row(name, value * 1e3, durable_hop * 1e3, "ms", ""))
            # The part of the round trip that is our server's CPU, apart from the disk's wait.
            floor_cpu, what = (
                (stdio.cpu_durable_hop, "fsyncing a write on a worker thread")
                if durable_hop is not None
                else (stdio.cpu_bare_ours, "(a no-op)")
            )
            if stdio.cpu_ours is not None and floor_cpu is not None:
                name = (
                    f"server CPU per session_append (stdio, durability {durability}) vs the bare "
                    f"tool on our transport {what} (reference; every thread of the process)"
                )
                rows.append(row(name, stdio.cpu_ours * 1e3, floor_cpu * 1e3, "ms CPU", ""))
        ours_pages, plain_pages = pages_per_append(tmp, calls)
        name = (
            f"WAL pages a durable append writes (a session of {calls} to {2 * calls} entries)"
            " vs a plain sqlite3 insert: what its commit's fsync flushes (reference)"
        )
        rows.append(row(name, ours_pages, plain_pages, "pages"))
        frames = max(2, round(ours_pages))
        many, one = fsync_by_pages(tmp, frames, calls)
        name = (
            f"fdatasync after {frames} WAL frames vs after 1, in turn (same disk): what the bytes"
            " of a durable append's commit cost its fsync here (reference)"
        )
        rows.append(row(name, many * 1e3, one * 1e3, "ms"))
        full, normal = plain_commit(tmp, "FULL", calls), plain_commit(tmp, "NORMAL", calls)
        name = "plain sqlite3 insert + commit, synchronous FULL vs NORMAL (the fsync, same disk)"
        rows.append(row(name, full * 1e3, normal * 1e3, "ms", ""))
        value, baseline = anyio.run(startup, tmp, rounds)
        rows.append(row("server start to first answer (stdio)", value, baseline, "s", "≤ 1.3"))
        for count in (0, 20):
            overhead = anyio.run(builtin_overhead, count, calls * 4)
            rows.append(
                row(
                    f"built-in tool via in-process client, {count} downstream servers",
                    overhead * 1e3,
                    None,
                    "ms/call overhead",
                    "< 0.5 ms",
                )
            )
    for size, said, size_calls in ((0, "a word", calls), (20_000_000, "20 MB on one line", 3)):
        ours, sdk = anyio.run(downstream_answer, size, size_calls, 1 if quick() else 3)
        name = (
            f"a downstream server's answer of {said} over stdio: our client transport vs the"
            " SDK's stdio_client (reference)"
        )
        rows.append(row(name, ours * 1e3, sdk * 1e3, "ms"))
    return rows


if __name__ == "__main__":
    for found in run():
        print(found)
