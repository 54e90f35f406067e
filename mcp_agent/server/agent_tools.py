"""The agent tools: run an agent in a session (waiting with progress, or detached), and
watch, steer, queue for and cancel runs."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from mcp_agent.agent import Agent, RetrySettings
from mcp_agent.events import AgentEvent, describe_event
from mcp_agent.manifests import AgentManifest
from mcp_agent.proxy.hub import RUN_META_KEY
from mcp_agent.server.errors import tool_errors
from mcp_agent.server.models import resolve_run_model
from mcp_agent.server.runs import Run
from mcp_agent.server.schemas import AgentInfo, AgentList, QueueResult, RunInfo, RunList
from mcp_agent.server.session_tools import READ_ONLY, WRITES
from mcp_agent.server.state import AppState, app_state
from mcp_agent.sessions import Session
from mcp_agent.sessions.compaction import CompactionSettings


def find_agent(state: AppState, name: str | None) -> AgentManifest:
    agent = state.agents.get(name or "default")
    if agent is None:
        known = ", ".join(sorted(state.agents)) or "(none)"
        raise ToolError(f"unknown agent {name!r}; known agents: {known} (see agent_list)")
    return agent


def run_meta(ctx: Context | None) -> dict[str, Any]:
    """The calling run's context, when this server is a tool of another agent (nesting)."""
    meta = (ctx.request_context.meta or {}) if ctx is not None else {}
    found = meta.get(RUN_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(found, dict):
        return {}
    depth = found.get("depth", 0)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ToolError(
            f"_meta[{RUN_META_KEY!r}].depth must be a whole number >= 0 (the calling run's "
            f"nesting level), not {depth!r}"
        )
    return found


def child_depth(meta: dict[str, Any]) -> int:
    """The nesting level of a run started by a tool call: one below the calling run's, or 0
    for a run that no agent started."""
    return int(meta.get("depth", 0)) + 1 if meta else 0


async def start_run(
    state: AppState,
    ctx: Context | None,
    *,
    prompt: str,
    session_id: str | None,
    agent_name: str | None,
    model: str | None,
    depth: int,
    parent_session: str | None = None,
    listener: Any = None,
    inherited: tuple[str, Any, Any] | None = None,
) -> Run:
    """Start an agent run (shared by agent_run and the subagent tool). ``inherited`` (name,
    model, stream function) is the calling run's model, used when nothing else names one."""
    assert state.runs is not None and state.hub is not None
    limit = state.settings.max_subagent_depth
    if depth > limit:
        raise ToolError(
            f"sub-agent depth limit reached: this would be level {depth}, the limit is {limit} "
            "(raise it with --max-depth)"
        )
    if not prompt.strip():
        raise ToolError("prompt is empty")
    manifest = find_agent(state, agent_name)
    existing: Session | None = None
    if session_id is not None:
        with tool_errors():
            existing = state.repo.open(session_id)
        state.runs.ensure_idle(existing.id)
    client_session = ctx.session if ctx is not None else None
    overrides = state.extra.get("models")
    resolved = None
    if model is None and existing is not None:
        resolved = resume_model(existing, state.settings.default_model, client_session, overrides)
    if resolved is None and model is None and manifest.model is None:
        resolved = inherited
    # Every refusal comes before a new session is created: a failed start writes nothing.
    name, chosen, stream_fn = resolved or resolve_run_model(
        model or manifest.model, state.settings.default_model, client_session, overrides
    )
    if existing is None:
        with tool_errors():
            session = state.repo.create(
                name=None, parent_session=parent_session, metadata={"agent": manifest.name}
            )
        state.notifier.list_changed()
    else:
        session = existing
    hub = state.hub

    async def build_agent(run_id: str) -> tuple[Agent, str]:
        errors: list[str] = []
        meta = {"session_id": session.id, "run_id": run_id, "depth": depth, "agent": manifest.name}
        tools = await hub.tools(manifest, run_meta=meta, on_error=errors.append)
        options: dict[str, Any] = {}
        if session.leaf_id is None:  # nothing on the branch yet: the manifest's level applies
            options["thinking_level"] = manifest.thinking_level
        agent = Agent.from_session(
            session,
            stream_fn=stream_fn,
            model=chosen,
            resolve_model=lambda provider, model_id: (
                chosen if (provider, model_id) == (chosen.provider, chosen.id) else None
            ),
            tools=tools,
            system_prompt=manifest.system_prompt,
            max_turns=manifest.max_turns,
            compaction=CompactionSettings(),
            retry=RetrySettings(
                enabled=state.settings.model_retries > 0,
                max_retries=state.settings.model_retries,
                base_delay=state.settings.model_retry_delay,
            ),
            **options,
        )
        if agent.state.model.ref != chosen.ref:
            agent.set_model(chosen)
        for error in errors:
            session.append_custom("tool_server_error", {"error": error})
        return agent, name

    return await state.runs.start(
        session=session,
        manifest=manifest,
        prompt=prompt,
        build_agent=build_agent,
        depth=depth,
        listener=listener,
    )


def resume_model(
    session: Session, default: str | None, client_session: Any, overrides: Any
) -> tuple[str, Any, Any] | None:
    """The model a session last used, so that continuing it keeps the model; None when the
    session names none or it cannot be used here (then the agent's or the default applies)."""
    recorded = session.build_context().model if session.leaf_id is not None else None
    if not recorded:
        return None
    ref = f"{recorded['provider']}:{recorded['modelId']}"
    for name in (*(overrides or {}), default):
        if name is None:
            continue
        try:
            found = resolve_run_model(name, None, client_session, overrides)
        except ToolError:
            continue
        if found[1].ref == ref:
            return found
    try:
        return resolve_run_model(ref, None, client_session, overrides)
    except ToolError:
        return None


def progress_reporter(ctx: Context, prefix: str = "") -> Any:
    """A run listener that turns each agent event into a progress notification."""
    count = 0

    async def report(event: AgentEvent) -> None:
        nonlocal count
        count += 1
        await ctx.report_progress(count, None, f"{prefix}{event.type}: {describe_event(event)}")

    return report


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
        assert state.runs is not None
        meta = run_meta(ctx)
        depth = child_depth(meta)
        parent = meta.get("session_id") if meta and session_id is None else None
        run = await start_run(
            state,
            ctx,
            prompt=prompt,
            session_id=session_id,
            agent_name=agent,
            model=model,
            depth=depth,
            parent_session=parent,
            listener=progress_reporter(ctx) if wait else None,
        )
        if wait:
            await state.runs.wait(run)
            run.listeners.clear()
        return run.info()

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
        assert state.runs is not None
        run = state.runs.get(run_id)
        if wait_seconds and run.status == "running":
            import anyio

            with anyio.move_on_after(wait_seconds):
                await run.done.wait()
        return run.info()

    @server.tool(annotations=WRITES)
    async def agent_cancel(ctx: Context, run_id: str) -> RunInfo:
        """Abort a run; the session records an aborted assistant message and stays consistent."""
        state = app_state(ctx)
        assert state.runs is not None
        run = state.runs.get(run_id)
        if run.status == "running":
            run.abort("cancelled with agent_cancel")
            await run.done.wait()
        return run.info()

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
        assert state.runs is not None
        runs = sorted(state.runs.runs.values(), key=lambda r: r.started, reverse=True)
        return RunList(runs=[run.info() for run in runs])

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
    assert state.runs is not None
    run = state.runs.get(run_id)
    if run.status != "running":
        raise ToolError(f"run {run_id} has ended ({run.status}); start a new one with agent_run")
    return run
