"""Our MCP client to downstream servers (``McpServerConnection``), as the MCP conformance
suite's client mode runs it: ``conformance_client.py URL``. It lists the server's tools and
calls each one; ``add_numbers`` (the ``tools_call`` scenario's) with two numbers."""

from __future__ import annotations

import sys

import anyio

from mcp_agent.manifests import ServerConfig
from mcp_agent.proxy.downstream import McpServerConnection, connect_to


async def main(url: str) -> None:
    server = McpServerConnection("conformance", connect_to("conformance", ServerConfig(url=url)))
    async with anyio.create_task_group() as group:
        for tool in await server.tools(group):
            arguments = {"a": 5, "b": 3} if tool.name == "add_numbers" else {}
            result = await server.call(group, tool.name, arguments, time_limit=30)
            print(tool.name, result.is_error, file=sys.stderr)
        await server.stop()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
