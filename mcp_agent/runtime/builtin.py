"""Built-in tools, served by an in-process MCP server that the agent reaches through an
in-memory client like any other (the tool hub's ``builtin``): sub-agents.

This is the one MCP server the runtime itself serves: it is how a run's tools reach the
runtime, not part of the public MCP surface (that is ``mcp_agent.server``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
from anyio.abc import TaskGroup
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from mcp_agent.events import AgentEvent, MessageEndEvent, describe_event
from mcp_agent.manifests import AgentManifest
from mcp_agent.messages import AssistantMessage, StopReason
from mcp_agent.proxy.convert import MAX_RESULT_CHARS
from mcp_agent.runtime.application import AppState
from mcp_agent.runtime.errors import Refused
from mcp_agent.runtime.runs import EventListener
from mcp_agent.runtime.start import SUBAGENT_TOOL, child_depth, run_meta, start_run
from mcp_agent.sessions.entries import clip_long
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.repo import SUBAGENT_LINK
from mcp_agent.wire import one_line

# What the parent's link entry keeps of the task: the child's first message holds it whole.
SUBAGENT_TASK_CHARS = 500


class SubagentResult(BaseModel):
    """The structured content of the subagent tool's result. The calling model reads its
    text block (``subagent_text``); this is for the run's record and for tools."""

    session_id: str
    run_id: str
    agent: str
    status: str
    stop_reason: str | None = None
    answer: str


def subagent_text(result: SubagentResult) -> str:
    """What the calling model reads of a sub-agent's result: its answer as the sub-agent wrote
    it, first, then a line with the few facts it needs to go on (which session and run,
    how it ended). Sent as indented JSON, the answer came last, one escaped string (its line
    breaks as ``\\n``), after keys in snake_case."""
    ended = result.status + (f", stop reason {result.stop_reason}" if result.stop_reason else "")
    facts = f"[sub-agent {result.agent}: {ended}; session {result.session_id}, run {result.run_id}]"
    return f"{result.answer}\n\n{facts}"


# What a sub-agent's answer keeps of its text (the session has all of it): a tool result's
# bound, less room for the fields before it and the note.
SUBAGENT_ANSWER_CHARS = MAX_RESULT_CHARS - 1_000


# Progress messages waiting to be sent to one waiting client; past this, new ones are dropped.
PROGRESS_BUFFER = 256
# How long the last progress messages may take to go out once the run has ended.
PROGRESS_FLUSH_S = 1.0


@asynccontextmanager
async def progress_reporter(
    ctx: Context, task_group: TaskGroup, prefix: str = "", beat_every: float = 15.0
) -> AsyncIterator[EventListener]:
    """A run listener that turns each agent event into a progress notification to the MCP
    client waiting on ``ctx``'s request. It never makes the run wait: events go into a
    bounded buffer that a task of its own (in ``task_group``) sends from, and a client that
    stops reading loses progress messages (the numbers still count every event), never the
    run's answer.

    While no event comes for ``beat_every`` seconds (a model that thinks before its first
    token, a slow tool) it says so once each ``beat_every``: a client that resets its timeout
    on progress (the TypeScript SDK's ``resetTimeoutOnProgress``) keeps waiting. A beat's
    number is a fraction past the last event's (n + 1/2, n + 2/3, ...), so numbers still grow
    with each message and the next event's is still its count."""
    # Each item: the event's number and message, or None and the event kind for a beat.
    send, receive = anyio.create_memory_object_stream[tuple[int | None, str]](PROGRESS_BUFFER)
    count = 0
    kind = "start"
    delivered = anyio.Event()
    scope, beating = anyio.CancelScope(), anyio.CancelScope()

    def report(event: AgentEvent) -> None:
        nonlocal count, kind
        count += 1
        kind = event.type
        try:
            send.send_nowait((count, f"{prefix}{event.type}: {describe_event(event)}"))
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the client is not keeping up: this message is dropped

    async def beat() -> None:
        seen, quiet = count, 0.0
        with beating, contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                await anyio.sleep(beat_every)
                if count != seen:
                    seen, quiet = count, 0.0
                    continue
                quiet += beat_every
                with contextlib.suppress(anyio.WouldBlock):
                    send.send_nowait((None, f"{prefix}waiting: {quiet:g} s since {kind}"))

    async def deliver() -> None:
        last, beats = 0, 0
        with scope:
            try:
                async with receive:
                    async for done, message in receive:
                        if done is None:
                            beats += 1
                            progress: float = last + beats / (beats + 1)
                        else:
                            last, beats = done, 0
                            progress = done
                        await ctx.report_progress(progress, None, message)
            except Exception:  # the client went away: the rest are dropped
                pass
        delivered.set()

    task_group.start_soon(deliver)
    task_group.start_soon(beat)
    try:
        yield report
    finally:
        beating.cancel()
        send.close()
        # What is buffered goes out while the client reads; a stuck client is left behind.
        with anyio.move_on_after(PROGRESS_FLUSH_S, shield=True):
            await delivered.wait()
        scope.cancel()


@asynccontextmanager
async def progress_beats(
    ctx: Context, task_group: TaskGroup, every: float, what: str
) -> AsyncIterator[None]:
    """While the body waits, says so as progress once each ``every`` seconds (``waiting: N s
    for WHAT``, numbered 1/2, 2/3, ...), for a client that resets its timeout on progress. A
    client that stops reading never holds the body back. No-op for a request without a
    progress token. The beats run in ``task_group``, not in one around the body, whose errors
    would come out wrapped in an exception group, past the tool's error mapping."""
    scope = anyio.CancelScope()

    async def beat() -> None:
        beaten = 0
        with scope:
            while True:
                await anyio.sleep(every)
                beaten += 1
                with anyio.move_on_after(every), contextlib.suppress(Exception):
                    said = f"waiting: {beaten * every:g} s for {what}"
                    await ctx.report_progress(beaten / (beaten + 1), None, said)

    task_group.start_soon(beat)
    try:
        yield
    finally:
        scope.cancel()


# What the subagent tool's description says of each agent, and of them all: it goes to the model
# with every request of every run that may delegate.
AGENT_NOTE_CHARS = 200
AGENTS_NOTE_CHARS = 4_000


def subagent_description(agents: Mapping[str, AgentManifest]) -> str:
    """The subagent tool's description, naming the agents it may delegate to (fixed once the
    manifests are read): the model has no agent_list, and guessed names cost it a turn each."""
    text = (
        "Delegate a task to another agent, which works in a child session and returns its "
        "final answer. The agents:"
    )
    for index, agent in enumerate(sorted(agents.values(), key=lambda a: a.name)):
        line = f"\n- {agent.name}" + (
            f": {one_line(agent.description, AGENT_NOTE_CHARS)}" if agent.description else ""
        )
        if len(text) + len(line) > AGENTS_NOTE_CHARS:
            return f"{text}\n(and {len(agents) - index} more)"
        text += line
    return text if agents else f"{text} none are defined"


def link_task(task: str, session_id: str) -> str:
    """The task as the parent's link entry keeps it: its start, and where it is whole."""
    whole = f"the whole task is the first message of session {session_id}"
    return clip_long(task, SUBAGENT_TASK_CHARS, whole)


def build_builtin_server(state: AppState) -> MCPServer:
    server = MCPServer("mcp-agent-sessions-builtin", log_level="WARNING")

    @server.tool(name=SUBAGENT_TOOL, description=subagent_description(state.agents))
    async def subagent(
        ctx: Context,
        agent: Annotated[str, Field(description="the agent to delegate to (one of those listed)")],
        task: Annotated[str, Field(description="what the sub-agent should do; be specific")],
    ) -> Annotated[CallToolResult, SubagentResult]:
        # (What the model reads of it is subagent_description.)
        try:
            meta = run_meta(ctx.request_context.meta)
            parent_id = meta.get("session_id")
            if not parent_id:
                raise ToolError("subagent can only be called by an agent run")
            if not task.strip():  # (start_run would say "prompt", a word the model never used)
                raise ToolError("task is empty: say what the sub-agent should do")
            # A child whose agent names no model thinks with its parent's (e.g. the client's).
            caller = state.runs.runs.get(str(meta.get("run_id")))
            inherited: Any = (
                (caller.model_ref, caller.agent.state.model, caller.agent.stream_fn)
                if caller is not None and caller.agent is not None
                else None
            )
        except (Refused, SessionError) as error:
            raise ToolError(str(error)) from None
        beat_every = state.settings.progress_interval
        async with progress_reporter(ctx, state.task_group, f"[{agent}] ", beat_every) as report:
            # Its answer whole, as it ends: the run keeps only what a status shows of it.
            whole: list[str] = []

            def listener(event: AgentEvent) -> Awaitable[None] | None:
                if isinstance(event, MessageEndEvent) and isinstance(
                    event.message, AssistantMessage
                ):
                    whole[:] = [event.message.text]
                return report(event)

            try:
                run = await start_run(
                    state,
                    prompt=task,
                    session_id=None,
                    agent_name=agent,
                    model=None,
                    depth=child_depth(meta),
                    parent_run_id=meta.get("run_id"),
                    parent_session=parent_id,
                    listener=listener,
                    inherited=inherited,
                    # A sub-agent whose manifest names the client's model asks it where its
                    # parent would: it was told there was no MCP client connection.
                    client_channel=caller.client_channel if caller is not None else None,
                    # Counted against the client whose run asked: one client's runs must not
                    # fill the server by delegating.
                    client=caller.client if caller is not None else None,
                )
            except (Refused, SessionError) as error:
                raise ToolError(str(error)) from None
            link = {
                "sessionId": run.session_id,
                "runId": run.id,
                "agent": agent,
                "task": link_task(task, run.session_id),
            }
            delegator = f"run {caller.id}" if caller is not None else "the run"
            try:
                await state.offload(
                    lambda: state.repo.open(parent_id).append_custom(SUBAGENT_LINK, link)
                )
            except BaseException as error:
                # The sub-agent has started: it must not go on with nobody waiting for it.
                run.abort(f"{delegator}, which delegated this task, could not link to it")
                if isinstance(error, SessionError):
                    raise ToolError(
                        f"sub-agent {agent!r} stopped: its link could not be written in this "
                        f"session: {error} (its session: {run.session_id})"
                    ) from None
                raise
            await state.runs.wait(run, f"{delegator}, which delegated this task, was stopped")
            run.listeners.clear()
        if run.status != "completed":
            raise ToolError(
                f"sub-agent {agent!r} ended with {run.status}: {run.error or 'no answer'} "
                f"(its session: {run.session_id})"
            )
        answer = whole[0] if whole else run.answer or ""
        if len(answer) > SUBAGENT_ANSWER_CHARS:
            answer = (
                f"{answer[:SUBAGENT_ANSWER_CHARS]}… [cut: {len(answer):,} characters in all;"
                f" the whole answer is in session {run.session_id}]"
            )
        if run.stop_reason == StopReason.LENGTH:
            # Completed, but the calling model must not take a half answer for a whole one.
            answer += (
                "\n[unfinished: the sub-agent reached its output token limit mid-answer (what"
                f" it wrote is in session {run.session_id}); ask it for less, or in parts]"
            )
        result = SubagentResult(
            answer=answer,
            session_id=run.session_id,
            run_id=run.id,
            agent=agent,
            status=run.status,
            stop_reason=run.stop_reason,
        )
        return CallToolResult(
            content=[TextContent(type="text", text=subagent_text(result))],
            structured_content=result.model_dump(),
        )

    return server
