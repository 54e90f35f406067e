"""The session tools: create, list, get, delete, append, move, fork, context, stats, export,
import. Each answers bad input with a tool error that says what was wrong; nothing is written
then."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_agent.server.lifespan import app_state
from mcp_agent.server.schemas import (
    AppendResult,
    ContextResult,
    DeleteResult,
    ExportResult,
    MoveResult,
    SessionInfo,
    SessionListResult,
    SessionView,
    StatsResult,
)
from mcp_agent.server.tool_errors import tool_errors
from mcp_agent.sessions import Session, SessionError
from mcp_agent.sessions.repo import SessionRepo, SessionSummary

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

SessionId = Annotated[str, Field(description="the session's id (from session_list)")]


def session_info(summary: SessionSummary, leaf_id: str | None = None) -> SessionInfo:
    return SessionInfo(
        id=summary.id,
        name=summary.name,
        cwd=summary.cwd,
        created=summary.created,
        modified=summary.modified,
        entry_count=summary.entry_count,
        message_count=summary.message_count,
        first_user_message=summary.first_user_message,
        parent_session=summary.parent_session,
        leaf_id=leaf_id,
        uri=f"session://{summary.id}",
    )


def describe_session(repo: SessionRepo, session: Session) -> SessionInfo:
    return session_info(repo.summary(session.id), session.leaf_id)


def register(server: MCPServer) -> None:
    @server.tool(annotations=WRITES)
    async def session_create(
        ctx: Context,
        name: Annotated[str | None, Field(description="a name to show in listings")] = None,
        cwd: Annotated[str | None, Field(description="working directory to record")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="free-form JSON")] = None,
    ) -> SessionInfo:
        """Create an empty session."""
        state = app_state(ctx)

        def create() -> SessionInfo:
            session = state.repo.create(name=name, cwd=cwd, metadata=metadata)
            return describe_session(state.repo, session)

        with tool_errors():
            info = await state.offload(create)
        state.list_changed()
        return info

    @server.tool(annotations=READ_ONLY)
    async def session_list(
        ctx: Context,
        query: Annotated[str | None, Field(description="words to search for in messages")] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
    ) -> SessionListResult:
        """List sessions, newest first, optionally searching their text."""
        state = app_state(ctx)
        with tool_errors():
            page = await state.offload(
                lambda: state.repo.list(query=query, limit=limit, cursor=cursor)
            )
        return SessionListResult(
            sessions=[session_info(item) for item in page.items], next_cursor=page.next_cursor
        )

    @server.tool(annotations=READ_ONLY)
    async def session_get(
        ctx: Context,
        session_id: SessionId,
        view: Literal["branch", "tree", "entries"] = "branch",
    ) -> SessionView:
        """Read a session: the current branch (root first), the whole tree, or every entry."""
        state = app_state(ctx)

        def read() -> SessionView:
            session = state.repo.open(session_id)
            info = describe_session(state.repo, session)
            result = SessionView(session=info, view=view, leaf_id=session.leaf_id)
            if view == "branch":
                result.entries = [e.to_json_dict() for e in session.get_branch()]
            elif view == "entries":
                result.entries = [e.to_json_dict() for e in session.get_entries()]
            else:
                result.tree = [node.to_json_dict() for node in session.tree()]
            return result

        with tool_errors():
            return await state.offload(read)

    @server.tool(annotations=DESTROYS)
    async def session_delete(ctx: Context, session_id: SessionId) -> DeleteResult:
        """Delete a session and all its entries."""
        state = app_state(ctx)

        def delete() -> None:
            state.runs.ensure_idle(session_id)
            state.repo.delete(session_id)

        with tool_errors(), state.runs.writing(session_id):
            await state.offload(delete)
        state.list_changed()
        return DeleteResult(session_id=session_id, deleted=True)

    @server.tool(annotations=WRITES)
    async def session_append(
        ctx: Context,
        session_id: SessionId,
        entry: Annotated[
            dict[str, Any],
            Field(
                description=(
                    "an entry in pi v3 form without id/parentId/timestamp, e.g. "
                    '{"type":"message","message":{"role":"user","content":"hi"}}, '
                    '{"type":"label","targetId":"ab12cd34","label":"good"}, '
                    '{"type":"session_info","name":"My session"}, '
                    '{"type":"custom","customType":"note","data":{}}, '
                    '{"type":"model_change","provider":"openai","modelId":"gpt-4o"}'
                )
            ),
        ],
    ) -> AppendResult:
        """Append an entry at the session's leaf; it becomes the new leaf."""
        state = app_state(ctx)
        with tool_errors(), state.runs.writing(session_id):
            entry_id = await state.offload(lambda: state.repo.open(session_id).append_entry(entry))
        # Every appendable entry becomes the leaf.
        return AppendResult(session_id=session_id, entry_id=entry_id, leaf_id=entry_id)

    @server.tool(annotations=WRITES)
    async def session_move_to(
        ctx: Context,
        session_id: SessionId,
        entry_id: Annotated[
            str | None, Field(description="the entry to make the leaf; null: before the first")
        ],
        summary: Annotated[
            str | None, Field(description="a summary of the branch being left, to record")
        ] = None,
        summarize: Annotated[
            bool, Field(description="have the model summarise the branch being left")
        ] = False,
    ) -> MoveResult:
        """Move the session's leaf (switch branch); the next append starts a new branch there."""
        state = app_state(ctx)
        if summary is not None and summarize:
            raise ToolError("give either summary or summarize=true, not both")
        if summarize and entry_id is None:
            raise ToolError("summarize needs an entry_id to move to")

        def open_idle() -> Session:
            state.runs.ensure_idle(session_id)
            return state.repo.open(session_id)

        def move() -> tuple[str | None, str | None]:
            session = open_idle()
            moved = session.move_to(entry_id, {"summary": summary} if summary is not None else None)
            return moved, session.leaf_id

        with tool_errors():
            if summarize:
                assert entry_id is not None
                from mcp_agent.server.summaries import summarize_branch

                session = await state.offload(open_idle)
                async with state.runs.hold(session_id, "session_move_to (summarize)"):
                    branch_summary_id = await summarize_branch(state, ctx, session, entry_id)
                leaf_id = await state.offload(lambda: session.leaf_id)
            else:
                with state.runs.writing(session_id):
                    branch_summary_id, leaf_id = await state.offload(move)
        return MoveResult(
            session_id=session_id, leaf_id=leaf_id, branch_summary_id=branch_summary_id
        )

    @server.tool(annotations=WRITES)
    async def session_fork(
        ctx: Context,
        session_id: SessionId,
        entry_id: Annotated[
            str | None, Field(description="fork at/before this entry; null: the whole branch")
        ] = None,
        position: Annotated[
            Literal["before", "at"],
            Field(description="'before' a user message (to re-ask it), or 'at' any entry"),
        ] = "before",
    ) -> SessionInfo:
        """Copy this session (all of it, or the path to entry_id) into a new session whose
        header names this one as its parent."""
        state = app_state(ctx)

        def fork() -> SessionInfo:
            return describe_session(state.repo, state.repo.fork(session_id, entry_id, position))

        with tool_errors():
            info = await state.offload(fork)
        state.list_changed()
        return info

    @server.tool(annotations=READ_ONLY)
    async def session_context(ctx: Context, session_id: SessionId) -> ContextResult:
        """The messages as the model would get them, with model, thinking level, active tools."""
        state = app_state(ctx)
        with tool_errors():
            context = await state.offload(lambda: state.repo.open(session_id).build_context())
        return ContextResult(
            session_id=session_id,
            messages=[m.to_json_dict() for m in context.messages],
            thinking_level=context.thinking_level,
            model=context.model,
            active_tool_names=context.active_tool_names,
        )

    @server.tool(annotations=READ_ONLY)
    async def session_stats(ctx: Context, session_id: SessionId) -> StatsResult:
        """Counts over the whole tree: entries, messages by role, tokens, cost, branches."""
        state = app_state(ctx)
        with tool_errors():
            stats = await state.offload(lambda: state.repo.open(session_id).stats())
        return StatsResult(session_id=session_id, stats=stats.to_json_dict())

    @server.tool(annotations=READ_ONLY)
    async def session_export(ctx: Context, session_id: SessionId) -> ExportResult:
        """The session as a pi v3 JSONL file (header line, then one entry per line)."""
        state = app_state(ctx)
        with tool_errors():
            text = await state.offload(lambda: state.repo.export_jsonl(session_id))
        return ExportResult(session_id=session_id, jsonl=text, lines=text.count("\n"))

    @server.tool(annotations=WRITES)
    async def session_import(
        ctx: Context,
        jsonl: Annotated[str, Field(description="a pi session file (version 1, 2 or 3)")],
    ) -> SessionInfo:
        """Import a pi session file as a new session (older versions are migrated)."""
        state = app_state(ctx)
        if not jsonl.lstrip().startswith("{"):
            # Never read a path named by a client: the server's files are not theirs to read.
            raise ToolError("jsonl must be the content of a session file (JSON lines), not a path")

        def import_() -> SessionInfo:
            try:
                session = state.repo.import_jsonl(jsonl)
            except SessionError as error:
                if error.code == "conflict":
                    raise SessionError(
                        "conflict", f"{error} (export it, or delete the existing session first)"
                    ) from None
                raise
            return describe_session(state.repo, session)

        with tool_errors():
            info = await state.offload(import_)
        state.list_changed()
        return info
