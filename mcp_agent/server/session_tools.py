"""The session tools: create, list, get, search, delete, append, move, fork, context, stats,
export, import. Each answers bad input with a tool error that says what was wrong; nothing is written
then. Lists come in pages (``paging``): the newest last, about 64 KB at most by default."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from mcp_types import CallToolResult
from pydantic import Field
from pydantic_core import to_json

from mcp_agent.server import spliced
from mcp_agent.server.entry_inputs import EntryInput
from mcp_agent.server.entry_pieces import (
    MAX_OFFSET,
    MAX_PIECE_CHARS,
    PIECE_BYTES,
    check_piece_arguments,
    entry_piece,
)
from mcp_agent.server.lifespan import app_state
from mcp_agent.server.paging import (
    ANSWER_BYTES,
    CURSOR_DESCRIPTION,
    EXPORT_LIMIT_DESCRIPTION,
    LIMIT_DESCRIPTION,
    MAX_LIMIT,
    PageOf,
    check_limit,
    json_size,
    newest_page,
    utf8_size,
)
from mcp_agent.server.schemas import (
    AppendResult,
    CompactAnswer,
    ContextAnswer,
    ContextResult,
    DeleteResult,
    ExportAnswer,
    ExportResult,
    ImportResult,
    MoveResult,
    NewSession,
    SessionInfo,
    SessionListResult,
    SessionSearchResult,
    SessionView,
    SessionViewAnswer,
    StartedBy,
    StatsResult,
    answer_result,
    compact_answer,
    compact_result,
)
from mcp_agent.server.search_hits import fitting_hits, listed_with_hits
from mcp_agent.server.session_reads import (
    compact,
    context_page,
    entries_from,
    entries_page,
    export_page,
    kept_whole_context,
    outline_paged_as,
    outline_rows,
    shown_settings,
    tree_page,
    view_entries,
    view_paged_as,
)
from mcp_agent.server.tool_errors import GIVEN, tool_errors
from mcp_agent.sessions import Session
from mcp_agent.sessions.entries import (
    CWD_CHARS,
    ENTRY_ID_CHARS,
    NAME_CHARS,
    clip_long,
    is_session_id,
    shown_time,
)
from mcp_agent.sessions.hits import MAX_HITS
from mcp_agent.sessions.pi import is_jsonl_text
from mcp_agent.sessions.repo import (
    SessionRepo,
    SessionSummary,
    linked_origin,
    mark_linked,
    unreadable_note,
)
from mcp_agent.sessions.words import query_words, search_words
from mcp_agent.wire import loads_json

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

SessionId = Annotated[str, Field(description="the session's id (from session_list)"), GIVEN]
Limit = Annotated[int | None, Field(ge=0, le=MAX_LIMIT, description=LIMIT_DESCRIPTION)]
Cursor = Annotated[str | None, Field(description=CURSOR_DESCRIPTION)]


def session_info(
    summary: SessionSummary, started_by: dict[str, str | None] | None = None
) -> SessionInfo:
    """The session as answers give it; ``started_by``: a sub-agent's origin where the header
    does not say it (``linked_origin``)."""
    return SessionInfo(**session_fields(summary, started_by))


def session_fields(
    summary: SessionSummary, started_by: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """The fields of ``session_info``, for a model that adds some (``ListedSession``)."""
    origin = started_by or summary.started_by
    return dict(
        id=summary.id,
        # A name or cwd from before the bounds of session_create, or from a pi file: cut.
        name=None if summary.name is None else clip_long(summary.name, NAME_CHARS),
        cwd=clip_long(summary.cwd, CWD_CHARS),
        created=shown_time(summary.created),
        modified=shown_time(summary.modified),
        entry_count=summary.entry_count,
        message_count=summary.message_count,
        first_user_message=summary.first_user_message,
        # Ids from a pi file's header: any text (one of a megabyte came whole in every page).
        parent_session=_clipped_id(summary.parent_session),
        started_by=None
        if origin is None
        else StartedBy(
            session_id=str(_clipped_id(str(origin["sessionId"]))),
            run_id=_clipped_id(origin["runId"]),
        ),
        leaf_id=summary.leaf_id,
        uri=f"session://{summary.id}",
    )


def session_json(summary: SessionSummary) -> str:
    """``session_info(summary).model_dump_json()``, the same text, for a listing's items:
    the fields as ``session_fields`` makes them (texts, counts, None) need no check, and
    checking them into the model cost more than the rest of the item (about three quarters of
    its CPU: the model's check and dump against a dump of the dict, measured in process)."""
    return to_json(session_wire(summary)).decode()


def session_wire(summary: SessionSummary) -> dict[str, Any]:
    """The fields of ``session_info(summary)`` as its JSON has them (its names on the wire, in
    its order), unchecked (see ``session_json``)."""
    fields = session_fields(summary)
    started_by = fields["started_by"]
    if started_by is not None:
        fields["started_by"] = {"sessionId": started_by.session_id, "runId": started_by.run_id}
    return {camel: fields[name] for name, camel in _CAMEL.items()}


# session_fields' names (SessionInfo's, in its order) as the wire has them.
_CAMEL = {name: field.alias or name for name, field in SessionInfo.model_fields.items()}


def _clipped_id(value: str | None) -> str | None:
    return None if value is None else clip_long(value, ENTRY_ID_CHARS)


# What a listed session costs besides its name, cwd, first message and parent: ids, times,
# counts, keys.
LISTED_BYTES = 400


def fitting(items: list[SessionSummary]) -> int:
    """How many of ``items`` (at least one) a page of about ``ANSWER_BYTES`` lists, counted
    from the bytes of their texts (no JSON made; a name is cut to ``NAME_CHARS``, a cwd to
    ``CWD_CHARS``, a parent to ``ENTRY_ID_CHARS``, at most four bytes a character)."""
    used = 0
    for count, item in enumerate(items):
        name = min(utf8_size(item.name or ""), 4 * NAME_CHARS)
        cost = LISTED_BYTES + name + min(utf8_size(item.cwd), 4 * CWD_CHARS)
        cost += utf8_size(item.first_user_message or "")
        cost += min(utf8_size(item.parent_session or ""), 4 * ENTRY_ID_CHARS)
        if count and used + cost > ANSWER_BYTES:
            return count
        used += cost
    return len(items)


def describe_session(repo: SessionRepo, session: Session) -> NewSession:
    # The listing row holds the leaf: one read (one statement in the SQL backends).
    return NewSession(**session_fields(repo.summary(session.id)))


def outline_view(
    session: Session,
    info: SessionInfo,
    entry_id: str | None,
    cursor: str | None,
    most: int | None,
    splice: bool = False,
) -> CallToolResult:
    rows = outline_rows(session, entry_id)
    paged_as = outline_paged_as(session, entry_id, rows)
    page = newest_page(rows, cursor, most, json_size, paged_as=paged_as)
    answer = SessionView(
        session=info,
        view="outline",
        leaf_id=info.leaf_id,
        total=page.total,
        truncated=page.truncated,
        next_cursor=page.next_cursor,
    )
    outline = [compact(row) for row in rows[page.start : page.end]]
    return compact_result(answer, splice, outline=outline)


def parse_metadata(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = loads_json(text)
    except ValueError as error:
        raise ToolError(
            f'metadata must be a JSON object as text, e.g. \'{{"project": "x"}}\': {error}'
        ) from None
    if not isinstance(value, dict):
        raise ToolError("metadata must be a JSON object as text, not another JSON value")
    return value


def register(server: MCPServer) -> None:
    @server.tool(annotations=WRITES)
    async def session_create(
        ctx: Context,
        name: Annotated[
            str | None, Field(description="a name to show in listings; null: none")
        ] = None,
        cwd: Annotated[
            str | None, Field(description="the working directory to record; null: the server's own")
        ] = None,
        # A string, not an object: strict mode allows no open objects. Not nullable either: the
        # SDK parses a JSON string given for a `str | None` argument into an object.
        metadata: Annotated[
            str,
            Field(
                description="a JSON object as text, kept in the header, e.g. '{\"k\": 1}'; "
                "empty: none"
            ),
        ] = "",
    ) -> NewSession:
        """Create an empty session. Returns it: its id (for the other tools), name and uri."""
        state = app_state(ctx)
        data = parse_metadata(metadata)

        def create() -> NewSession:
            _, summary = state.repo.create_described(name=name, cwd=cwd, metadata=data)
            return NewSession(**session_fields(summary))

        with tool_errors():
            info = await state.offload(create)
        state.created(info.id)
        return info

    @server.tool(annotations=READ_ONLY)
    async def session_list(
        ctx: Context,
        query: Annotated[
            str | None,
            Field(
                description="words to search for in the sessions' messages, summaries and names"
                " (each the start of a word there, accents aside, Chinese or Japanese anywhere in"
                " a run; text with no word in it is refused); null: all sessions"
            ),
        ] = None,
        limit: Annotated[
            int | None, Field(ge=1, le=500, description="sessions per page, 1 to 500; null: 50")
        ] = None,
        cursor: Annotated[
            str | None, Field(description="nextCursor of the previous page; null: the first")
        ] = None,
    ) -> Annotated[CallToolResult, SessionListResult]:
        """List sessions, newest first, optionally searching their text. Returns a page of
        sessions (id, name, first user message, counts, times) and a cursor for the next;
        with a query, each session's best hits (entry id, role, a snippet) and their count."""
        state = app_state(ctx)
        splice = spliced.wanted(ctx)

        def read() -> CallToolResult:
            words = query_words(query)
            page = state.repo.list(query=query, limit=limit or 50, cursor=cursor)
            page = page.first(fitting(page.items))
            mark_linked(state.repo, page.items)
            # Each item's JSON made here, off the event loop, and put in the answer as it is.
            if words:
                assert query is not None
                items, page = listed_with_hits(state.repo, page, query, words, session_wire)
            else:
                items = [session_json(item) for item in page.items]
            answer = SessionListResult(
                sessions=[],
                truncated=page.next_cursor is not None,
                next_cursor=page.next_cursor,
                unreadable=unreadable_note([why for _, why in page.left_out]),
            )
            return compact_result(answer, splice, newest_first=True, sessions=items)

        with tool_errors():
            return await state.offload(read)

    @server.tool(annotations=READ_ONLY)
    async def session_get(
        ctx: Context,
        session_id: SessionId,
        view: Annotated[
            Literal["branch", "tree", "entries", "outline"] | None,
            Field(
                description="branch: the entries from the root to the leaf (null: this); "
                "tree: every entry as a node with its parent, children, label and a preview; "
                "entries: every entry in the order appended; outline: the tree as a reader "
                "opens it, one chain with long runs folded and the other branches unopened"
            ),
        ] = None,
        limit: Limit = None,
        cursor: Cursor = None,
        entry_id: Annotated[
            str | None,
            Field(
                description="branch: the path to this entry instead of the leaf; outline: the "
                "chain from this entry (null: from the root, along the current branch)"
            ),
        ] = None,
        from_entry_id: Annotated[
            str | None,
            Field(
                description="branch: the page starts at this entry of the branch and goes on "
                "toward its end, this entry first (a session_search hit and what followed it), "
                "its nextCursor for the page after; null: the page ends at the branch's end"
            ),
        ] = None,
        offset: Annotated[
            int | None,
            Field(
                ge=0,
                le=MAX_OFFSET,
                description="read the entry entry_id alone in pieces, for one too large to read"
                f" whole: its JSON text from this character on, 0 to {MAX_OFFSET:,} (0: the"
                " start); the answer's piece says how much is left and the call for the next;"
                " null: not in pieces",
            ),
        ] = None,
        length: Annotated[
            int | None,
            Field(
                ge=1,
                le=MAX_PIECE_CHARS,
                description=f"with offset: at most this many characters, 1 to {MAX_PIECE_CHARS:,}"
                f" (null: as many as fit in about {PIECE_BYTES // 1024} KB)",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, SessionViewAnswer]:
        """Read a session. Returns its summary and a page of the chosen view, newest last,
        with the total, whether there is more (truncated) and a cursor for the page before
        (with from_entry_id: for the page after)."""
        state = app_state(ctx)
        shown = view or "branch"
        most = check_limit(limit)
        splice = spliced.wanted(ctx)
        if offset is None and length is not None:
            raise ToolError("length applies with offset only (an entry read in pieces)")
        if offset is not None:
            if entry_id is None:
                raise ToolError("offset needs entry_id: the entry to read in pieces")
            other_view = view if shown != "branch" else None
            check_piece_arguments(
                view=other_view, limit=limit, cursor=cursor, from_entry_id=from_entry_id
            )

        def read() -> CallToolResult:
            session, summary = state.repo.open_described(session_id)
            info = session_info(summary, linked_origin(state.repo, session.header))
            if offset is not None:
                assert entry_id is not None
                piece = entry_piece(session, entry_id, offset, length)
                return compact_result(
                    SessionView(
                        session=info,
                        view="branch",
                        leaf_id=info.leaf_id,
                        total=1,
                        truncated=piece.left > 0,
                        piece=piece,
                    )
                )
            if from_entry_id is not None and shown != "branch":
                raise ToolError("from_entry_id applies to the view branch only")
            if shown == "outline":
                return outline_view(session, info, entry_id, cursor, most, splice)
            if entry_id is not None and shown != "branch":
                raise ToolError("entry_id applies to the views branch and outline only")
            page: PageOf
            if from_entry_id is not None:
                items, page = entries_from(session, entry_id, from_entry_id, cursor, most)
            elif shown == "tree":
                items, page = tree_page(session, cursor, most)
            else:
                # The newest page is read with the branch (when it has to be walked).
                newest = most if cursor is None else 0
                total, load = view_entries(session, shown, entry_id, newest)
                paged_as = view_paged_as(shown, load)
                items, page = entries_page(session_id, total, load, cursor, most, paged_as)
            answer = SessionView(
                session=info,
                view=shown,
                leaf_id=info.leaf_id,
                total=page.total,
                truncated=page.truncated,
                next_cursor=page.next_cursor,
            )
            if shown == "tree":
                return compact_result(answer, splice, nodes=items)
            forward = from_entry_id is not None  # the text keeps the entry read from
            return compact_result(answer, splice, forward=forward, entries=items)

        with tool_errors():
            return await state.offload(read)

    @server.tool(annotations=READ_ONLY)
    async def session_search(
        ctx: Context,
        session_id: SessionId,
        query: Annotated[
            str, Field(description="words to find, matched as session_list's query matches")
        ],
        limit: Annotated[
            int | None,
            Field(ge=1, le=MAX_HITS, description=f"hits per page, 1 to {MAX_HITS}; null: 10"),
        ] = None,
        cursor: Annotated[
            str | None, Field(description="nextCursor of the previous page; null: the first")
        ] = None,
    ) -> Annotated[CallToolResult, SessionSearchResult]:
        """Find where words occur in one session (every branch). Returns its entries that
        hold them, best first (most words, then newest): entry id, type, role, time and a
        snippet with the words marked «so»; session_get reads around one (from_entry_id: it and
        what followed; entry_id: the path up to it). A page also stops at about 40 KB."""
        state = app_state(ctx)
        splice = spliced.wanted(ctx)

        def read() -> CallToolResult:
            words = search_words(query)
            page = state.repo.search_session(session_id, query, limit or 10, cursor)
            items, next_cursor = fitting_hits(page, words)
            answer = SessionSearchResult(
                session_id=session_id,
                hits=[],
                total=page.total,
                truncated=next_cursor is not None,
                next_cursor=next_cursor,
            )
            return compact_result(answer, splice, newest_first=True, hits=items)

        with tool_errors():
            return await state.offload(read)

    @server.tool(annotations=DESTROYS)
    async def session_delete(ctx: Context, session_id: SessionId) -> DeleteResult:
        """Delete a session and all its entries. Returns the id and deleted=true."""
        state = app_state(ctx)

        def delete() -> None:
            state.runs.ensure_idle(session_id)
            state.repo.delete(session_id)

        with tool_errors():
            await state.runs.write(session_id, delete)
        state.session_deleted(session_id)
        return DeleteResult(session_id=session_id, deleted=True)

    @server.tool(annotations=WRITES)
    async def session_append(
        ctx: Context,
        session_id: SessionId,
        entry: Annotated[
            EntryInput,
            Field(
                description="what to append, by its type: message (role and content, its "
                "text), label, session_info (the name), custom (your data), custom_message, "
                "model_change, thinking_level_change, active_tools_change, or pi (any entry "
                "in pi v3 form as JSON text)"
            ),
        ],
    ) -> AppendResult:
        """Append an entry at the session's leaf; it becomes the new leaf. Returns the new
        entry's id."""
        state = app_state(ctx)
        partial = entry.to_partial()
        with tool_errors():
            entry_id = await state.runs.write(
                session_id, lambda: state.repo.append_entry(session_id, partial)
            )
        # Every appendable entry becomes the leaf.
        return AppendResult(session_id=session_id, entry_id=entry_id, leaf_id=entry_id)

    @server.tool(annotations=WRITES)
    async def session_move_to(
        ctx: Context,
        session_id: SessionId,
        entry_id: Annotated[
            str,
            Field(
                description="the entry to make the leaf (an id from session_get), or 'root' "
                "to move before the first entry"
            ),
        ],
        summary: Annotated[
            str | None,
            Field(description="a summary of the branch being left, to record; null: none"),
        ] = None,
        summarize: Annotated[
            bool | None,
            Field(description="have the model summarise the branch being left; null: false"),
        ] = None,
    ) -> MoveResult:
        """Move the session's leaf (switch branch); the next append starts a new branch there.
        Returns the new leaf and the id of the branch summary, if one was recorded."""
        state = app_state(ctx)
        target = None if entry_id == "root" else entry_id
        if summary is not None and summarize:
            raise ToolError("give either summary or summarize=true, not both")
        if summary is not None and not summary.strip():
            raise ToolError("summary is empty: give its text, or null to record none")
        if summarize and target is None:
            raise ToolError("summarize needs an entry to move to, not 'root'")

        def open_idle() -> Session:
            state.runs.ensure_idle(session_id)
            return state.repo.open(session_id)

        def move() -> tuple[str | None, str | None]:
            session = open_idle()
            moved = session.move_to(target, {"summary": summary} if summary is not None else None)
            return moved, session.leaf_id

        warnings: list[str] = []
        with tool_errors():
            if summarize:
                assert target is not None
                from mcp_agent.server.summaries import summarize_branch

                session = await state.offload(open_idle)
                async with state.runs.hold(session_id, "session_move_to (summarize)"):
                    branch_summary_id = await summarize_branch(
                        state, ctx, session, target, warnings
                    )
                leaf_id = await state.offload(lambda: session.leaf_id)
            else:
                branch_summary_id, leaf_id = await state.runs.write(session_id, move)
        return MoveResult(
            session_id=session_id,
            leaf_id=leaf_id,
            branch_summary_id=branch_summary_id,
            warnings=warnings,
        )

    @server.tool(annotations=WRITES)
    async def session_fork(
        ctx: Context,
        session_id: SessionId,
        entry_id: Annotated[
            str | None,
            Field(
                description="fork at or before this entry; null: copy the whole session (every "
                "branch, the same leaf)"
            ),
        ] = None,
        position: Annotated[
            Literal["before", "at"] | None,
            Field(
                description="'before' a user message (to ask it again; null: this), or 'at' "
                "any entry (to keep it)"
            ),
        ] = None,
    ) -> NewSession:
        """Copy this session (whole, or the path from its root to entry_id) into a new session
        whose header names this one as its parent. Returns the new session."""
        state = app_state(ctx)
        if position is not None and entry_id is None:
            # As the command line's fork refuses it: a position said which entry to fork at.
            raise ToolError(
                f"position {position!r} needs an entry_id to fork {position}; without one the"
                " whole session is copied (leave position out)"
            )

        def fork() -> NewSession:
            forked = state.repo.fork(session_id, entry_id, position or "before")
            return describe_session(state.repo, forked)

        with tool_errors():
            info = await state.offload(fork)
        state.list_changed()
        state.search_index.nudge()  # a fork copies a branch: text to index, perhaps much
        return info

    @server.tool(annotations=READ_ONLY)
    async def session_context(
        ctx: Context, session_id: SessionId, limit: Limit = None, cursor: Cursor = None
    ) -> Annotated[CallToolResult, ContextAnswer]:
        """The messages as the model would get them (after compactions), with the model,
        thinking level and active tools. Returns a page of messages, newest last."""
        state = app_state(ctx)
        most = check_limit(limit)
        splice = spliced.wanted(ctx)

        def context_answer(session: Session, whole: bool = False) -> CompactAnswer:
            found = context_page(session, cursor, most, keep_texts=not whole)
            context, page = found.context, found.page
            answer = ContextResult(
                session_id=session_id,
                messages=[],
                **shown_settings(context, whole=most is None),  # limit=0: whole
                total=page.total,
                truncated=page.truncated,
                next_cursor=page.next_cursor,
            )
            return compact_answer(answer, messages=found.messages)

        def read() -> CallToolResult:
            session = state.repo.open_read(session_id)
            if most is None and cursor is None:  # the whole context: a client resuming
                kept = kept_whole_context(session, lambda: context_answer(session, whole=True))
                return answer_result(kept, splice)
            return answer_result(context_answer(session), splice)

        with tool_errors():
            return await state.offload(read)

    @server.tool(annotations=READ_ONLY)
    async def session_stats(ctx: Context, session_id: SessionId) -> StatsResult:
        """Counts over the whole tree. Returns entries, messages by role, tool calls, tokens,
        cost, leaves and branch points, first and last times."""
        state = app_state(ctx)
        with tool_errors():
            stats = await state.offload(lambda: state.repo.open(session_id).stats())
        return StatsResult(session_id=session_id, stats=stats.to_json_dict())

    @server.tool(annotations=READ_ONLY)
    async def session_export(
        ctx: Context,
        session_id: SessionId,
        limit: Annotated[
            int | None, Field(ge=0, le=MAX_LIMIT, description=EXPORT_LIMIT_DESCRIPTION)
        ] = None,
        cursor: Annotated[
            str | None,
            Field(description="nextCursor of the previous page; null: from the first line"),
        ] = None,
    ) -> Annotated[CallToolResult, ExportAnswer]:
        """The session as a pi v3 JSONL file (a header line, then one entry per line), in
        pages from the top. Returns these lines, the file's line count and a cursor for the
        rest; the resource session://{id}/export.jsonl has the whole file at once."""
        state = app_state(ctx)
        most = check_limit(limit)

        def export() -> CallToolResult:
            page = export_page(state.repo.open(session_id), cursor, most)
            answer = ExportResult(
                session_id=session_id,
                jsonl="".join(page.lines),
                lines=page.count,
                first_line=page.start + 1,
                truncated=page.end < page.count,  # the file goes on after this page
                next_cursor=f"from:{page.end}" if page.end < page.count else None,
                omitted=page.omitted,
            )
            return compact_result(answer)

        with tool_errors():
            return await state.offload(export)

    @server.tool(annotations=WRITES)
    async def session_import(
        ctx: Context,
        jsonl: Annotated[
            str,
            Field(description="the text of a pi session file (version 1, 2 or 3), not a path"),
        ],
    ) -> ImportResult:
        """Import a pi session file as a new session (older versions are migrated). It keeps
        the file's id when that is free; otherwise, or when the id is not a UUID, it gets a
        new one. Returns the session and which id it got."""
        state = app_state(ctx)
        if not is_jsonl_text(jsonl):
            # Never read a path named by a client: the server's files are not theirs to read.
            raise ToolError(
                "jsonl must be the text of a pi session file: JSON lines starting with the "
                '{"type":"session",...} header (a file path is not read)'
            )

        def import_() -> ImportResult:
            imported = state.repo.import_session(jsonl, copy_if_taken=True)
            info = describe_session(state.repo, imported.session)
            file_id = imported.file_id
            if info.id == file_id:
                note = "imported under the file's id"
            elif is_session_id(file_id):
                note = f"session {file_id} exists already: imported as a copy under a new id"
            else:
                note = f"the file's id {file_id[:60]!r} is not a UUID: imported under a new id"
            note = "; ".join([note, *imported.notes])
            return ImportResult(
                session=info, file_id=file_id[:200], new_id=info.id != file_id, note=note
            )

        with tool_errors():
            result = await state.offload(import_)
        state.list_changed()
        state.search_index.nudge()
        return result
