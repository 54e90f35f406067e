"""tools/list answered with the answer made the first time (mcp_agent/server/tool_list.py):
the same answer each time, made once per protocol era and kind of client, and the requests
the SDK refuses still refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError
from mcp_support import initialize_request, make_server, serve_piped

pytestmark = pytest.mark.anyio

APPS = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_kind_of_listing_is_made_once_and_answered_the_same(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = make_server(tmp_path)
    fresh = make_server(tmp_path / "fresh")
    made: list[int] = []
    list_tools = server.list_tools

    async def counted() -> Any:
        made.append(1)
        return await list_tools()

    monkeypatch.setattr(server, "list_tools", counted)
    answers: dict[str, list[Any]] = {"plain": [], "apps": []}
    for _ in range(3):
        for kind, extensions in (("plain", []), ("apps", [APPS])):
            async with Client(server, mode=mode, extensions=extensions) as client:
                answers[kind].append((await client.list_tools()).model_dump())
                answers[kind].append((await client.list_tools()).model_dump())
    assert len(made) == 2  # one plain, one with the viewer linked
    for kind, extensions in (("plain", []), ("apps", [APPS])):
        async with Client(fresh, mode=mode, extensions=extensions) as client:
            made_anew = (await client.list_tools()).model_dump()
        assert answers[kind] == [made_anew] * 6
    assert answers["plain"][0] != answers["apps"][0]


def test_over_stdio_refusals_stay_and_every_listing_is_the_same(tmp_path: Path) -> None:
    def listing(request_id: int | str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
        return request if params is None else {**request, "params": params}

    requests = [
        listing("early"),  # before the handshake: refused
        initialize_request(0),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        listing(1, {"_meta": 5}),  # a bad _meta, the first listing: the SDK's whole way
        listing(2),
        listing(3, {"_meta": 5}),  # the same, answered from the kept listing
        listing(4, {"_meta": {"progressToken": "t"}}),
        listing(5, {"cursor": "x"}),  # a cursor none was handed out: invalid params
        listing(6, {"cursor": None}),  # no cursor, said so: the first page
    ]
    answers, _ = serve_piped(tmp_path / "s.db", requests)
    assert answers["early"]["error"]["code"] == -32602
    assert answers[1]["error"] == answers[3]["error"]
    assert "_meta" in answers[3]["error"]["message"]
    tools = answers[2]["result"]["tools"]
    assert len(tools) > 10
    assert answers[4]["result"] == answers[6]["result"] == answers[2]["result"]
    assert answers[5]["error"]["code"] == -32602


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_cursor_of_a_list_of_one_page_is_invalid_params(tmp_path: Path, mode: str) -> None:
    """tools/list, prompts/list and resources/templates/list have one page and hand out no
    cursor: one given is refused with -32602 (invalid params) and says so, as resources/list
    refuses one it did not hand out and as MCP asks (before: the first page, as if no cursor
    had been given), in both protocol eras."""
    async with Client(make_server(tmp_path), mode=mode) as client:
        listings = {
            "tools/list": client.list_tools,
            "prompts/list": client.list_prompts,
            "resources/templates/list": client.list_resource_templates,
            "resources/list": client.list_resources,
        }
        for method, listing in listings.items():
            first = await listing(cache_mode="bypass")
            assert first.next_cursor is None or method == "resources/list"
            with pytest.raises(MCPError) as refused:
                await listing(cursor="not-a-cursor", cache_mode="bypass")
            assert refused.value.code == -32602, method
            assert "invalid cursor 'not-a-cursor'" in refused.value.message, method
            # The first page is still answered as before.
            assert (await listing(cache_mode="bypass")).model_dump() == first.model_dump()
