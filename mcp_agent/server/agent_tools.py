"""The agent tools: run an agent in a session (waiting with progress, or detached), and
watch, steer, queue for and cancel runs."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from mcp_agent.runtime.application import AppState
from mcp_agent.runtime.builtin import progress_beats, progress_reporter
from mcp_agent.runtime.run_board import (
    NOT_TAKEN_CHARS,
    CommandKind,
    RunRecord,
    shown_answer,
)
from mcp_agent.runtime.runs import MAX_QUEUED, Run
from mcp_agent.runtime.start import child_depth, run_meta, start_run
from mcp_agent.server.clients import client_channel, client_key
from mcp_agent.server.lifespan import app_state
from mcp_agent.server.paging import CURSOR_DESCRIPTION, newest_page, utf8_size
from mcp_agent.server.schemas import AgentInfo, AgentList, QueueResult, RunAnswer, RunInfo, RunList
from mcp_agent.server.session_tools import READ_ONLY, WRITES
from mcp_agent.server.tool_errors import GIVEN, tool_errors
from mcp_agent.sessions.entries import iso_time
from mcp_agent.wire import one_line

# The most warnings one answer holds (one per MCP server of the agent's that failed to start).
WARNINGS = 20
# What one warning keeps. The longest is the queued messages a run ended before taking (up to
# MAX_QUEUED quotes of NOT_TAKEN_CHARS, each with its kind and quotes): no session holds them,
# so the warning is their only copy and must come back whole.
WARNING_CHARS = MAX_QUEUED * (NOT_TAKEN_CHARS + 40) + 200

RunId = Annotated[str, Field(description="the run's id (from agent_run or agent_runs)"), GIVEN]
Message = Annotated[str, Field(description="what to tell the agent, as a user message")]


def run_info(run: Run | RunRecord) -> RunAnswer:
    answer, cut = shown_answer(run.answer, run.session_id) if run.answer else (run.answer, False)
    return RunAnswer(
        run_id=run.id,
        session_id=run.session_id,
        agent=run.agent_name,
        model=run.model_ref,
        status=run.status,
        answer=answer,
        answer_truncated=cut,
        error=run.error,
        stop_reason=run.stop_reason,
        started=iso_time(run.started),
        finished=iso_time(run.finished) if run.finished is not None else None,
        events=run.event_count,
        last_event=run.last_event,
        new_messages=run.new_messages,
        usage=run.usage.to_json_dict(),
        depth=run.depth,
        parent_run_id=run.parent_run_id,
        warnings=[one_line(w, WARNING_CHARS) for w in run.warnings[:WARNINGS]],
    )


def register(server: MCPServer) -> None:
    @server.tool(annotations=WRITES)
    async def agent_run(
        ctx: Context,
        prompt: Annotated[str, Field(description="what to ask the agent")],
        session_id: Annotated[
            str | None, Field(description="continue this session; omitted: a new session"), GIVEN
        ] = None,
        agent: Annotated[
            str | None,
            Field(
                description="an agent from agent_list; null: a continued session's own (the "
                "one it was started with), else default"
            ),
        ] = None,
        model: Annotated[
            str | None,
            Field(
                description="provider:model-id, e.g. openai:gpt-4o-mini; 'client' = yours (by"
                " sampling); null: a continued session's model, else the agent's, else the"
                " server's default"
            ),
        ] = None,
        wait: Annotated[
            bool | None,
            Field(
                description="true (null: this): wait for the answer, with progress; a call"
                " the client cancels or gives up on (many time calls out after 60 s) aborts the"
                " run; false: return at once with the run's id, to follow with agent_status"
                " (for a long task)"
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RunAnswer]:
        """Run an agent on a prompt in a session; every message is stored in the session.
        Returns the run: its id, session, status and the answer. A run that ends in error or
        is aborted is a tool error, with the same information."""
        wait = wait is not False
        state = app_state(ctx)
        async with AsyncExitStack() as stack:
            listener = (
                await stack.enter_async_context(
                    progress_reporter(
                        ctx, state.task_group, beat_every=state.settings.progress_interval
                    )
                )
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
                    parent_run_id=meta.get("run_id"),
                    # A waited run asks the client's model on this request's own stream,
                    # open while it waits; a detached one has only the connection's.
                    client_channel=client_channel(ctx.request_context, waited=wait),
                    parent_session=parent,
                    listener=listener,
                    client=client_key(ctx.request_context),
                )
            if wait:
                await state.runs.wait(run)
                run.listeners.clear()
        return run_result(run)

    @server.tool(annotations=READ_ONLY)
    async def agent_status(
        ctx: Context,
        run_id: RunId,
        wait_seconds: Annotated[
            float | None,
            Field(
                ge=0,
                le=600,
                description="wait up to this long (0 to 600) for the run to end; null: 0",
            ),
        ] = None,
    ) -> RunAnswer:
        """The state of a run. Returns its status (running, completed, error or aborted), its
        answer or error, events so far and token usage."""
        state = app_state(ctx)
        with tool_errors():
            if not wait_seconds:
                return run_info(await state.runs.wait_for_end(run_id, 0))
            # A wait past the client's request timeout (the TypeScript SDK's is 60 s) is kept
            # alive by progress, for a client that resets its timeout on it.
            every = state.settings.progress_interval
            async with progress_beats(ctx, state.task_group, every, f"run {run_id} to end"):
                run = await state.runs.wait_for_end(run_id, wait_seconds)
            return run_info(run)

    @server.tool(annotations=WRITES)
    async def agent_cancel(ctx: Context, run_id: RunId) -> RunAnswer:
        """Abort a run; the session records an aborted assistant message and stays consistent.
        Returns the run, now aborted (or as it had ended already)."""
        with tool_errors():
            return run_info(await app_state(ctx).runs.cancel(run_id))

    @server.tool(annotations=WRITES)
    async def agent_steer(ctx: Context, run_id: RunId, message: Message) -> QueueResult:
        """Queue a message to go in after the current tool batch, before the next model call.
        Returns what was queued and the run's status."""
        run = await _queue(app_state(ctx), run_id, "steer", message)
        return QueueResult(run_id=run_id, queued="steering", status=run.status)

    @server.tool(annotations=WRITES)
    async def agent_follow_up(ctx: Context, run_id: RunId, message: Message) -> QueueResult:
        """Queue a message to run when the agent would otherwise stop. Returns what was
        queued and the run's status."""
        run = await _queue(app_state(ctx), run_id, "follow_up", message)
        return QueueResult(run_id=run_id, queued="follow_up", status=run.status)

    @server.tool(annotations=READ_ONLY)
    async def agent_runs(
        ctx: Context,
        limit: Annotated[
            int | None, Field(ge=1, le=100, description="runs per page, 1 to 100; null: 20")
        ] = None,
        cursor: Annotated[str | None, Field(description=CURSOR_DESCRIPTION)] = None,
    ) -> RunList:
        """The runs of this server (those under way, and the latest that ended), newest
        first. Returns a page of runs with their status and answers, and a cursor for older."""
        with tool_errors():
            infos: list[RunInfo] = [run_info(run) for run in await app_state(ctx).runs.newest()]
            # A cursor names the run its index holds (the oldest of the page before): a run
            # forgotten since moves every newer one down.
            page = newest_page(
                infos,
                cursor,
                limit or 20,
                lambda i: utf8_size(i.model_dump_json()),  # bytes, as every page's bound
                paged_as=lambda index: f"run {infos[index].run_id}",
            )
        # Newest first, as session_list: truncated says older runs are left for the cursor
        # (not that newer ones came before this page).
        return RunList(
            runs=infos[page.start : page.end][::-1],
            truncated=page.next_cursor is not None,
            next_cursor=page.next_cursor,
        )

    @server.tool(annotations=READ_ONLY)
    async def agent_list(ctx: Context) -> AgentList:
        """The agents defined in the manifests, for agent_run's agent argument. Returns each
        one's name, description, model, tools and servers."""
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


def run_result(run: Run) -> CallToolResult:
    """The run as a tool result: a tool error when it ended in error or was aborted."""
    info = run_info(run)
    data = info.model_dump(mode="json")
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))  # as every answer
    failed = run.status in ("error", "aborted")
    if failed:
        # An aborted run's error says "aborted: REASON" itself: the status is said once.
        why = run.error or run.stop_reason or ""
        if why == run.status or why.startswith(f"{run.status}:"):
            why = why[len(run.status) + 1 :].strip()
        text = f"the run ended {run.status}: {why or 'no reason given'}\n{text}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=data, is_error=failed
    )


async def _queue(state: AppState, run_id: str, kind: CommandKind, message: str) -> Run | RunRecord:
    if not message.strip():
        raise ToolError("message is empty: say what the agent should hear")
    with tool_errors():
        return await state.runs.queue(run_id, kind, message)
