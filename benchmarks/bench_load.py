"""Load over streamable HTTP: 50 MCP clients at once, 100 session operations each (create,
append, get, list, context), against ``mcp-agent-sessions serve --transport http`` in a child
process on a loopback port.

Baseline, in the same run: the same clients and operation mix against a bare ``MCPServer``
whose tools have the same names and arguments and do nothing (served the same way, uvicorn +
streamable HTTP). The difference is what our server does: SQLite with an fsync per append,
session bookkeeping, notifications.

Rows: p50 and p99 latency per operation and throughput (ratio = ours / bare), errors (target
0), the server process's CPU time per operation (ratio = ours / bare), and p50 with
``MCP_AGENT_DURABILITY=normal`` (no fsync per append). Reference rows: the bare server with
each tool going through one of our worker threads (and an fsynced write of a few bytes for
each create and append) against the bare one, and ours against that: what keeping storage
off the event loop costs by itself, and what our server costs beyond it. The clients all run in this process; on
a small machine they need about a core themselves, and then latency and throughput are bound
by the clients as much as by the server (``summary`` lines on stderr show the clients' CPU).
The server CPU row is the one that isolates the server's own cost.
``MCP_AGENT_BENCH_QUICK=1``: 10 clients x 20 operations.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the load driver

from reliability_load import measure

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common
from common import quick, row


def run() -> list[dict[str, Any]]:
    clients, ops = (10, 20) if quick() else (50, 100)
    size = f"{clients} clients x {ops} ops, HTTP"
    bare = measure("bare", clients, ops)
    ours = measure("ours", clients, ops)
    normal = measure("ours", clients, ops, durability="normal")
    hop = measure("bare-hop", clients, ops)
    for result in (bare, ours, normal, hop):
        print(result.summary(), file=sys.stderr)
    return [
        row(f"load: p50 latency ({size})", ours.p50_ms, bare.p50_ms, "ms"),
        row(f"load: p99 latency ({size})", ours.p99_ms, bare.p99_ms, "ms", "≤ 1.5"),
        row(f"load: throughput ({size})", ours.ops_per_second, bare.ops_per_second, "ops/s"),
        row(f"load: errors ({size})", len(ours.errors), len(bare.errors), "errors", "0"),
        row(
            f"load: server CPU per operation ({size})",
            ours.server_cpu_ms_per_op,
            bare.server_cpu_ms_per_op,
            "ms CPU/op",
            "≤ 1.3",
        ),
        row(f"load: p50 latency, durability normal ({size})", normal.p50_ms, bare.p50_ms, "ms"),
        row(
            f"load: server CPU per operation, the bare server through a worker thread ({size};"
            " reference: the floor of storage kept off the event loop)",
            hop.server_cpu_ms_per_op,
            bare.server_cpu_ms_per_op,
            "ms CPU/op",
        ),
        row(
            f"load: server CPU per operation, ours vs the bare server through a worker thread"
            f" ({size}; reference)",
            ours.server_cpu_ms_per_op,
            hop.server_cpu_ms_per_op,
            "ms CPU/op",
        ),
    ]


if __name__ == "__main__":
    for found in run():
        print(found)
