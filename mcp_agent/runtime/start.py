"""Starting a run: the agent from the manifests, the model (the caller's, the session's, the
agent's, the calling run's or the default), the session (new or continued) and the tools from
the hub, all checked before anything is written. Shared by ``agent_run``, the ``subagent`` tool
and the command line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from mcp_agent.manifests import AgentManifest
from mcp_agent.messages import Model
from mcp_agent.providers.base import StreamFn
from mcp_agent.proxy.hub import RUN_META_KEY
from mcp_agent.runtime.application import AppState
from mcp_agent.runtime.errors import (
    DepthLimitReached,
    InvalidRequest,
    ModelUnavailable,
    UnknownAgent,
)
from mcp_agent.runtime.models import ModelOverrides, missing_key, resolve_run_model
from mcp_agent.runtime.runs import EventListener, Run
from mcp_agent.sessions.entries import CWD_CHARS
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.repo import STARTED_BY
from mcp_agent.sessions.row_waits import RowHeld
from mcp_agent.sessions.session import Session
from mcp_agent.tools import AgentTool
from mcp_agent.wire import one_line

if TYPE_CHECKING:
    from mcp_agent.providers.sampling import ClientChannel
    from mcp_agent.runtime.session_agent import SessionAgent

# The calling run's session id, from a tool call's _meta: as long as a path may be (pi names a
# parent session by its file).
PARENT_SESSION_CHARS = CWD_CHARS
# The calling run's id, as long as a run id may be (ours are 12 characters; another server's
# may differ): it is said as the new run's parentRunId.
RUN_ID_CHARS = 100
# The built-in tool that starts a sub-agent (``runtime.builtin``): not offered to a run at the
# depth limit, where every call of it would be refused.
SUBAGENT_TOOL = "subagent"
# (the name a run gives its model, the model, its stream function)
ResolvedModel = tuple[str, Model, StreamFn]


def _levels(depth: int, limit: int) -> str:
    """The depth limit's figures, and who sets it."""
    return (
        f"would be level {depth}, the limit is {limit} (the server's operator sets it: --max-depth)"
    )


def _at_depth_limit(depth: int, limit: int) -> str:
    """What a run at the depth limit, not offered the sub-agent tool, is told calling it."""
    return (
        f"Tool {SUBAGENT_TOOL} is not available to this run: it is at the sub-agent depth "
        f"limit (a sub-agent of it {_levels(depth, limit)}). Do the task yourself with the "
        "tools you have."
    )


def find_agent(state: AppState, name: str | None) -> AgentManifest:
    agent = state.agents.get(name or "default")
    if agent is None:
        known = ", ".join(sorted(state.agents)) or "(none)"
        raise UnknownAgent(f"unknown agent {name!r}; known agents: {known} (see agent_list)")
    return agent


def session_agent(
    state: AppState, session: Session, notes: list[str] | None = None
) -> AgentManifest:
    """The agent a session was started with (its header's ``metadata.agent``, written when a
    run or a sub-agent made it), when the manifests still define it; else ``default``, and
    ``notes`` gets why (as for a model that cannot be restored: another system prompt and
    other tools must not come in silence)."""
    metadata = session.header.metadata
    recorded = metadata.get("agent") if isinstance(metadata, Mapping) else None
    known = state.agents.get(recorded) if isinstance(recorded, str) else None
    if known is None and isinstance(recorded, str) and notes is not None:
        notes.append(
            f"the session was started with the agent {one_line(repr(recorded), 200)}, which "
            "the manifests no longer define: this run is the default agent"
        )
    return known or find_agent(state, None)


def run_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The calling run's context from a tool call's ``_meta``, when the caller is a run of an
    agent (nesting); empty otherwise."""
    found = meta.get(RUN_META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(found, dict):
        return {}
    depth = found.get("depth", 0)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise InvalidRequest(
            f"_meta[{RUN_META_KEY!r}].depth must be a whole number >= 0 (the calling run's "
            f"nesting level), not {depth!r}"
        )
    # It becomes the new session's parentSession, a string in pi's header: anything else was
    # stored as it came (an export our own import refuses) or failed the run with no word why.
    _check_text(found, "session_id", "the calling run's session id", PARENT_SESSION_CHARS)
    _check_text(found, "run_id", "the calling run's id", RUN_ID_CHARS)
    return found


def _check_text(found: Mapping[str, Any], key: str, what: str, max_chars: int) -> None:
    """InvalidRequest unless ``found[key]`` is absent or a string of 1 to ``max_chars``."""
    value = found.get(key)
    if value is None or (isinstance(value, str) and 0 < len(value) <= max_chars):
        return
    shown = repr(value[:80] if isinstance(value, str) else value)[:90]
    raise InvalidRequest(
        f"_meta[{RUN_META_KEY!r}].{key} must be {what} (a string of 1 to {max_chars:,}"
        f" characters), not {shown}"
    )


def child_depth(meta: Mapping[str, Any]) -> int:
    """The nesting level of a run started by a tool call: one below the calling run's, or 0
    for a run that no agent started."""
    return int(meta.get("depth", 0)) + 1 if meta else 0


async def start_run(
    state: AppState,
    *,
    prompt: str,
    session_id: str | None,
    agent_name: str | None,
    model: str | None,
    depth: int,
    client_channel: ClientChannel | None = None,
    parent_session: str | None = None,
    listener: EventListener | None = None,
    inherited: ResolvedModel | None = None,
    client: object | None = None,
    parent_run_id: str | None = None,
) -> Run:
    """Start an agent run. ``client_channel`` is the MCP client connection, for its model
    (sampling); ``inherited`` is the calling run's model, used when nothing else names one;
    ``client`` identifies the caller for the per-client run limit; ``parent_run_id`` is the
    run whose tool call asks for this one. Every session read and write goes through
    ``state.offload``."""
    limit = state.settings.max_subagent_depth
    if depth > limit:
        raise DepthLimitReached(f"sub-agent depth limit reached: this {_levels(depth, limit)}")
    if not prompt.strip():
        raise InvalidRequest("prompt is empty")
    # Named, it is checked before any I/O; left out, a continued session keeps its own agent
    # (its system prompt and tools), as it keeps its model: a sub-agent's session continued
    # must not go on as another agent.
    named = find_agent(state, agent_name) if agent_name is not None else None
    state.runs.check_limits(client)  # before anything is written; start checks again
    warnings: list[str] = []  # the run's, said in its status and by the command line

    def prepare() -> tuple[Session, ResolvedModel, bool, AgentManifest]:
        existing: Session | None = None
        manifest = named or find_agent(state, None)
        if session_id is not None:
            existing = state.repo.open(session_id)
            state.runs.ensure_idle(existing.id)
            manifest = named or session_agent(state, existing, warnings)
        resolved = None
        noted = len(warnings)
        if model is None and existing is not None:
            resolved = resume_model(
                existing, state.settings.default_model, client_channel, state.models, warnings
            )
        if resolved is None and model is None and manifest.model is None:
            resolved = inherited
        # Every refusal comes before a new session is created: a failed start writes nothing.
        resolved = resolved or resolve_run_model(
            model or manifest.model, state.settings.default_model, client_channel, state.models
        )
        name, chosen, _ = resolved
        if len(warnings) > noted:  # the session's own model could not be restored
            warnings[-1] += f"; this run uses {name}"
        # A model whose key is not set could only fail: refused here, as the command line does,
        # rather than writing the prompt and an error into the session (a new one, or the
        # caller's). The server's own names (tests', embedders') need no key.
        if name not in (state.models or {}) and (env := missing_key(chosen.provider)):
            raise ModelUnavailable(f"{name} needs an API key: set {env} where the server runs")
        if existing is not None:
            return existing, resolved, False, manifest
        created = state.repo.create(
            name=None,
            cwd=parent_cwd(state, parent_session),
            parent_session=parent_session,
            metadata={
                "agent": manifest.name,
                # A sub-agent's session says which session and run started it: it is no fork.
                **(
                    {STARTED_BY: {"sessionId": parent_session, "runId": parent_run_id}}
                    if parent_session is not None
                    else {}
                ),
            },
        )
        return created, resolved, True, manifest

    session, resolved, created, manifest = await state.offload(prepare)
    try:
        if created:
            state.created(session.id)
        run = await _start(
            state,
            session,
            resolved,
            manifest,
            prompt,
            depth,
            listener,
            client,
            warnings,
            parent_run_id,
        )
        # Its sub-agents ask the client's model there too (the agent's manifest may name it):
        # they run within its tool call, so a waited run's request is still open.
        run.client_channel = client_channel
        return run
    except BaseException:
        if created:  # refused or cancelled before the prompt was stored: leave nothing
            with anyio.CancelScope(shield=True):
                await discard_if_empty(state, session.id)
        raise


def parent_cwd(state: AppState, parent_session: str | None) -> str | None:
    """The working directory of the session a sub-agent's session is made for: the child works
    where its parent does (and in pi's layout its file goes beside the parent's, where
    ``pi --resume`` finds it), not where the server was started. None (the server's) when the
    parent is in another process's store, or its cwd could not be a new session's."""
    if parent_session is None:
        return None
    try:
        cwd = state.repo.open(parent_session).header.cwd
    except SessionError:
        return None
    return cwd if cwd and len(cwd) <= CWD_CHARS and "\x00" not in cwd else None


async def discard_if_empty(state: AppState, session_id: str) -> None:
    """Delete a session a start created and could not use, unless something was stored in it
    since or a run of it still goes on. In the turns of the session's writes, as any write
    of it: its row held by another transaction while this server's waits for held rows are
    all taken (sessions.row_waits), the delete waits for its turn without a thread and tries
    again, where on a thread of its own it was refused at once and the session left behind."""
    try:
        deleted = await state.runs.session_offload(session_id)(
            lambda: _delete_if_empty(state, session_id)
        )
    except SessionError:  # busy past the write's bound: leave it be
        return
    if deleted:
        state.session_deleted(session_id)


def _delete_if_empty(state: AppState, session_id: str) -> bool:
    """Delete the session unless something was stored in it or a run of it goes on (True:
    deleted). ``RowHeld`` is raised, for the write turns to try again."""
    try:
        state.runs.ensure_idle_here(session_id)
        if state.repo.open(session_id).stats().entry_count:
            return False
        state.repo.delete(session_id)
    except RowHeld:
        raise
    except SessionError:  # SessionBusy too
        return False  # gone already, or taken: leave it be
    return True


async def _start(
    state: AppState,
    session: Session,
    resolved: ResolvedModel,
    manifest: AgentManifest,
    prompt: str,
    depth: int,
    listener: EventListener | None,
    client: object | None,
    warnings: list[str],
    parent_run_id: str | None,
) -> Run:
    """The run of ``prompt`` in ``session``, once every check has passed; ``warnings`` are
    the run's so far."""
    name, chosen, stream_fn = resolved
    hub = state.hub
    # The run has the session to itself here: its reads and writes take the turns of the
    # session's writes, so that writes to a held session wait without a worker thread.
    offload = state.runs.session_offload(session.id)

    async def build_agent(run_id: str) -> tuple[SessionAgent, str]:
        meta = {"session_id": session.id, "run_id": run_id, "depth": depth, "agent": manifest.name}

        async def load_tools() -> list[AgentTool]:
            # In the run's own task, once the run is under way: a downstream server's start
            # (up to its time limit) must not hold up agent_run(wait=false)'s answer.
            errors: list[str] = []
            tools = await hub.tools(manifest, run_meta=meta, on_error=errors.append)
            warnings.extend(errors)  # the run's: its status and the command line say them
            if errors:
                unnoted = list(errors)

                def note_errors() -> None:
                    # Each once: a try given back its thread (a held row) goes on from there.
                    while unnoted:
                        session.append_custom("tool_server_error", {"error": unnoted[0]})
                        del unnoted[0]

                await offload(note_errors)
            return tools

        def build() -> SessionAgent:
            # The agent's modules (loop, compaction) load with the first run: a server's start
            # and its first answer need none of them.
            from mcp_agent.compaction.compact import CompactionSettings
            from mcp_agent.runtime.session_agent import RetrySettings, SessionAgent

            agent = SessionAgent.from_session(
                session,
                stream_fn=stream_fn,
                model=chosen,
                resolve_model=lambda provider, model_id: (
                    chosen if (provider, model_id) == (chosen.provider, chosen.id) else None
                ),
                load_tools=load_tools,
                system_prompt=manifest.system_prompt,
                max_turns=manifest.max_turns,
                compaction=CompactionSettings(),
                retry=RetrySettings(
                    enabled=state.settings.model_retries > 0,
                    max_retries=state.settings.model_retries,
                    base_delay=state.settings.model_retry_delay,
                ),
                offload=offload,
                withheld_tools=(
                    {SUBAGENT_TOOL: _at_depth_limit(depth + 1, state.settings.max_subagent_depth)}
                    if depth >= state.settings.max_subagent_depth
                    else None
                ),
                # A branch that sets no level yet runs at the manifest's.
                default_thinking_level=manifest.thinking_level,
            )
            if agent.state.model.ref != chosen.ref:
                agent.set_model(chosen)  # idle: recorded at once, on this worker thread
            return agent

        return await offload(build), name

    run = await state.runs.start(
        session=session,
        manifest=manifest,
        prompt=prompt,
        build_agent=build_agent,
        depth=depth,
        listener=listener,
        client=client,
        parent_run_id=parent_run_id,
        warnings=warnings,  # filled as the run lists its tools
    )
    return run


def resume_model(
    session: Session,
    default: str | None,
    client_channel: ClientChannel | None,
    overrides: ModelOverrides | None,
    notes: list[str] | None = None,
) -> ResolvedModel | None:
    """The model a session last used, so that continuing it keeps the model; None when the
    session names none or it cannot be used here (then the agent's or the default applies,
    and ``notes`` gets why, to be said: pi's "Could not restore model")."""
    recorded = session.build_context().model if session.leaf_id is not None else None
    if not recorded:
        return None
    ref = f"{recorded['provider']}:{recorded['modelId']}"
    for name in (*(overrides or {}), default):
        if name is None:
            continue
        try:
            found = resolve_run_model(name, None, client_channel, overrides)
        except ModelUnavailable:
            continue
        if found[1].ref == ref:
            return found
    try:
        found = resolve_run_model(ref, None, client_channel, overrides)
    except ModelUnavailable as error:
        why = str(error)
    else:
        # As pi, a model whose key is not set is not restored: the run goes on with another.
        if (env := missing_key(found[1].provider)) is None:
            return found
        why = f"its API key is not set ({env})"
    if notes is not None:
        notes.append(f"could not restore the model the session last used, {ref}: {why}")
    return None
