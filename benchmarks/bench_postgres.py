"""PostgreSQL and replicas, on a cluster of the benchmark's own (fsync on, as in production).

Rows (each beside a baseline measured in the same run):
- ``durable appends/s``: Session.append_message on PostgreSQL vs on SQLite (both durable:
  PostgreSQL commits with synchronous_commit on, SQLite with synchronous=FULL).
- ``context build``: open a session afresh and build its context (a 2,000-entry branch),
  PostgreSQL vs SQLite.
- ``replicas: throughput``: the load driver's clients going round-robin over three replica
  processes vs the same clients on one replica, both over PostgreSQL. The machine has few cores
  shared by the replicas, PostgreSQL and the clients themselves: on two cores three replicas
  cannot be expected to do more than one; the row says what they do.
- ``replicas: notification latency p50 / p99``: a 2026-07-28 listener on one replica, appends
  through another (PostgreSQL NOTIFY) vs listener and appends on the same replica.

``MCP_AGENT_BENCH_QUICK=1``: fewer appends, a smaller load. Without PostgreSQL's binaries the
rows say why they are missing.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # drivers, cluster

import anyio
from pg_support import Cluster, running_cluster, why_no_postgres
from reliability_load import ServerProcess, run_load

from mcp_agent.messages import UserMessage
from mcp_agent.sessions import SqliteSessionRepo
from mcp_agent.sessions.sqlite import SqliteSessionStorage

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common
from common import quick, reply, row


def median_seconds(work: Callable[[], object], times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


# --- storage ----------------------------------------------------------------------------------


def bench_storage(url: str, workdir: Path, count: int, depth: int) -> list[dict[str, Any]]:
    from mcp_agent.sessions.postgres import PostgresSessionRepo, PostgresSessionStorage

    pg, lite = PostgresSessionRepo(url), SqliteSessionRepo(workdir / "bench.db")
    try:
        sessions = {name: repo.create() for name, repo in (("pg", pg), ("lite", lite))}
        messages = [reply(i) for i in range(count)]
        spent = {"pg": 0.0, "lite": 0.0}
        size = max(1, count // 10)
        for start in range(0, count, size):  # alternating rounds: both see the same machine
            for name, session in sessions.items():
                began = time.perf_counter()
                for message in messages[start : start + size]:
                    session.append_message(message)
                spent[name] += time.perf_counter() - began

        deep = {name: repo.create() for name, repo in (("pg", pg), ("lite", lite))}
        for session in deep.values():
            for index in range(depth):
                if index % 2:
                    session.append_message(reply(index))
                else:
                    session.append_message(
                        UserMessage(content=f"question {index}", timestamp=index)
                    )
        builds = 5 if quick() else 20
        pg_build = median_seconds(
            lambda: PostgresSessionStorage(pg.database, deep["pg"].id).get_context_path(
                deep["pg"].leaf_id
            ),
            builds,
        )
        lite_build = median_seconds(
            lambda: SqliteSessionStorage(lite.database, deep["lite"].id).get_context_path(
                deep["lite"].leaf_id
            ),
            builds,
        )
    finally:
        pg.close()
        lite.close()
    return [
        row(
            f"durable appends/s: Session.append_message, PostgreSQL vs SQLite ({count} each)",
            count / spent["pg"],
            count / spent["lite"],
            "appends/s",
        ),
        row(
            f"context build from a fresh open: PostgreSQL vs SQLite ({depth}-entry branch)",
            pg_build * 1000,
            lite_build * 1000,
            "ms",
        ),
    ]


# --- replicas ---------------------------------------------------------------------------------


def replicas(folder: Path, url: str, count: int) -> list[ServerProcess]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(count) as pool:
        futures = [
            pool.submit(ServerProcess.replica, folder, url, MCP_AGENT_REPLICA=f"r{n}")
            for n in range(count)
        ]
        return [future.result() for future in futures]


def bench_load(cluster: Cluster, folder: Path, clients: int, ops: int) -> list[dict[str, Any]]:
    results = {}
    for count in (1, 3):
        started = replicas(folder, cluster.new_database(), count)
        try:
            results[count] = anyio.run(run_load, [r.url for r in started], clients, ops)
        finally:
            for replica in started:
                replica.stop()
        print(f"{count} replica(s): {results[count].summary()}", file=sys.stderr)
    size = f"{clients} clients x {ops} ops, round robin, {os.cpu_count()} cores"
    return [
        row(
            f"replicas: throughput, three vs one over PostgreSQL ({size})",
            results[3].ops_per_second,
            results[1].ops_per_second,
            "ops/s",
        ),
        row(
            f"replicas: errors, three replicas ({size})",
            len(results[3].errors),
            len(results[1].errors),
            "errors",
            "0",
        ),
    ]


async def _latencies(listen_url: str, append_url: str, count: int) -> list[float]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http,
        Client(streamable_http_client(listen_url, http_client=http)) as listener,
        Client(streamable_http_client(append_url, http_client=http)) as writer,
    ):
        created = await writer.call_tool("session_create", {})
        assert created.structured_content is not None
        sid = created.structured_content["id"]
        entry = {"type": "message", "role": "user", "content": "ping"}
        latencies = []
        async with listener.listen(resource_subscriptions=[f"session://{sid}"]) as events:
            for _ in range(count):
                sent = time.perf_counter()
                await writer.call_tool("session_append", {"session_id": sid, "entry": entry})
                with anyio.fail_after(30):
                    await events.__anext__()
                latencies.append(time.perf_counter() - sent)
                await anyio.sleep(0.02)  # one at a time: the client folds pending events
        return latencies


def bench_notifications(cluster: Cluster, folder: Path, count: int) -> list[dict[str, Any]]:
    started = replicas(folder, cluster.new_database(), 2)
    try:
        across = anyio.run(_latencies, started[0].url, started[1].url, count)
        within = anyio.run(_latencies, started[0].url, started[0].url, count)
    finally:
        for replica in started:
            replica.stop()

    def percentile(values: list[float], p: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000

    name = f"replicas: append to notification, across replicas vs within one ({count} appends)"
    return [
        row(f"{name}, p50", percentile(across, 50), percentile(within, 50), "ms"),
        row(f"{name}, p99", percentile(across, 99), percentile(within, 99), "ms"),
    ]


def run() -> list[dict[str, Any]]:
    reason = why_no_postgres()
    if reason is not None:
        return [{"name": f"postgres: skipped ({reason})"}]
    small = quick()
    with tempfile.TemporaryDirectory() as scratch, running_cluster(settings=[]) as cluster:
        folder = Path(scratch)
        rows = bench_storage(cluster.new_database(), folder, 100 if small else 500, 2000)
        clients, ops = (10, 20) if small else (50, 100)
        rows += bench_load(cluster, folder, clients, ops)
        rows += bench_notifications(cluster, folder, 20 if small else 200)
    return rows
