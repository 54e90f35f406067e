"""Sessions and agents as MCP resources, paged newest first, with subscriptions on both eras."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import mcp.types as types
from mcp.server import InitializationOptions, MCPServer, NotificationOptions, ServerRequestContext
from mcp.server.apps import client_supports_apps
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.shared.exceptions import MCPError

from mcp_agent.runtime.application import AppState
from mcp_agent.server.lifespan import ServerState, app_state
from mcp_agent.server.notify import SubscriptionLimit
from mcp_agent.server.paging import DEFAULT_LIMIT, WHOLE_MAX, fits_whole, json_size
from mcp_agent.server.session_reads import (
    context_page,
    entries_page,
    entry_size,
    entry_text,
    shown_settings,
    too_large_entry,
    tree_page,
    view_entries,
    view_paged_as,
)
from mcp_agent.server.session_tools import session_info
from mcp_agent.server.strict import URI_CHARS, long_uri
from mcp_agent.server.tool_errors import check_given
from mcp_agent.server.viewer.apps import viewer_resource
from mcp_agent.sessions import Session, SessionError
from mcp_agent.sessions.entries import CWD_CHARS, METADATA_CHARS, clip_long, json_chars
from mcp_agent.sessions.repo import linked_origin

T = TypeVar("T")

JSON = "application/json"
JSONL = "application/x-ndjson"
# A session's name as a listed resource's name and title.
LISTED_NAME_CHARS = 200
# The fields of a header from a file that are not pi's, together, as session://{id} shows them
# (each was bounded, their number not: 500 made the resource 2 MB).
HEADER_EXTRA_CHARS = 8192


def _dump(data: Any) -> str:
    # Compact, as the tools' text: a page is chosen by its entries' bytes as stored, and
    # indented (two spaces a level, a line each) a page of nested content was five times that.
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _bounded_header(session: Session) -> dict[str, Any]:
    """The session's header with every field within the bounds of what is written (a field
    from an imported file may be larger): a long text cut with a marker, a long value (the
    metadata) named by its size; and the fields of the file's own (which pi's headers do not
    have) within ``HEADER_EXTRA_CHARS`` together, the rest said in ``leftOut``."""
    header = session.header.to_json_dict()
    extra = set(session.header.model_extra or ())
    room, left, left_chars = HEADER_EXTRA_CHARS, 0, 0
    for key, value in list(header.items()):
        if isinstance(value, str):
            value = header[key] = clip_long(value, CWD_CHARS)
        elif (size := json_chars(value)) > METADATA_CHARS:
            value = header[key] = {
                "cut": f"{size:,} characters of JSON, more than the {METADATA_CHARS:,} shown"
                f" here; line 1 of session://{session.id}/export.jsonl has them"
            }
        if key in extra:
            cost = len(key) + json_chars(value)
            if left or cost > room:  # in the file's order: the first ones that fit
                del header[key]
                left, left_chars = left + 1, left_chars + cost
            else:
                room -= cost
    if left:
        header["leftOut"] = (
            f"{left:,} more fields of the file's header ({left_chars:,} characters of JSON, past"
            f" the {HEADER_EXTRA_CHARS:,} shown here): line 1 of"
            f" session://{session.id}/export.jsonl has them"
        )
    return header


_LISTED = "session_list or resources/list shows the sessions"


def _read_session(session_id: str, read: Callable[[], T]) -> T:
    """What ``read`` makes of the session, a session error (no such session, one deleted
    while it is read, a damaged file) said as a resource error: the SDK hides the text of
    any other exception, and logs its traceback. An empty or blank id is refused as such."""
    check_given("session_id", session_id, _LISTED)
    try:
        return read()
    except SessionError as error:
        if error.code == "not_found":
            shown = clip_long(session_id, 100)
            raise ResourceNotFoundError(f"no session {shown!r}; {_LISTED}") from None
        raise ResourceNotFoundError(f"session {clip_long(session_id, 100)!r}: {error}") from None


def _export(state: AppState, session_id: str) -> str:
    """The session's pi file whole, or a refusal once it passes ``WHOLE_MAX``."""
    with contextlib.closing(state.repo.export_chunks(session_id)) as pieces:
        return _read_session(session_id, lambda: _kept_export(session_id, pieces))


def _kept_export(session_id: str, pieces: Iterator[str]) -> str:
    """The pieces of a session's file (the first opens the session) joined, up to
    ``WHOLE_MAX`` bytes as the answer's JSON string carries them, escaped (a session of 100,000
    long messages is a file of 114 MB): past it a refusal that says where to read the file in
    pages, once the first piece past it is read."""
    kept: list[str] = []
    size = 2
    for piece in pieces:
        size += json_size(piece) - 2
        if not fits_whole(size):
            raise MCPError(
                types.INVALID_PARAMS,
                f"session {session_id}'s file is more than the {WHOLE_MAX >> 20} MiB one"
                f" read of session://{session_id}/export.jsonl answers with: page it with"
                " the session_export tool (limit and cursor), or write it out with"
                f" `mcp-agent-sessions sessions export {session_id} -o FILE`",
            )
        kept.append(piece)
    return "".join(kept)


async def _read(
    state: AppState, session_id: str, render: Callable[[Session], str], leaf: bool = False
) -> str:
    """Open the session and render it, on a worker thread (never on the event loop).
    ``leaf``: the rendering shows the leaf (the session is opened for one read, see
    ``SessionRepo.open_read``)."""
    opener = state.repo.open_read if leaf else state.repo.open
    return await state.offload(
        lambda: _read_session(session_id, lambda: render(opener(session_id)))
    )


def register(server: MCPServer) -> None:
    @server.resource(
        "session://{session_id}",
        name="session",
        mime_type=JSON,
        description="A session: its summary and the newest entries of its current branch",
    )
    async def session_resource(session_id: str, ctx: Context) -> str:
        state = app_state(ctx)

        def render() -> str:
            session, summary = state.repo.open_described(session_id)
            total, load = view_entries(session, "branch", newest=DEFAULT_LIMIT)
            paged_as = view_paged_as("branch", load)  # the cursor session_get takes
            branch, page = entries_page(session_id, total, load, None, DEFAULT_LIMIT, paged_as)
            return _dump(
                {
                    "session": session_info(
                        summary, linked_origin(state.repo, session.header)
                    ).model_dump(mode="json"),
                    "header": _bounded_header(session),
                    "leafId": session.leaf_id,
                    "branchLength": page.total,
                    "truncated": page.truncated,
                    "more": f"the {page.start:,} older entries: session_get with cursor"
                    f" {page.next_cursor!r}"
                    if page.truncated
                    else None,
                    "branch": [json.loads(text) for text in branch],
                }
            )

        return await state.offload(lambda: _read_session(session_id, render))

    @server.resource(
        "session://{session_id}/tree",
        name="session-tree",
        mime_type=JSON,
        description="The newest entries of a session as flat nodes (parent, children, label,"
        " preview): a page, as session_get with view tree gives by default, with where to read"
        " the rest",
    )
    async def session_tree(session_id: str, ctx: Context) -> str:
        def render(session: Session) -> str:
            # The page session_get's tree view gives by default, bounded in bytes as it is (a
            # 33,000-entry session's 5,000 newest nodes were 3 MB).
            nodes, page = tree_page(session, None, DEFAULT_LIMIT)
            return _dump(
                {
                    "leafId": session.leaf_id,
                    "total": page.total,
                    "truncated": page.truncated,
                    "more": f"the {page.start:,} older nodes: session_get with view 'tree' and"
                    f" cursor {page.next_cursor!r}, then each answer's nextCursor"
                    if page.truncated
                    else None,
                    "nodes": [json.loads(text) for text in nodes],
                }
            )

        return await _read(app_state(ctx), session_id, render, leaf=True)

    @server.resource(
        "session://{session_id}/context",
        name="session-context",
        mime_type=JSON,
        description="The newest messages as the model would get them (a page, as session_context"
        " gives by default), with model and thinking level",
    )
    async def session_context(session_id: str, ctx: Context) -> str:
        def render(session: Session) -> str:
            found = context_page(session, None, DEFAULT_LIMIT)
            settings = shown_settings(found.context)
            page = found.page
            data: dict[str, Any] = {
                "messages": [json.loads(text) for text in found.messages],
                "thinkingLevel": settings["thinking_level"],
                "model": settings["model"],
            }
            if settings["active_tool_names"] is not None:
                data["activeToolNames"] = settings["active_tool_names"]
            if settings["settings_cut"] is not None:
                data["settingsCut"] = settings["settings_cut"]
            data["total"] = page.total
            data["truncated"] = page.truncated
            data["more"] = (
                f"the {page.start:,} older messages: session_context with cursor"
                f" {page.next_cursor!r}, or with limit=0 for all of them"
                if page.truncated
                else None
            )
            return _dump(data)

        return await _read(app_state(ctx), session_id, render, leaf=True)

    @server.resource(
        "session://{session_id}/entries/{entry_id}",
        name="session-entry",
        mime_type=JSON,
        description=f"One entry of a session, whole (up to {WHOLE_MAX >> 20} MiB; past it the"
        " refusal says where it is)",
    )
    async def session_entry(session_id: str, entry_id: str, ctx: Context) -> str:
        check_given("session_id", session_id, _LISTED)

        def render(session: Session) -> str:
            entry = session.get_entry(entry_id)
            if entry is None:
                raise ResourceNotFoundError(
                    f"session {clip_long(session_id, 100)!r} has no entry"
                    f" {clip_long(entry_id, 100)!r}; session_get lists its entries"
                )
            text = entry_text(entry.to_json_dict())
            if not fits_whole(
                size := entry_size(text)
            ):  # an imported file's, or one sent over stdio
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"entry {entry_id} of session {session_id} is {size:,} bytes as sent, more"
                    f" than the {WHOLE_MAX >> 20} MiB one answer holds, so"
                    f" {too_large_entry(session_id, entry_id, entry.to_json_dict())}",
                )
            return text

        return await _read(app_state(ctx), session_id, render)

    @server.resource(
        "session://{session_id}/export.jsonl",
        name="session-export",
        mime_type=JSONL,
        description=f"The session as a pi version 3 JSONL file, whole (up to {WHOLE_MAX >> 20}"
        " MiB; the session_export tool pages a larger one)",
    )
    async def session_export(session_id: str, ctx: Context) -> str:
        state = app_state(ctx)
        return await state.offload(lambda: _export(state, session_id))

    @server.resource(
        "agent://{name}",
        name="agent",
        mime_type=JSON,
        description="An agent defined in the manifests",
    )
    async def agent_resource(name: str, ctx: Context) -> str:
        agent = app_state(ctx).agents.get(name)
        if agent is None:
            names = list(app_state(ctx).agents)
            known = ", ".join(names[:20]) + (", …" if len(names) > 20 else "") or "none"
            raise ResourceNotFoundError(
                f"no agent {clip_long(name, 100)!r}; the agents: {known} (agent_list describes"
                " them)"
            )
        return _dump(agent.to_json_dict())

    lowlevel = server._lowlevel_server  # the SDK offers no public hook for these three

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.ListResourcesResult:
        server_state: ServerState = ctx.lifespan_context
        server_state.notifier.remember(ctx.session, ctx.protocol_version)
        state = server_state.app
        try:
            page = await state.offload(
                lambda: state.repo.list(limit=state.settings.page_size, cursor=params.cursor)
            )
        except SessionError as error:
            raise MCPError(types.INVALID_PARAMS, str(error)) from None
        resources: list[types.Resource] = []
        if params.cursor is None and client_supports_apps(ctx):
            resources.append(viewer_resource())
        if params.cursor is None:
            resources.extend(
                types.Resource(
                    uri=f"agent://{agent.name}",
                    name=f"agent {agent.name}",
                    description=agent.description or None,
                    mime_type=JSON,
                )
                for agent in state.agents.values()
            )
        resources.extend(
            types.Resource(
                uri=f"session://{item.id}",
                # Unnamed: its whole id (a UUIDv7's first characters are its time: the same for
                # every session made within a minute).
                name=clip_long(item.name or f"session {item.id}", LISTED_NAME_CHARS),
                title=None if item.name is None else clip_long(item.name, LISTED_NAME_CHARS),
                description=(item.first_user_message or "")[:200] or None,
                mime_type=JSON,
            )
            for item in page.items
        )
        return types.ListResourcesResult(resources=resources, next_cursor=page.next_cursor)

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        state: ServerState = ctx.lifespan_context
        # Any URI is taken, as the MCP conformance suite expects (a session's resources are
        # the ones that ever get updates; a subscription to another simply hears nothing),
        # up to a length: the server keeps each one until its client unsubscribes.
        uri = str(params.uri)
        if len(uri) > URI_CHARS:
            raise MCPError(types.INVALID_PARAMS, long_uri(uri))
        try:
            state.notifier.subscribe(uri, ctx.session, ctx.protocol_version)
        except SubscriptionLimit:
            # Subscriptions to sessions deleted since (which hear nothing more) are let go
            # first: a client watching sessions come and go must not run out for them.
            held = state.notifier.subscribed_sessions_of(ctx.session)
            app = state.app
            gone = await app.offload(lambda: {sid for sid in held if not app.repo.exists(sid)})
            state.notifier.unsubscribe_sessions(ctx.session, gone)
            try:
                state.notifier.subscribe(uri, ctx.session, ctx.protocol_version)
            except SubscriptionLimit as error:
                raise MCPError(types.INVALID_REQUEST, str(error)) from None
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        state: ServerState = ctx.lifespan_context
        state.notifier.unsubscribe(str(params.uri), ctx.session)
        return types.EmptyResult()

    async def initialized(
        ctx: ServerRequestContext[Any, Any], params: types.NotificationParams
    ) -> None:
        # A legacy client hears list changes from its handshake on: one that only opened its
        # event stream, to wait for the list to change, has called nothing that remembers it.
        state: ServerState = ctx.lifespan_context
        state.notifier.remember(ctx.session, ctx.protocol_version)

    lowlevel.add_notification_handler(
        "notifications/initialized", types.NotificationParams, initialized
    )
    lowlevel.add_request_handler("resources/list", types.PaginatedRequestParams, list_resources)
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler(
        "resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe
    )

    # MCPServer declares no list-changed capabilities to legacy clients; we do send them.
    original = lowlevel.create_initialization_options

    def initialization_options(
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(
            resources_changed=True, tools_changed=False, prompts_changed=False
        )
        return original(options, experimental_capabilities, extensions)

    lowlevel.create_initialization_options = initialization_options  # type: ignore[method-assign]

    # On 2026-07-28 the SDK says every list may change once subscriptions/listen is served;
    # the tools and prompts are fixed at start and no change of them is ever sent, as the
    # 2025 handshake says too (a client that believed otherwise would listen for nothing).
    capabilities = lowlevel.get_capabilities

    def fixed_lists(*args: Any, **kwargs: Any) -> types.ServerCapabilities:
        found = capabilities(*args, **kwargs)
        update: dict[str, Any] = {}
        if found.tools is not None:
            update["tools"] = found.tools.model_copy(update={"list_changed": False})
        if found.prompts is not None:
            update["prompts"] = types.PromptsCapability(list_changed=False)
        return found.model_copy(update=update)

    lowlevel.get_capabilities = fixed_lists  # type: ignore[method-assign]
