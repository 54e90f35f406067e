"""Branch summaries for ``session_move_to(summarize=true)``: the model a run would use writes a
summary of the branch being left, and the leaf moves with it. ``summary_model`` is that model,
for ``session_compact`` too."""

from __future__ import annotations

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from mcp_agent.messages import Model
from mcp_agent.providers.base import StreamFn
from mcp_agent.runtime.application import AppState
from mcp_agent.runtime.errors import ModelUnavailable
from mcp_agent.runtime.models import resolve_run_model
from mcp_agent.runtime.start import ResolvedModel, resume_model
from mcp_agent.server.clients import client_channel
from mcp_agent.sessions import Session


async def summary_model(state: AppState, ctx: Context, session: Session) -> tuple[Model, StreamFn]:
    """The model that summarises ``session``: the one a run continuing it would use (the model
    it last ran with, as pi's /compact uses the session's model), else the server's default.
    Raises ModelUnavailable when there is none."""

    # The summary is written while the request waits: the client's model is asked on its stream.
    client = client_channel(ctx.request_context, waited=True)

    def resume() -> ResolvedModel | None:
        return resume_model(session, state.settings.default_model, client, state.models)

    try:
        resolved = await state.offload(resume) or resolve_run_model(
            None, state.settings.default_model, client, state.models
        )
    except ModelUnavailable as error:
        # These tools take no model: say how to choose one for them.
        raise ModelUnavailable(
            f"{error} A summary is written by the session's model (its newest model_change"
            " entry, or the model it last ran with), else the server's default (--model,"
            " MCP_AGENT_MODEL): to choose one, append a model_change entry with session_append"
            ' (e.g. {"type": "model_change", "provider": "openai", "modelId": "gpt-4o-mini"}).'
        ) from None
    return resolved[1], resolved[2]


async def summarize_branch(
    state: AppState, ctx: Context, session: Session, entry_id: str, warnings: list[str]
) -> str | None:
    """Move ``session``'s leaf to ``entry_id`` with a model-written summary of the branch left
    behind; returns the branch summary's id (``warnings`` gets a summary cut at the model's
    output limit). Bad input or a failed summary is a ToolError and nothing is written."""
    if await state.offload(lambda: session.get_entry(entry_id)) is None:
        raise ToolError(
            f"not_found: entry {entry_id} not found in session {session.id} "
            "(list entries with session_get)"
        )
    # Compaction's modules load with the first summary, not with the server.
    from mcp_agent.compaction.branch_summary import summarize_branch as summarize_session_branch
    from mcp_agent.compaction.errors import CompactionError

    model, stream_fn = await summary_model(state, ctx, session)
    try:
        return await summarize_session_branch(
            session,
            entry_id,
            model,
            stream_fn,
            offload=state.runs.session_offload(session.id),
            warnings=warnings,
        )
    except CompactionError as error:
        raise ToolError(f"{error.code}: {error}") from None
