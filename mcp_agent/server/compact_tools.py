"""The session_compact tool: summarise the older part of a session's current branch into a
compaction entry (the old entries stay in the tree), as pi's /compact does."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from mcp_agent.server.lifespan import app_state
from mcp_agent.server.schemas import CompactionAnswer
from mcp_agent.server.session_tools import WRITES, SessionId
from mcp_agent.server.summaries import summary_model
from mcp_agent.server.tool_errors import tool_errors
from mcp_agent.sessions import Session


def register(server: MCPServer) -> None:
    @server.tool(annotations=WRITES)
    async def session_compact(
        ctx: Context,
        session_id: SessionId,
        instructions: Annotated[
            str | None,
            Field(description="what the summary should focus on, in addition; null: nothing more"),
        ] = None,
    ) -> CompactionAnswer:
        """Compact a session: the model summarises the older part of the current branch (goal,
        progress, decisions, next steps, files touched) and the context continues from that
        summary plus the recent entries. Nothing is deleted; the old entries stay in the tree.
        Returns the compaction's id, the tokens before and after, and the summary."""
        # Compaction's modules load with the first compaction, not with the server.
        from mcp_agent.compaction.compact import compact
        from mcp_agent.compaction.cut_points import prepare_compaction

        state = app_state(ctx)

        def check() -> Session:
            state.runs.ensure_idle(session_id)
            session = state.repo.open(session_id)
            # Refuse before choosing a model what pi refuses too: an empty branch, or one
            # that ends in a compaction.
            prepare_compaction(session.get_branch(), 0, context_messages=[], manual=True)
            return session

        with tool_errors():
            session = await state.offload(check)
            model, stream_fn = await summary_model(state, ctx, session)
        # No run may start in the session while the model writes the summary.
        with tool_errors():
            async with state.runs.hold(session_id, "session_compact"):
                # CompactionError is a SessionError: its code and text go through.
                result = await compact(
                    session,
                    model,
                    stream_fn,
                    instructions=instructions,
                    offload=state.runs.session_offload(session_id),
                    manual=True,
                )
        return CompactionAnswer(
            session_id=session_id,
            compaction_id=result.entry_id,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            summary=result.summary,
            warnings=result.warnings,
        )
