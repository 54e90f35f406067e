"""The agent tools: run an agent in a session (waiting with progress, or detached), and
watch, steer, queue for and cancel runs."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import Field

from mcp_agent.runtime.application import AppState
from mcp_agent.runtime.builtin import progress_reporter
from mcp_agent.runtime.runs import Run
from mcp_agent.runtime.start import child_depth, run_meta, start_run
from mcp_agent.server.lifespan import app_state
from mcp_agent.server.schemas import AgentInfo, AgentList, QueueResult, RunInfo, RunList
from mcp_agent.server.session_tools import READ_ONLY, WRITES
from mcp_agent.server.tool_errors import tool_errors


def client_key(ctx: Context) -> object:
    """Who is asking, for the per-client run limit. On the 2025 handshake, the connection (a
    legacy HTTP session, a stdio client); on 2026-07-28, where each request stands alone, the
    HTTP client's address, or this process's one client (stdio, in-process)."""
    request = ctx.request_context
    if request.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        connection = getattr(request.session, "_connection", None)
        if connection is not None:
            return connection
    http = getattr(request.request, "client", None)
    if http is not None:
        return ("http", http.host)
    return "local"


def run_info(run: Run) -> RunInfo:
    return RunInfo(
        run_id=run.id,
        session_id=run.session_id,
        agent=run.agent_name,
        model=run.model_ref,
        status=run.status,
        answer=run.answer,
        error=run.error,
        stop_reason=run.stop_reason,
        started=run.started,
        finished=run.finished,
        events=run.event_count,
        last_event=run.last_event,
        new_messages=run.new_messages,
        usage=run.usage.to_json_dict(),
        depth=run.depth,
    )


def register(server: MCPServer) -> None:
    @server.tool(annotations=WRITES)
    async def agent_run(
        ctx: Context,
        prompt: Annotated[str, Field(description="what to ask the agent")],
        session_id: Annotated[
            str | None, Field(description="continue this session; omitted: a new session")
        ] = None,
        agent: Annotated[str | None, Field(description="an agent from agent_list")] = None,
        model: Annotated[
            str | None,
            Field(description="provider:model-id, e.g. openai:gpt-4o-mini; 'client' = yours"),
        ] = None,
        wait: Annotated[
            bool, Field(description="wait for the answer (with progress), or return a run id")
        ] = True,
    ) -> RunInfo:
        """Run an agent on a prompt in a session; every message is stored in the session."""
        state = app_state(ctx)
        async with AsyncExitStack() as stack:
            listener = (
                await stack.enter_async_context(progress_reporter(ctx, state.task_group))
                if wait
                else None
            )
            with tool_errors():
                meta = run_meta(ctx.request_context.meta)
                parent = meta.get("session_id") if meta and session_id is None else None
                run = await start_run(
                    state,
                    prompt=prompt,
                    session_id=session_id,
                    agent_name=agent,
                    model=model,
                    depth=child_depth(meta),
                    client_session=ctx.session,
                    parent_session=parent,
                    listener=listener,
                    client=client_key(ctx),
                )
            if wait:
                await state.runs.wait(run)
                run.listeners.clear()
        return run_info(run)

    @server.tool(annotations=READ_ONLY)
    async def agent_status(
        ctx: Context,
        run_id: str,
        wait_seconds: Annotated[
            float, Field(ge=0, le=600, description="wait up to this long for the run to end")
        ] = 0,
    ) -> RunInfo:
        """The state of a run: running, completed, error or aborted, with its answer."""
        state = app_state(ctx)
        run = _get(state, run_id)
        if wait_seconds and run.status == "running":
            with anyio.move_on_after(wait_seconds):
                await run.done.wait()
        return run_info(run)

    @server.tool(annotations=WRITES)
    async def agent_cancel(ctx: Context, run_id: str) -> RunInfo:
        """Abort a run; the session records an aborted assistant message and stays consistent."""
        state = app_state(ctx)
        run = _get(state, run_id)
        if run.status == "running":
            run.abort("cancelled with agent_cancel")
            await run.done.wait()
        return run_info(run)

    @server.tool(annotations=WRITES)
    async def agent_steer(ctx: Context, run_id: str, message: str) -> QueueResult:
        """Queue a message to go in after the current tool batch, before the next model call."""
        run = _running(app_state(ctx), run_id, message)
        run.agent.steer(message)
        return QueueResult(run_id=run_id, queued="steering", status=run.status)

    @server.tool(annotations=WRITES)
    async def agent_follow_up(ctx: Context, run_id: str, message: str) -> QueueResult:
        """Queue a message to run when the agent would otherwise stop."""
        run = _running(app_state(ctx), run_id, message)
        run.agent.follow_up(message)
        return QueueResult(run_id=run_id, queued="follow_up", status=run.status)

    @server.tool(annotations=READ_ONLY)
    async def agent_runs(ctx: Context) -> RunList:
        """Every run since the server started, newest first."""
        state = app_state(ctx)
        runs = sorted(state.runs.runs.values(), key=lambda r: r.started, reverse=True)
        return RunList(runs=[run_info(run) for run in runs])

    @server.tool(annotations=READ_ONLY)
    async def agent_list(ctx: Context) -> AgentList:
        """The agents defined in the manifests (agent_run's agent argument)."""
        state = app_state(ctx)
        return AgentList(
            agents=[
                AgentInfo(
                    name=a.name,
                    description=a.description,
                    model=a.model,
                    thinking_level=str(a.thinking_level),
                    tools=a.tools,
                    servers=a.servers,
                    max_turns=a.max_turns,
                    uri=f"agent://{a.name}",
                )
                for a in state.agents.values()
            ]
        )


def _running(state: AppState, run_id: str, message: str | None = None) -> Run:
    if message is not None and not message.strip():
        raise ToolError("message is empty: say what the agent should hear")
    run = _get(state, run_id)
    if run.status != "running":
        raise ToolError(f"run {run_id} has ended ({run.status}); start a new one with agent_run")
    return run


def _get(state: AppState, run_id: str) -> Run:
    with tool_errors():
        return state.runs.get(run_id)
