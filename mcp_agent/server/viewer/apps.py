"""The viewer as an MCP App (extension ``io.modelcontextprotocol/ui``): a ``ui://`` resource
that ``session_get`` and ``agent_run`` name in their ``_meta.ui.resourceUri``. A host renders
it in a sandboxed frame, hands it the tool's result and proxies its own ``tools/call``
requests back here.

Only clients that declare the extension (with the ``text/html;profile=mcp-app`` MIME type) see
the link and the resource in their lists; every other client gets the lists it always got."""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.apps import APP_MIME_TYPE, client_supports_apps
from mcp.server.mcpserver.resources import TextResource

from mcp_agent.server.viewer import viewer_html

VIEWER_URI = "ui://mcp-agent-sessions/viewer.html"
LINKED_TOOLS = ("session_get", "agent_run")
# The frame needs no network and no permissions: everything comes through the host.
RESOURCE_META: dict[str, Any] = {"ui": {"prefersBorder": True, "csp": {}}}
DESCRIPTION = (
    "The session as a tree: branches, labels, compactions and the leaf; click an entry to "
    "read it, move the leaf there, fork or label it, or continue the session with a prompt"
)


# What resources/list says of the viewer, and what the resource itself carries.
LISTED: dict[str, Any] = {
    "uri": VIEWER_URI,
    "name": "session-viewer",
    "title": "Session viewer",
    "description": DESCRIPTION,
    "mime_type": APP_MIME_TYPE,
}


def viewer_resource() -> types.Resource:
    return types.Resource(**LISTED, _meta=RESOURCE_META)


def linked(tool: types.Tool) -> types.Tool:
    """``tool`` with the viewer in its ``_meta.ui`` (a copy; other ``_meta`` keys kept)."""
    meta = dict(tool.meta or {})
    meta["ui"] = {**meta.get("ui", {}), "resourceUri": VIEWER_URI}
    return tool.model_copy(update={"meta": meta})


def register(server: MCPServer) -> None:
    server.add_resource(TextResource(**LISTED, meta=RESOURCE_META, text=viewer_html("app")))
    lowlevel = server._lowlevel_server  # as resources.py: no public hook for tools/list
    plain = lowlevel.get_request_handler("tools/list")
    assert plain is not None

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        result = await plain.handler(ctx, params)
        assert isinstance(result, types.ListToolsResult)
        if not client_supports_apps(ctx):
            return result
        tools = [linked(t) if t.name in LINKED_TOOLS else t for t in result.tools]
        return result.model_copy(update={"tools": tools})

    lowlevel.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)
