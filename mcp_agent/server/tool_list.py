"""``tools/list`` answered with the answer made the first time.

The tools are fixed once the server is built, yet the SDK makes the answer anew for every
listing: a model per tool, then the whole list checked against the protocol's schema and
dumped (about 1.5 ms of CPU for our 19 tools' schemas, 33 KB, against 0.4 for the same list
already made). Every client lists the tools when it connects, and at its first call.

Each protocol version (the result's shape and stamp differ) and whether the client shows MCP
Apps (``viewer.apps`` links two tools to the viewer for it) has an answer of its own; the first
listing of each goes the SDK's whole way and is kept. A request with a cursor, and one on a
2025 connection before its handshake (refused by the SDK), always go the whole way.

``OnePageLists`` refuses a cursor given to a listing of one page (``tools/list``,
``prompts/list``, ``resources/templates/list``): the SDK's handlers ignore it and answer the
first page, where MCP asks for invalid params, as ``resources/list`` answers a cursor it did
not hand out.
"""

from __future__ import annotations

from typing import Any

from mcp.server.apps import client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.methods import validate_client_request
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Answers kept at most: one per protocol version and Apps support, a handful in practice.
MAX_KEPT = 16


class KeptToolList(ServerMiddleware[Any]):
    """The middleware that answers ``tools/list`` from the kept answer (see the module)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, bool], dict[str, Any]] = {}

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/list" or not _first_page(ctx.params) or not _past_handshake(ctx):
            return await call_next(ctx)
        key = (ctx.protocol_version, client_supports_apps(ctx))
        kept = self._kept.get(key)
        if kept is None:
            answer = await call_next(ctx)
            if isinstance(answer, dict) and len(self._kept) < MAX_KEPT:
                self._kept[key] = answer
            return answer
        # What the SDK checks of every request before its handler (a bad _meta is refused).
        validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
        return dict(kept)  # the caller's own copy of the top level; nothing below is changed


def _first_page(params: Any) -> bool:
    return params is None or (isinstance(params, dict) and set(params) <= {"_meta"})


def _past_handshake(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the SDK would let the request through to its handler: a 2026 request always,
    a 2025 connection once the client has sent ``initialize``."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or ctx.session.client_params is not None


# The listings that have one page, all of them at once: none hands out a cursor.
ONE_PAGE_LISTS = frozenset({"tools/list", "prompts/list", "resources/templates/list"})


class OnePageLists(ServerMiddleware[Any]):
    """The middleware that refuses a cursor given to a listing of one page (see the module):
    a client that sends one is paging something else, and would take the first page for the
    next one."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        cursor = ctx.params.get("cursor") if isinstance(ctx.params, dict) else None
        # A cursor that is no string is the SDK's to refuse, and so is any request on a 2025
        # connection before its handshake.
        if ctx.method in ONE_PAGE_LISTS and isinstance(cursor, str) and _past_handshake(ctx):
            shown = cursor if len(cursor) <= 60 else cursor[:60] + "…"
            raise MCPError(
                INVALID_PARAMS,
                f"invalid cursor {shown!r}: {ctx.method} has one page and hands out no cursor;"
                " leave cursor out",
            )
        return await call_next(ctx)
