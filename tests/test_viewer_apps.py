"""The viewer as an MCP App: linked from session_get and agent_run, and listed, only for
clients that declare the extension; everyone else gets the lists they always got."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, advertise
from mcp.server import MCPServer
from mcp.types import TextResourceContents
from mcp_support import make_server
from narrow import narrow

from mcp_agent.server.viewer.apps import LINKED_TOOLS, VIEWER_URI

pytestmark = pytest.mark.anyio

APPS = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
# Declaring the extension for another kind of view is not declaring this one.
OTHER_VIEWS = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/uri-list"]})


@pytest.fixture(name="server", scope="module")
def server_fixture(tmp_path_factory: pytest.TempPathFactory) -> MCPServer:
    return make_server(Path(tmp_path_factory.mktemp("apps")))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_apps_clients_get_the_link_and_the_resource(server: MCPServer, mode: str) -> None:
    async with Client(server, mode=mode, extensions=[APPS]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        for name in LINKED_TOOLS:
            assert tools[name].meta == {"ui": {"resourceUri": VIEWER_URI}}
        assert all(tools[name].meta is None for name in tools if name not in LINKED_TOOLS)
        listed = (await client.list_resources()).resources
        assert listed[0].uri == VIEWER_URI
        assert listed[0].mime_type == "text/html;profile=mcp-app"
        [content] = (await client.read_resource(VIEWER_URI)).contents
    assert content.mime_type == "text/html;profile=mcp-app"
    assert content.meta == {"ui": {"prefersBorder": True, "csp": {}}}
    html = narrow(content, TextResourceContents).text
    assert 'data-transport="app"' in html and "{{" not in html
    # self-contained: no address of any origin to load from or talk to
    assert re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html) == []
    assert re.findall(r'(?:src|href)="(?!data:)', html) == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("extensions", [[], [OTHER_VIEWS]], ids=["none", "other-views"])
async def test_other_clients_get_todays_answers(
    server: MCPServer, mode: str, extensions: list[ClientExtension]
) -> None:
    async with Client(server, mode=mode, extensions=extensions) as client:
        tools = (await client.list_tools()).tools
        assert all(tool.meta is None for tool in tools)
        assert all(r.uri != VIEWER_URI for r in (await client.list_resources()).resources)
