"""The in-memory client of the built-in tools' server (the tool hub's ``builtin``)."""

from __future__ import annotations

from contextlib import AsyncExitStack

from mcp import Client, types
from mcp.client.session import ClientSession, MessageHandlerFnT
from mcp.server import MCPServer


class _OwnServerSession(ClientSession):
    """A client session that takes the structured content of a tool result as its server
    made it. The SDK's client checks it against the tool's output schema with ``jsonschema``
    on every call: a tenth of the CPU of a built-in tool's call, for a server in this process
    whose ``MCPServer`` made that content from the same model as the schema. A downstream
    server's results are still checked (``connect_to``)."""

    async def validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        return None


class BuiltinClient(Client):
    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        # The SDK's session, rebuilt as ours with the same settings: if the SDK stops calling
        # this method, results are checked again, as any server's (slower, never wrong).
        session = await super()._build_session(exit_stack)
        session.__class__ = _OwnServerSession
        return session


def builtin_client(server: MCPServer, handler: MessageHandlerFnT) -> Client:
    return BuiltinClient(server, message_handler=handler)
