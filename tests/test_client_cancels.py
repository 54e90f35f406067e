"""A real client leaving a run under way over streamable HTTP (tests/peers/ts_cancel_run.mjs,
the TypeScript SDK's client, against a server process with a slow model): cancelled with an
AbortSignal the run ends as aborted, recorded so in its session, and the connection goes on
serving; a client that only drops its connections leaves the run to finish (a disconnection
is not a cancellation, says the spec); one that ends its MCP session ends its runs too."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_support import call
from slow_support import (  # noqa: F401  (the slow_server fixtures)
    NODE,
    PEERS,
    ROOT,
    needs_node,
    shared_slow_server_fixture,
    slow_server_fixture,
)

pytestmark = [needs_node, pytest.mark.anyio]

# 30 characters, one every 50 ms (tests/servers/slow_model_server.py): about 1.5 s.
SLOW = "slow 30"


async def ts_cancel_run(url: str, after: int, mode: str) -> dict[str, Any]:
    """tests/peers/ts_cancel_run.mjs leaving its run after ``after`` progress notifications
    (``mode``: abort, exit or end): the JSON object it printed last."""
    script = PEERS / "ts_cancel_run.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_cancel_run.mjs", script)
    command = [str(NODE), str(script), url, SLOW, str(after), mode]
    with anyio.fail_after(60):  # a hang guard
        done = await anyio.run_process(command, stdin=subprocess.DEVNULL, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr.decode()[-2000:])
    return dict(json.loads(out.strip().splitlines()[-1]))


async def ended_run(url: str, session_id: str) -> dict[str, Any]:
    """The run in ``session_id`` once it has ended, and the session's messages, asked by
    another client (the Python SDK's)."""
    async with Client(streamable_http_client(url)) as client:
        with anyio.fail_after(30):
            while True:
                runs = (await call(client, "agent_runs"))["runs"]
                [run] = [r for r in runs if r["sessionId"] == session_id]
                if run["status"] != "running":
                    break
                await anyio.sleep(0.05)
        branch = await call(client, "session_get", session_id=session_id)
    messages = [e["message"] for e in branch["entries"] if e["type"] == "message"]
    return {**run, "said": [(m["role"], m.get("stopReason")) for m in messages]}


async def test_a_run_the_typescript_client_aborts_ends_as_aborted_and_the_client_goes_on(
    slow_server: str,
) -> None:
    seen = await ts_cancel_run(slow_server, 3, "abort")
    # The SDK gives up the call at once with the abort's reason.
    assert "the user stopped it" in seen["callEnded"], seen
    run = seen["run"]
    assert run["status"] == "aborted", seen
    assert "cancelled" in run["error"] and len(run["answer"]) < 30, run
    # Recorded in the session as pi records an abort; nothing more came to the call.
    assert seen["messages"] == [["user", None], ["assistant", "aborted"]], seen
    assert seen["notesAfterwards"] == seen["notesWhenAborted"], seen
    # The session was let go (no run left holding it): a run after it on the same connection.
    assert seen["again"]["status"] == "completed", seen["again"]
    assert seen["again"]["answer"] == "echo: again"


async def test_a_run_on_the_clients_model_aborted_gives_up_its_request_for_the_model(
    slow_server: str,
) -> None:
    """Cancelled while the server waits on the client's model (sampling/createMessage): the
    server gives that request up too (notifications/cancelled), so the client's model is not
    kept at work for a run that is gone, and its late answer is not recorded."""
    seen = await ts_cancel_run(slow_server, 0, "sampling")
    # (Asked twice: the second time for the run after it, in the session of the same model.)
    assert seen["sampling"] == {"asked": 2, "givenUp": 1}, seen
    assert seen["run"]["status"] == "aborted", seen
    assert seen["messages"] == [["user", None], ["assistant", "aborted"]], seen
    assert seen["again"]["status"] == "completed", seen["again"]
    assert seen["again"]["answer"] == "again"


async def test_a_run_whose_typescript_client_drops_its_connections_goes_on_to_its_end(
    slow_server: str,
) -> None:
    seen = await ts_cancel_run(slow_server, 3, "exit")
    run = await ended_run(slow_server, seen["sessionId"])
    assert run["status"] == "completed" and run["answer"] == "w" * 30, run
    assert run["said"] == [("user", None), ("assistant", "stop")], run


async def test_a_run_whose_typescript_client_ends_its_mcp_session_is_aborted(
    slow_server: str,
) -> None:
    seen = await ts_cancel_run(slow_server, 3, "end")
    run = await ended_run(slow_server, seen["sessionId"])
    assert run["status"] == "aborted" and len(run["answer"]) < 30, run
    assert run["said"] == [("user", None), ("assistant", "aborted")], run
