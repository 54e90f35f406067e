"""The viewer as the HTTP server's own page at ``/``.

The page itself holds nothing but the viewer's code, and is served to anyone the Host and
Origin checks of ``/mcp`` let through; every session it shows comes from ``/mcp``, which asks
for the token. ``serve`` prints a link carrying the token in its fragment (``/#token=…``),
which browsers never send to a server: the page keeps it in its origin's storage, which no
page or server on another port can read, takes it out of the address bar, and sends it as
``Authorization: Bearer``. (A cookie would not do: every port of a host receives it, so any
local server the browser visits could replay it.) A link of the older form
``/?token=…&session=…`` (its token checked here) is the page, which moves its query to the
fragment form, a session the link's own fragment names kept (``/?token=…#session=…``)."""

from __future__ import annotations

import hmac
import html

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_agent.server.unreadable import error_response
from mcp_agent.server.viewer import content_security_policy, viewer_html
from mcp_agent.sessions.entries import clip_long

# Where MCP is served over HTTP; the page is at the root.
MCP_ENDPOINT = "/mcp"

PAGE_PATHS = ("/", "/index.html")
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def _page(title: str, text: str, status: int) -> HTMLResponse:
    body = (
        "<!doctype html><meta charset=utf-8><title>Agent sessions</title>"
        "<body style='font:15px system-ui;margin:15vh auto;max-width:34em;color:#1c2330'>"
        f"<h1 style='font-size:20px'>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
    )
    return HTMLResponse(
        body,
        status_code=status,
        headers={
            **HEADERS,
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
        },
    )


def not_the_endpoint(path: str) -> str:
    """What a request to ``path``, which is not the MCP endpoint, is told."""
    return f"{clip_long(path, 200)!r} is not this server's MCP endpoint, which is {MCP_ENDPOINT}"


class ViewerPage:
    """Serves the page at ``/`` and hands every other request to ``app``."""

    def __init__(
        self, app: ASGIApp, token: str | None, security: TransportSecuritySettings
    ) -> None:
        self.app = app
        self.token = token
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in PAGE_PATHS:
            await self.app(scope, receive, send)
            return
        response = await self.respond(Request(scope, receive))
        await response(scope, receive, send)

    async def respond(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            # An MCP client pointed at the server's root: a JSON-RPC error it shows.
            message = (
                f"Method Not Allowed: {not_the_endpoint(request.url.path)}; this path serves"
                " the session viewer's page, read with GET"
            )
            return error_response(405, message, headers={"Allow": "GET, HEAD"})
        refused = await self.security.validate_request(request)
        if refused is not None:
            return refused
        # --no-auth (loopback only) takes no token: one given is left out
        token = self.token or ""
        given = request.query_params.get("token") if token else None
        if given is not None and not hmac.compare_digest(given.encode(), token.encode()):
            return _page(
                "Wrong token",
                "This link's token is not this server's. Open the link that "
                "mcp-agent-sessions serve printed when it started (a new one at each "
                "start unless the token comes from a file).",
                401,
            )
        # An older link (/?token=…&session=…) is the page itself, which moves its query to
        # the fragment: a redirect to /#token=… replaced the fragment the link had (its
        # session, in /?token=…#session=…), which never reaches a server.
        return self.page()

    @staticmethod
    def page() -> HTMLResponse:
        return HTMLResponse(
            viewer_html("http"),
            headers={**HEADERS, "Content-Security-Policy": content_security_policy()},
        )
