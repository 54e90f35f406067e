"""Load over streamable HTTP: 50 MCP clients at once, 100 session operations each (create,
append, get, list, context), against ``mcp-agent-sessions serve --transport http`` in a child
process on a loopback port.

Baseline, in the same run: the same clients and operation mix against a bare ``MCPServer``
whose tools have the same names and arguments and do nothing (served the same way, uvicorn +
streamable HTTP). The difference is what our server does: SQLite with an fsync per append,
session bookkeeping, notifications.

Rows: p50 and p99 latency per operation and throughput (ratio = ours / bare), errors (target
0), the server process's CPU time per operation (ratio = ours / bare), and p50 with
``MCP_AGENT_DURABILITY=normal`` (no fsync per append). Reference rows: p99 over each
client's operations after its first (at its first call an MCP client also lists the tools and
compiles the tool's output schema, and the clients' first calls all come at once: they are the
slowest 1%); the bare server with each tool going through one of our worker threads (and an
fsynced write of a few bytes for each create and append) against the bare one, and ours
against that: what keeping storage off the event loop costs by itself, and what our server
costs beyond it. Each row is the median
over ``ROUNDS`` rounds, each round running the four servers in turn (errors: the sum over all).
The clients all run in this process; on a small machine they need about a core themselves, and
then latency and throughput are bound by the clients as much as by the server (``summary``
lines on stderr show the clients' CPU). The server CPU row is the one that isolates the
server's own cost. ``MCP_AGENT_BENCH_QUICK=1``: one round of 10 clients x 20 operations.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the load driver

from reliability_load import LoadResult, measure

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common
from common import quick, row

# Rounds of the four servers in turn: one run of each moved by up to 40% between runs of the
# same code on this machine (shared and noisy), so each row is the median over the rounds.
ROUNDS = 3
SERVERS = (("bare", "full"), ("ours", "full"), ("ours", "normal"), ("bare-hop", "full"))


def median_of(
    results: list[LoadResult], figure: Callable[[LoadResult], float | None]
) -> float | None:
    """The median of ``figure`` over ``results``; None if any run lacks it."""
    found = [figure(result) for result in results]
    numbers = [value for value in found if value is not None]
    return statistics.median(numbers) if numbers and len(numbers) == len(found) else None


def run() -> list[dict[str, Any]]:
    clients, ops = (10, 20) if quick() else (50, 100)
    rounds = 1 if quick() else ROUNDS
    rounds_said = f"median of {rounds} rounds" if rounds > 1 else "one round"
    size = f"{clients} clients x {ops} ops, HTTP, {rounds_said}"
    runs: dict[tuple[str, str], list[LoadResult]] = {server: [] for server in SERVERS}
    for _ in range(rounds):
        for server, durability in SERVERS:
            result = measure(server, clients, ops, durability=durability)
            print(f"{server} ({durability}): {result.summary()}", file=sys.stderr)
            runs[server, durability].append(result)
    bare, ours = runs["bare", "full"], runs["ours", "full"]
    normal, hop = runs["ours", "normal"], runs["bare-hop", "full"]

    def cpu(results: list[LoadResult]) -> float | None:
        return median_of(results, lambda result: result.server_cpu_ms_per_op)

    def p50(results: list[LoadResult]) -> float | None:
        return median_of(results, lambda result: result.p50_ms)

    def errors(results: list[LoadResult]) -> int:
        return sum(len(result.errors) for result in results)

    return [
        row(f"load: p50 latency ({size})", p50(ours), p50(bare), "ms"),
        row(
            f"load: p99 latency ({size})",
            median_of(ours, lambda result: result.p99_ms),
            median_of(bare, lambda result: result.p99_ms),
            "ms",
            "≤ 1.5",
        ),
        row(
            f"load: p99 latency after each client's first call ({size}; reference: a"
            " client's first call also lists the tools and checks an output schema)",
            median_of(ours, lambda result: result.p99_after_first_ms),
            median_of(bare, lambda result: result.p99_after_first_ms),
            "ms",
        ),
        row(
            f"load: throughput ({size})",
            median_of(ours, lambda result: result.ops_per_second),
            median_of(bare, lambda result: result.ops_per_second),
            "ops/s",
        ),
        row(f"load: errors ({size}; all rounds)", errors(ours), errors(bare), "errors", "0"),
        row(f"load: server CPU per operation ({size})", cpu(ours), cpu(bare), "ms CPU/op", "≤ 1.3"),
        row(f"load: p50 latency, durability normal ({size})", p50(normal), p50(bare), "ms"),
        row(
            f"load: server CPU per operation, the bare server through a worker thread ({size};"
            " reference: the floor of storage kept off the event loop)",
            cpu(hop),
            cpu(bare),
            "ms CPU/op",
        ),
        row(
            f"load: server CPU per operation, ours vs the bare server through a worker thread"
            f" ({size}; reference)",
            cpu(ours),
            cpu(hop),
            "ms CPU/op",
        ),
    ]


if __name__ == "__main__":
    for found in run():
        print(found)
