"""The viewer as the HTTP server's own page at ``/``, behind the token that guards ``/mcp``.

Sign-in works as Jupyter's does: ``serve`` prints a link with ``?token=``; opening it sets an
HttpOnly, SameSite=Strict cookie and redirects to ``/`` (so the token leaves the address bar
and the history). The page then calls ``/mcp`` with that cookie, which ``/mcp`` accepts only
from this very origin (the ``Origin`` header names the host the request was sent to), so a
page of another site or port cannot use it. The same Host and Origin checks as ``/mcp`` hold."""

from __future__ import annotations

import hashlib
import hmac
import html
from http.cookies import SimpleCookie

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_agent.server.viewer import content_security_policy, viewer_html

PAGE_PATHS = ("/", "/index.html")
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def cookie_name(port: int) -> str:
    # Cookies are shared by every port of a host: one name per server.
    return f"mcp_agent_sessions_{port}"


def cookie_value(token: str) -> str:
    """What the cookie holds: derived from the token, so the cookie is not the token itself."""
    return hmac.new(token.encode(), b"mcp-agent-sessions viewer", hashlib.sha256).hexdigest()


def cookie_signs_in(headers: dict[bytes, bytes], token: str, port: int) -> bool:
    """True when the request carries this server's viewer cookie and comes from this origin
    (a browser always sends ``Origin`` with a POST; its value is the page's own origin)."""
    origin = headers.get(b"origin", b"").decode("latin-1")
    host = headers.get(b"host", b"").decode("latin-1")
    if not host or origin not in (f"http://{host}", f"https://{host}"):
        return False
    return _cookie_matches(headers.get(b"cookie", b"").decode("latin-1"), token, port)


def _cookie_matches(cookie_header: str, token: str, port: int) -> bool:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(cookie_header)
    except Exception:  # a malformed Cookie header signs nobody in
        return False
    morsel = jar.get(cookie_name(port))
    return morsel is not None and hmac.compare_digest(morsel.value, cookie_value(token))


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


class ViewerPage:
    """Serves the page at ``/`` and hands every other request to ``app``."""

    def __init__(
        self, app: ASGIApp, token: str | None, port: int, security: TransportSecuritySettings
    ) -> None:
        self.app = app
        self.token = token
        self.port = port
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in PAGE_PATHS:
            await self.app(scope, receive, send)
            return
        response = await self.respond(Request(scope, receive))
        await response(scope, receive, send)

    async def respond(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response("the viewer page is read with GET", status_code=405)
        refused = await self.security.validate_request(request)
        if refused is not None:
            return refused
        if self.token is None:  # --no-auth (loopback only)
            return self.page()
        given = request.query_params.get("token")
        if given is not None:
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return _page(
                    "Wrong token",
                    "This link's token is not this server's. Open the link that "
                    "mcp-agent-sessions serve printed when it started (a new one at each "
                    "start unless the token comes from a file).",
                    401,
                )
            redirect = RedirectResponse("/", status_code=303, headers=HEADERS)
            redirect.set_cookie(
                cookie_name(self.port),
                cookie_value(self.token),
                httponly=True,
                samesite="strict",
                path="/",
            )
            return redirect
        if _cookie_matches(request.headers.get("cookie", ""), self.token, self.port):
            return self.page()
        return _page(
            "Sign in with the link",
            "Open the link with ?token= that mcp-agent-sessions serve printed when it "
            "started (http://HOST:PORT/?token=…); it signs this browser in.",
            401,
        )

    @staticmethod
    def page() -> HTMLResponse:
        return HTMLResponse(
            viewer_html("http"),
            headers={**HEADERS, "Content-Security-Policy": content_security_policy()},
        )
