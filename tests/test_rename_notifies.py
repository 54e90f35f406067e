"""A session renamed changes what resources/list shows: a client that lists resources hears
of it (notifications/resources/list_changed), as it does of a session created or deleted,
through a real ``serve`` over stdio, in both protocol eras."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp_support import call

pytestmark = pytest.mark.anyio

RENAME = {"type": "session_info", "name": "the new name"}


def served(tmp_path: Path) -> StdioServerParameters:
    args = ["-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    return StdioServerParameters(command=sys.executable, args=args)


async def announced(events: Any) -> None:
    """The next event heard is a list change. (The client folds identical events not yet
    read into one: read each in turn.)"""
    with anyio.fail_after(20):
        assert type(await events.__anext__()).__name__ == "ResourcesListChanged"


async def listed_names(client: Client) -> dict[str, str]:
    resources = (await client.list_resources()).resources
    return {str(r.uri): r.name for r in resources if str(r.uri).startswith("session://")}


async def test_a_rename_is_told_to_modern_listeners_of_the_list(tmp_path: Path) -> None:
    async with Client(served(tmp_path)) as client:
        async with client.listen(resources_list_changed=True) as events:
            sid = (await call(client, "session_create"))["id"]
            await announced(events)
            await call(client, "session_append", session_id=sid, entry=RENAME)
            await announced(events)
        assert (await listed_names(client))[f"session://{sid}"] == "the new name"


async def test_a_rename_is_told_to_legacy_clients(tmp_path: Path) -> None:
    received: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            raise message
        received.append(message)

    def list_changes() -> int:
        return sum(isinstance(m, types.ResourceListChangedNotification) for m in received)

    async def heard(count: int) -> None:
        with anyio.fail_after(20):
            while list_changes() < count:
                await anyio.sleep(0.02)

    params = served(tmp_path)
    async with Client(params, mode="legacy", message_handler=on_message) as client:
        await client.list_resources()  # a legacy client that lists hears of list changes
        sid = (await call(client, "session_create"))["id"]
        await heard(1)
        before = list_changes()
        # A pi entry of the same kind, as any appended rename.
        pi_rename = {"type": "pi", "json": '{"type":"session_info","name":"the new name"}'}
        for rename in (RENAME, pi_rename):
            await call(client, "session_append", session_id=sid, entry=rename)
            before += 1
            await heard(before)
        assert (await listed_names(client))[f"session://{sid}"] == "the new name"


async def test_a_sessions_first_user_message_is_told_to_listeners_of_the_list(
    tmp_path: Path,
) -> None:
    """resources/list shows a session's first user message as its description: a session
    created empty got it with no list change told, and a client that listed it kept showing
    none."""
    async with Client(served(tmp_path)) as client:
        async with client.listen(resources_list_changed=True) as events:
            sid = (await call(client, "session_create"))["id"]
            await announced(events)
            first = {"type": "message", "role": "user", "content": "the first question"}
            await call(client, "session_append", session_id=sid, entry=first)
            await announced(events)
        listed = (await client.list_resources()).resources
    [mine] = [r for r in listed if str(r.uri) == f"session://{sid}"]
    assert mine.description == "the first question"
