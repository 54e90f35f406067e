"""Reading a big session over MCP, side by side with pi resuming the same file.

The session: a pi v3 file of 100,000 entries whose current branch is 1,000 deep (as in
``bench_sessions``), imported into SQLite; a second one of twice the entries, same depth.

Rows (each baseline measured in the same run):
- ``whole context through the SDK client``: ``session_context`` with ``limit=0`` (all 1,000
  messages) from ``mcp-agent-sessions serve`` over stdio, through the Python SDK's ``Client``
  (the answer crosses the pipe, is parsed and checked against the output schema), on a freshly
  started server (its first read of the session, after the client's first call: a
  ``session_list``) and again (median of repeats), vs pi resuming the same file:
  ``SessionManager.open`` + ``buildSessionContext`` in Node, timed inside the Node process.
  Target: pi / ours >= 50. Skipped (a row saying so) when pi is not installed (``.ci/peers``,
  or ``MCP_AGENT_PEERS``).
- ``the bare MCPServer vs pi``: the same ready-made answer from a bare ``MCPServer`` against
  pi's resume: what a server gets when its answer takes the SDK's own way out (parsed, checked
  and dumped; ours, over stdio, puts the stored JSON in the line as it is: reference).
- ``ours vs the SDK client's own share``: the same calls through a proxy in front of our
  server that answers ``session_context`` with the answer ours sent (recorded once, written
  compact as ours writes it), ready-made:
  what the client alone spends on that answer, first call and again, which no server can go
  below; and that first call against pi's resume: the most any server could reach
  (reference).
- ``over streamable HTTP vs over stdio``: the whole context again, from a fresh
  ``serve --transport http`` (the Python SDK client's own protocol, 2026), against stdio
  (reference).
- ``at 2x entries``: the same at 200,000 entries vs 100,000; target ratio <= 1.2.
- ``default page, server side``: ``session_get`` and ``session_context`` with no limit
  (the default page), timed in the server process around the tool call (the SDK's argument
  checks, the tool and its result conversion; no transport); target < 10 ms. The same for
  the views outline (what the viewer opens a session with) and tree, again and as the first
  call of a fresh server (reference).

``MCP_AGENT_BENCH_QUICK=1`` (or ``MCP_AGENT_BENCH_SESSIONS_SCALE``) shrinks the sessions as
``bench_sessions`` does.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # find_pi

from bench_sessions import DEPTH, scale, write_big_session
from mcp import Client, StdioServerParameters
from mcp_support import find_pi, free_port, wait_for_port

from mcp_agent.cli.serve import tune_collector
from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server.app import build_server
from mcp_agent.sessions import SqliteSessionRepo

ROUNDS = 5

PI_RESUME = """
import { performance } from "node:perf_hooks";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
const [peers, file, scratch] = process.argv.slice(2);
const root = join(peers, "node_modules", "@mariozechner", "pi-coding-agent", "dist", "index.js");
const pi = await import(pathToFileURL(root).href);
const started = performance.now();
const manager = pi.SessionManager.open(file, scratch);
const context = manager.buildSessionContext();
const elapsed = performance.now() - started;
process.stdout.write(JSON.stringify({ ms: elapsed, messages: context.messages.length }));
"""


def pi_resume(node: str, peers: Path, file: Path, scratch: Path) -> tuple[float, int]:
    """Seconds pi takes to resume ``file`` (in a fresh Node process), and its messages."""
    script = scratch / "pi_resume.mjs"
    script.write_text(PI_RESUME)
    done = subprocess.run(
        [node, str(script), str(peers), str(file), str(scratch / "pi-sessions")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    found = json.loads(done.stdout)
    return found["ms"] / 1000, int(found["messages"])


# A bare MCPServer whose tool hands back a ready answer (the text and the structured content
# of ours, read at start): what the SDK alone costs for an answer that large, both ends.
BARE_SERVER = """
import json, sys
from mcp.server import MCPServer
from mcp_types import CallToolResult, TextContent

answer = json.load(open(sys.argv[1], encoding="utf-8"))
server = MCPServer("bare", log_level="WARNING")

@server.tool()
async def session_context(session_id: str, limit: int = 0) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=answer["text"])],
        structured_content=json.loads(answer["structured"]),
    )

server.run("stdio")
"""


# Our server behind a proxy that answers session_context with the answer ours gave, ready-made
# (its id put in): the client's own share of the whole context, which no server can go below.
# In a recording run (no file named first yet) each session_context goes through to ours and
# its answer is written to that file. Every other message goes through to our server and back
# as it is. The client sends one request at a time here and ours sends no requests of its own,
# so a blocking loop keeps the order.
REPLAY_SERVER = """
import json, os, subprocess, sys

recorded, server = sys.argv[1], sys.argv[2:]
tail = None
if os.path.exists(recorded):
    with open(recorded, encoding="utf-8") as file:
        result = json.loads(file.read())["result"]
    compact = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    tail = (',"result":' + compact + "}\\n").encode()
child = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
out = sys.stdout.buffer
try:  # as ours widens its own (server/stdio.py)
    import fcntl
    fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)
except (ImportError, AttributeError, OSError):
    pass
for line in sys.stdin.buffer:
    message = json.loads(line)
    params = message.get("params") or {}
    canned = message.get("method") == "tools/call" and params.get("name") == "session_context"
    if canned and tail is not None:
        out.write(b'{"jsonrpc":"2.0","id":' + json.dumps(message["id"]).encode() + tail)
        out.flush()
        continue
    child.stdin.write(line)
    child.stdin.flush()
    while "id" in message and "method" in message:
        answer = child.stdout.readline()
        out.write(answer)
        out.flush()
        if not answer:
            break
        found = json.loads(answer)
        if "method" not in found and found.get("id") == message["id"]:
            if canned and "result" in found:
                with open(recorded, "wb") as file:
                    file.write(answer)
            break
child.stdin.close()
child.wait()
"""


def server_params(db: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_agent", "serve", "--db", str(db)]
    )


async def whole_context(
    params: StdioServerParameters | str, session_id: str, repeats: int, keep: Path | None = None
) -> tuple[float, float, int]:
    """On a fresh server: seconds of the first full session_context, the median of
    ``repeats`` more, and the messages in it (the answer's text and structured content saved
    in ``keep``)."""
    async with Client(params) as client:
        tools = await client.list_tools()  # the client learns the output schemas, as any does
        if any(tool.name == "session_list" for tool in tools.tools):
            # The Python SDK client imports its JSON Schema checker at its first structured
            # result; pi's time, too, starts with its modules loaded.
            await client.call_tool("session_list", {"limit": 1})
        arguments = {"session_id": session_id, "limit": 0}
        started = time.perf_counter()
        result = await client.call_tool("session_context", arguments)
        first = time.perf_counter() - started
        assert not result.is_error, result.content
        count = len((result.structured_content or {})["messages"])
        if keep is not None:
            text = result.content[0].text  # type: ignore[union-attr]
            saved = {"text": text, "structured": json.dumps(result.structured_content)}
            await anyio.Path(keep).write_text(json.dumps(saved), encoding="utf-8")
        again = []
        for _ in range(repeats):
            started = time.perf_counter()
            await client.call_tool("session_context", arguments)
            again.append(time.perf_counter() - started)
    return first, statistics.median(again), count


def whole_context_http(db: Path, session_id: str, repeats: int, scratch: Path) -> float:
    """``whole_context`` over streamable HTTP (the SDK client's own protocol choice) from a
    freshly started ``serve --transport http``: the median of the repeats."""
    port, log = free_port(), scratch / "http-server.log"
    command = [*server_params(db).args, "--transport", "http", "--port", str(port), "--no-auth"]
    with open(log, "wb") as errors:
        process = subprocess.Popen([sys.executable, *command], stderr=errors)
    try:
        wait_for_port(port, process, log)
        url = f"http://127.0.0.1:{port}/mcp"
        return anyio.run(whole_context, url, session_id, repeats)[1]
    finally:
        process.terminate()
        process.wait(15)


# The default page of each view: (tool, view), and whether the row has the <10 ms target.
PAGES: list[tuple[str, str | None, bool]] = [
    ("session_get", None, True),
    ("session_context", None, True),
    ("session_get", "outline", False),
    ("session_get", "tree", False),
]


async def default_pages(db: Path, session_id: str, calls: int) -> dict[str, tuple[float, float]]:
    """Seconds of the first default page of each of ``PAGES`` on a fresh server, and the
    median of ``calls`` more, timed around the server's own call_tool (the SDK's argument
    check, the tool, the result conversion)."""
    server = build_server(ServerSettings(db_path=db))
    times: list[float] = []
    original = server.call_tool
    # The collector as ``serve`` sets it: what this process made before (the sessions
    # imported, pi's runs) is kept out of its passes, as a fresh server has none of it.
    thresholds = gc.get_threshold()
    tune_collector()

    async def timed(name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        started = time.perf_counter()
        try:
            return await original(name, arguments, context)
        finally:
            times.append(time.perf_counter() - started)

    server.call_tool = timed  # type: ignore[method-assign]
    found: dict[str, tuple[float, float]] = {}
    try:
        async with Client(server) as client:
            await client.call_tool("session_list", {})  # the server's own first call
            for name, view, _ in PAGES:
                arguments = {"session_id": session_id} | ({"view": view} if view else {})
                times.clear()
                for _ in range(calls + 1):
                    result = await client.call_tool(name, arguments)
                    assert not result.is_error, result.content
                found[f"{name}{f' view {view}' if view else ''}"] = (
                    times[0],
                    statistics.median(times[1:]),
                )
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    return found


def run() -> list[dict[str, Any]]:
    factor = scale()
    entries = max(2_000, int(100_000 * factor))
    depth = min(DEPTH, entries)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(
        prefix="bench-reads-", dir=os.environ.get("MCP_AGENT_BENCH_DIR")
    ) as tmp:
        scratch = Path(tmp)
        db = scratch / "reads.db"
        files = {1: scratch / "small.jsonl", 2: scratch / "large.jsonl"}
        ids = {n: write_big_session(path, n * entries, depth, seed=n) for n, path in files.items()}
        with SqliteSessionRepo(db) as repo:
            repo.database.conn.execute("PRAGMA synchronous = OFF")  # setup only
            for path in files.values():
                repo.import_jsonl(path)
            # As the first server on this file would in the background (runtime.search_index),
            # here before any server is timed.
            repo.database.index_pending_text()
        size = f"{entries:,} entries, branch {depth} deep"

        # Alternate rounds, so that machine noise hits each side alike.
        ours: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
        pi: list[float] = []
        bare: list[float] = []
        http: list[float] = []
        peers = find_pi()
        answer, script = scratch / "answer.json", scratch / "bare_server.py"
        script.write_text(BARE_SERVER)
        bare_params = StdioServerParameters(command=sys.executable, args=[str(script), str(answer)])
        replay_script = scratch / "replay_server.py"
        replay_script.write_text(REPLAY_SERVER)
        ours_command = [server_params(db).command, *server_params(db).args]
        replay_params = StdioServerParameters(
            command=sys.executable,
            args=[str(replay_script), str(scratch / "recorded.json"), *ours_command],
        )
        anyio.run(whole_context, replay_params, ids[1], 1)  # records ours' answer
        client_share: list[tuple[float, float]] = []
        for round_number in range(ROUNDS):
            # Each size first in every other round: the server started right after another
            # finds the machine's caches as that one left them.
            for n in (1, 2) if round_number % 2 == 0 else (2, 1):
                found = anyio.run(whole_context, server_params(db), ids[n], ROUNDS, answer)
                assert found[2] == depth, found
                ours[n].append(found[:2])
            replayed = anyio.run(whole_context, replay_params, ids[1], ROUNDS)
            assert replayed[2] == depth, replayed
            client_share.append(replayed[:2])
            bare.append(anyio.run(whole_context, bare_params, ids[1], ROUNDS)[1])
            http.append(whole_context_http(db, ids[1], ROUNDS, scratch))
            if peers is not None:
                seconds, count = pi_resume(*peers, files[1], scratch)
                assert count == depth, count
                pi.append(seconds)
        first = {n: statistics.median(f for f, _ in ours[n]) for n in ours}
        warm = {n: statistics.median(w for _, w in ours[n]) for n in ours}
        pi_ms = statistics.median(pi) * 1000 if pi else None
        for label, value in (("first call on a fresh server", first), ("again", warm)):
            rows.append(
                {
                    "name": f"whole context through the SDK client (stdio), {label}, vs pi "
                    f"resuming the file; {size}"
                    + ("" if pi else " (pi not installed: no baseline)"),
                    "value": value[1] * 1000,
                    "baseline": pi_ms,
                    "ratio": pi_ms / (value[1] * 1000) if pi_ms else None,
                    "unit": "ms",
                    "target": "ratio >= 50",
                }
            )
        rows.append(
            {
                "name": "whole context, again, vs a bare MCPServer tool handing back the same "
                "answer ready-made through the SDK's own result passes (reference)",
                "value": warm[1] * 1000,
                "baseline": statistics.median(bare) * 1000,
                "ratio": warm[1] / statistics.median(bare),
                "unit": "ms",
                "target": "-",
            }
        )
        rows.append(
            {
                "name": "whole context, again, over streamable HTTP vs over stdio (reference)",
                "value": statistics.median(http) * 1000,
                "baseline": warm[1] * 1000,
                "ratio": statistics.median(http) / warm[1],
                "unit": "ms",
                "target": "-",
            }
        )
        if pi_ms:
            floor = statistics.median(bare) * 1000
            rows.append(
                {
                    "name": "whole context: the bare MCPServer above vs pi resuming the file (the "
                    "answer through the SDK's own passes; reference)",
                    "value": floor,
                    "baseline": pi_ms,
                    "ratio": pi_ms / floor,
                    "unit": "ms",
                    "target": "-",
                }
            )
        share_first = statistics.median(f for f, _ in client_share)
        share_warm = statistics.median(w for _, w in client_share)
        for label, ours_s, share_s in (
            ("first call on a fresh server", first[1], share_first),
            ("again", warm[1], share_warm),
        ):
            rows.append(
                {
                    "name": f"whole context, {label}: ours vs the SDK client's own share (our "
                    "answer replayed ready-made by a proxy in front of ours; reference)",
                    "value": ours_s * 1000,
                    "baseline": share_s * 1000,
                    "ratio": ours_s / share_s,
                    "unit": "ms",
                    "target": "-",
                }
            )
        if pi_ms:
            rows.append(
                {
                    "name": "whole context, first call: the SDK client's own share above vs pi "
                    "resuming the file (the most any server could reach; reference)",
                    "value": share_first * 1000,
                    "baseline": pi_ms,
                    "ratio": pi_ms / (share_first * 1000),
                    "unit": "ms",
                    "target": "-",
                }
            )
        rows.append(
            {
                "name": f"whole context at 2x entries ({2 * entries:,}) vs 1x, first call",
                "value": first[2] * 1000,
                "baseline": first[1] * 1000,
                "ratio": first[2] / first[1],
                "unit": "ms",
                "target": "ratio <= 1.2",
            }
        )
        pages = anyio.run(default_pages, db, ids[1], 20)
        for (page, (first_s, again_s)), (_, _, targeted) in zip(pages.items(), PAGES, strict=True):
            rows.append(
                {
                    "name": f"{page}, default page, server side; {size}",
                    "value": again_s * 1000,
                    "baseline": None,
                    "ratio": None,
                    "unit": "ms",
                    "target": "< 10 ms" if targeted else "-",
                }
            )
            if not targeted:  # what a viewer opening the session first waits for
                rows.append(
                    {
                        "name": f"{page}, default page, server side, the first of a fresh"
                        f" server; {size}",
                        "value": first_s * 1000,
                        "baseline": None,
                        "ratio": None,
                        "unit": "ms",
                        "target": "-",
                    }
                )
    return rows


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
