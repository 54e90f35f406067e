"""Protocol services MCPServer leaves to us: argument completion and logging/setLevel."""

from __future__ import annotations

import re
from typing import Any

import mcp.types as types
from mcp.server import MCPServer, ServerRequestContext

from mcp_agent.runtime.application import AppState
from mcp_agent.sessions import Session
from mcp_agent.sessions.storage import stored_pages

MAX_COMPLETIONS = 100


def complete(state: AppState, params: types.CompleteRequestParams) -> list[str]:
    """Values for session ids, entry ids and agent names, in prompts and resource templates."""
    name, prefix = params.argument.name, params.argument.value
    if name == "session_id":
        return session_ids(state, prefix)
    if name == "name" or name == "agent":
        return sorted(agent for agent in state.agents if agent.startswith(prefix))
    if name == "entry_id":
        session_id = (params.context.arguments or {}).get("session_id") if params.context else None
        if not session_id or not state.repo.exists(session_id):
            return []
        return entry_ids(state.repo.open(session_id), prefix)
    return []


def entry_ids(session: Session, prefix: str) -> list[str]:
    """Ids starting with ``prefix``, newest first: one more than MAX_COMPLETIONS tells the
    client there are more. A stored session's ids are read without parsing its entries."""
    storage = stored_pages(session.storage)
    ids = (
        [row[0] for row in storage.outline()]
        if storage is not None
        else [entry.id for entry in session.get_entries()]
    )
    found: list[str] = []
    for entry_id in reversed(ids):
        if entry_id.startswith(prefix):
            found.append(entry_id)
            if len(found) > MAX_COMPLETIONS:
                break
    return found


def session_ids(state: AppState, prefix: str, pages: int = 100) -> list[str]:
    """Ids starting with ``prefix``, newest first: one more than MAX_COMPLETIONS tells the
    client there are more. Looks through at most ``pages`` pages of 500 sessions."""
    found: list[str] = []
    cursor = None
    for _ in range(pages):
        page = state.repo.list(limit=500, cursor=cursor)
        found.extend(item.id for item in page.items if item.id.startswith(prefix))
        cursor = page.next_cursor
        if len(found) > MAX_COMPLETIONS or cursor is None:
            break
    return found


def register(server: MCPServer) -> None:
    lowlevel = server._lowlevel_server

    async def takes(ref: types.PromptReference | types.ResourceTemplateReference) -> set[str]:
        """The arguments ``ref`` takes: none for a prompt or template this server does not
        have (an empty completion, not an error: the conformance suite asks of its own)."""
        if isinstance(ref, types.PromptReference):
            prompts = await server.list_prompts()
            found = next((prompt for prompt in prompts if prompt.name == ref.name), None)
            return {argument.name for argument in found.arguments or []} if found else set()
        templates = await server.list_resource_templates()
        if any(template.uri_template == ref.uri for template in templates):
            return set(re.findall(r"\{(\w+)\}", ref.uri))
        return set()

    async def on_complete(
        ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        state = ctx.lifespan_context.app
        if params.argument.name not in await takes(params.ref):
            return types.CompleteResult(completion=types.Completion(values=[]))
        values = await state.offload(lambda: complete(state, params))
        return types.CompleteResult(
            completion=types.Completion(
                values=values[:MAX_COMPLETIONS],
                total=len(values) if len(values) <= MAX_COMPLETIONS else None,
                has_more=len(values) > MAX_COMPLETIONS,
            )
        )

    async def on_set_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        # The level is the client's, for log notifications sent to it, and this server sends
        # none. It must not reach the process's log on stderr: that belongs to whoever runs the
        # server, for every client, and one client's "emergency" would hide the warnings (a
        # model's rate limit, a downstream server's trouble) that the others' runs give.
        return types.EmptyResult()

    lowlevel.add_request_handler("completion/complete", types.CompleteRequestParams, on_complete)
    lowlevel.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)
