"""What the command line writes to a PostgreSQL session database reaches the subscribers of
the servers on it (their change feed, LISTEN/NOTIFY: runtime.change_feed, server/pg_bus), as
another replica's writes do; on a cluster of the test's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp_support import call, server_env
from test_postgres import replica

pytestmark = pytest.mark.anyio

HANG_GUARD_S = 60  # a hang guard for each wait, not a speed check


def cli(tmp: Path, url: str, *args: str) -> None:
    """The command line, a process of its own, on the database at ``url``."""
    command = [sys.executable, "-m", "mcp_agent", *args, "--db", url]
    done = subprocess.run(
        command, env=server_env(tmp), capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr


async def test_the_command_lines_writes_reach_a_servers_listeners(
    tmp_path: Path, postgres_url: str
) -> None:
    """A listener of a server heard nothing of a `sessions rename` or `delete` made from the
    command line on the same database (only another replica's writes came through the
    feed): it now hears the session updated, and the list changed when it is deleted."""
    listening, writing = (
        replica(tmp_path / "a", postgres_url),
        replica(tmp_path / "b", postgres_url),
    )
    async with Client(listening) as listener, Client(writing) as writer:
        sid = (await call(writer, "session_create"))["id"]
        uri = f"session://{sid}"
        heard: list[Any] = []
        async with listener.listen(
            resources_list_changed=True, resource_subscriptions=[uri]
        ) as events:

            async def hear() -> None:
                async for event in events:
                    heard.append(event)

            async def until(wanted: set[str]) -> None:
                with anyio.fail_after(HANG_GUARD_S):
                    while True:
                        got = {
                            "updated"
                            if isinstance(e, ResourceUpdated) and e.uri == uri
                            else "list"
                            if isinstance(e, ResourcesListChanged)
                            else "other"
                            for e in heard
                        }
                        if wanted <= got:
                            return
                        await anyio.sleep(0.02)

            async with anyio.create_task_group() as group:
                group.start_soon(hear)
                # The listening server's feed starts with its lifespan: sessions are made
                # through the other until it hears one (a hang guard: a loaded machine may
                # take many tries).
                for _ in range(600):
                    await call(writer, "session_create")
                    await anyio.sleep(0.1)
                    if heard:
                        break
                else:
                    raise AssertionError("the listening server never heard the other")
                heard.clear()
                await anyio.to_thread.run_sync(
                    cli, tmp_path, postgres_url, "sessions", "rename", sid, "after"
                )
                await until({"updated"})
                read = await call(listener, "session_get", session_id=sid, limit=0)
                assert read["session"]["name"] == "after"
                heard.clear()
                await anyio.to_thread.run_sync(
                    cli, tmp_path, postgres_url, "sessions", "delete", sid, "--yes"
                )
                await until({"updated", "list"})
                group.cancel_scope.cancel()


def test_the_command_lines_appends_announce_themselves_in_their_own_transaction(
    postgres_url: str,
) -> None:
    """The command line announced each stored entry in a transaction of its own, after the
    append's (a run's every message cost two commits, each with its WAL flush). The notices
    now go in the append's transaction: one transaction per append, and the servers hear
    each change as before."""
    import json

    import psycopg
    from test_postgres import user_message

    from mcp_agent.cli.common import open_database
    from mcp_agent.runtime.change_feed import CHANNEL, session_uris

    def next_xid(look: Any) -> int:
        # Each transaction that writes takes a transaction id (a NOTIFY's too).
        [(xmax,)] = look.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchall()
        return int(xmax)

    appends = 3
    repo = open_database(postgres_url)
    try:
        with (
            psycopg.connect(postgres_url, autocommit=True) as listener,
            psycopg.connect(postgres_url, autocommit=True) as look,
        ):
            session = repo.create()
            listener.execute(f"LISTEN {CHANNEL}")
            before = next_xid(look)
            for n in range(appends):
                session.append_message(user_message(f"m{n}"))
            assert next_xid(look) - before == appends
            heard = [
                json.loads(notice.payload)
                for notice in listener.notifies(timeout=HANG_GUARD_S, stop_after=4 * appends)
            ]
            assert [event["uri"] for event in heard] == session_uris(session.id) * appends
            assert all(event["origin"].startswith("cli-") for event in heard)
    finally:
        repo.close()
