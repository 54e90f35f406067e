"""The tool hub: every tool the agent calls goes through an MCP client.

Built-in tools live in an in-process MCP server reached through an in-memory client; downstream
servers from servers.json are reached over stdio or HTTP. Both become AgentTools; a downstream
tool is named ``server__tool``. Run information (session, depth) travels in the call's ``_meta``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp.server import MCPServer

from mcp_agent.abort import AbortSignal
from mcp_agent.manifests import AgentManifest, ServerConfig
from mcp_agent.proxy.builtin_client import builtin_client
from mcp_agent.proxy.convert import input_schema, model_tool_name, qualified_name
from mcp_agent.proxy.downstream import DownstreamError, McpServerConnection, connect_to
from mcp_agent.tools import AgentTool, AgentToolResult, ToolUpdateCallback

# The _meta key under which a run's context reaches tools (and nested servers).
RUN_META_KEY = "mcp-agent-sessions/run"
BUILTIN = "builtin"
# A downstream server gets its call timeout to start, and never less than this (starting one
# can take longer than a quick call's limit: an interpreter, a package download), unless its
# entry sets a ``start_timeout`` of its own.
MIN_START_TIMEOUT = 10.0
# What a downstream tool's description may hold (about 2,500 tokens; Claude Code keeps 2,048
# characters of an MCP tool's).
MAX_DESCRIPTION_CHARS = 10_000


class ToolHub:
    def __init__(
        self,
        servers: dict[str, ServerConfig],
        builtin: Callable[[], MCPServer] | None = None,
    ):
        """``builtin`` makes the in-process server of built-in tools when it is first used."""
        self.configs = servers
        self._connections: dict[str, McpServerConnection] = {
            name: McpServerConnection(
                name,
                connect_to(name, config),
                start_timeout=config.start_timeout or max(config.timeout, MIN_START_TIMEOUT),
            )
            for name, config in servers.items()
        }
        self._builtin = (
            McpServerConnection(BUILTIN, lambda handler: builtin_client(builtin(), handler))
            if builtin
            else None
        )
        self._task_group: TaskGroup | None = None
        self._task_group_cm: AbstractAsyncContextManager[TaskGroup] | None = None

    async def __aenter__(self) -> ToolHub:
        self._task_group_cm = anyio.create_task_group()
        self._task_group = await self._task_group_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with anyio.CancelScope(shield=True):
            await self.close()
        assert self._task_group_cm is not None
        return await self._task_group_cm.__aexit__(exc_type, exc, tb)

    async def close(self) -> None:
        connections = list(self._connections.values())
        if self._builtin:
            connections.append(self._builtin)
        async with anyio.create_task_group() as group:
            for connection in connections:
                group.start_soon(connection.stop)

    def connection(self, server: str) -> McpServerConnection:
        return self._connections[server]

    async def tools(
        self,
        agent: AgentManifest | None = None,
        run_meta: dict[str, Any] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> list[AgentTool]:
        """The tools ``agent`` may use: built-ins and its downstream servers' tools, filtered by
        its patterns. A server that cannot start is reported to ``on_error`` and left out."""
        assert self._task_group is not None, "use the hub inside 'async with'"
        result: list[AgentTool] = []
        sources: list[tuple[McpServerConnection, str | None, float | None]] = []
        if self._builtin:
            sources.append((self._builtin, None, None))
        for name, connection in self._connections.items():
            if agent is None or agent.allows_server(name):
                sources.append((connection, name, self.configs[name].timeout))
        listed: list[list[types.Tool]] = [[] for _ in sources]

        async def list_tools(index: int, connection: McpServerConnection) -> None:
            assert self._task_group is not None
            try:
                listed[index] = await connection.tools(self._task_group)
            except DownstreamError as error:
                if on_error:
                    on_error(str(error))

        # Servers start side by side: a slow one does not hold up the others.
        async with anyio.create_task_group() as group:
            for index, (connection, _, _) in enumerate(sources):
                group.start_soon(list_tools, index, connection)
        # Keyed by server and tool: "p" with "_echo" and "p_" with "echo" are both "p___echo",
        # and both are kept (a server listing a name twice has one tool of that name).
        chosen: dict[
            tuple[str | None, str], tuple[str, McpServerConnection, types.Tool, float | None]
        ] = {}
        for (connection, prefix, timeout), tools in zip(sources, listed, strict=True):
            for tool in tools:
                name = qualified_name(prefix, tool.name) if prefix else tool.name
                chosen.setdefault((prefix, tool.name), (name, connection, tool, timeout))
        # Names a model API takes keep them (the first tool of a name); the others get names no
        # tool has (of all the servers', so that a tool's name does not depend on the agent).
        taken: set[str] = set()
        kept = set()
        for key, (name, *_) in chosen.items():
            if name not in taken and model_tool_name(name, ()) == name:
                taken.add(name)
                kept.add(key)
        for key, (name, connection, tool, timeout) in chosen.items():
            safe = name if key in kept else model_tool_name(name, taken)
            taken.add(safe)
            if agent is None or agent.allows_tool(name):
                result.append(self._agent_tool(connection, tool, safe, timeout, run_meta, name))
        return result

    def _agent_tool(
        self,
        connection: McpServerConnection,
        tool: types.Tool,
        name: str,
        timeout: float | None,
        run_meta: dict[str, Any] | None,
        listed_as: str,
    ) -> AgentTool:
        task_group = self._task_group
        assert task_group is not None
        meta = {RUN_META_KEY: run_meta} if run_meta else None

        async def execute(
            tool_call_id: str,
            params: dict[str, Any],
            signal: AbortSignal,
            on_update: ToolUpdateCallback,
            context: Any = None,
        ) -> AgentToolResult:
            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                text = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
                on_update(
                    AgentToolResult.text(text, details={"progress": progress, "total": total})
                )

            return await connection.call(
                task_group,
                tool.name,
                params,
                time_limit=timeout,
                signal=signal,
                on_progress=on_progress,
                meta=meta,
            )

        annotations = tool.annotations
        title = tool.title or (annotations.title if annotations else None)
        description = tool.description or ""
        if len(description) > MAX_DESCRIPTION_CHARS:
            # Sent with every request of every run that may use the tool: a server's 5 MB
            # description made each of them 5 MB, past what a model API takes.
            description = (
                f"{description[:MAX_DESCRIPTION_CHARS]}\n[cut: the description held "
                f"{len(description):,} characters]"
            )
        if name != listed_as:
            # The model may see the name elsewhere (a prompt, a document); and two servers'
            # tools may share a qualified name, so the server is named apart.
            origin = f"(MCP tool {tool.name} of server {connection.name})"
            description = f"{description}\n\n{origin}".lstrip()
        return AgentTool(
            name=name,
            label=title or listed_as,
            description=description,
            parameters=input_schema(tool),
            execute=execute,
        )
