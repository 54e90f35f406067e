"""What does not apply to an answer is left out of it, not said as null, through a real
``serve`` over stdio: a page of a branch carried "nodes":null,"outline":null (in its text and
its structured content), each a key a model reads for nothing. The output schema allows it
(those fields are not required), and the SDK's client checks each answer against it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from mcp_support import call
from narrow import narrow

pytestmark = pytest.mark.anyio

# The fields that apply to some answers of a tool only.
SOMETIMES = {
    "session_get": {"entries", "nodes", "outline", "piece"},
    "session_list": {"unreadable"},
    "session_context": {"settingsCut"},
    "session_export": {"omitted"},
}


async def both(client: Client, tool: str, **arguments: Any) -> list[dict[str, Any]]:
    """The answer's structured content and its text, read as JSON."""
    await client.list_tools()  # (the client checks a result against the schema it listed)
    result = await client.call_tool(tool, arguments)
    assert not result.is_error and result.structured_content is not None
    return [result.structured_content, json.loads(narrow(result.content[0], TextContent).text)]


async def test_a_field_that_does_not_apply_is_left_out_not_null(tmp_path: Path) -> None:
    args = ["-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    async with Client(StdioServerParameters(command=sys.executable, args=args)) as client:
        sid = (await call(client, "session_create"))["id"]
        entry = {"type": "message", "role": "user", "content": "hello"}
        entry_id = (await call(client, "session_append", session_id=sid, entry=entry))["entryId"]
        asked = [
            ({"view": "branch"}, "entries"),
            ({"view": "entries"}, "entries"),
            ({"view": "tree"}, "nodes"),
            ({"view": "outline"}, "outline"),
            ({"entry_id": entry_id, "offset": 0}, "piece"),
        ]
        for arguments, key in asked:
            for answer in await both(client, "session_get", session_id=sid, **arguments):
                present = SOMETIMES["session_get"] & set(answer)
                assert present == {key}, (arguments, sorted(answer))
                assert answer[key] is not None
        for tool in ("session_list", "session_context", "session_export"):
            for answer in await both(
                client, tool, **({} if tool == "session_list" else {"session_id": sid})
            ):
                assert not SOMETIMES[tool] & set(answer), (tool, sorted(answer))
