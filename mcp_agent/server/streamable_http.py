"""Streamable HTTP: the SDK's ASGI app behind a bearer-token check, served by uvicorn."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_agent.runtime.settings import ServerSettings, is_loopback

log = logging.getLogger(__name__)


class UnsafeBindError(ValueError):
    pass


def check_bind(settings: ServerSettings) -> None:
    if not is_loopback(settings.host) and not settings.token:
        raise UnsafeBindError(
            f"refusing to listen on {settings.host} without a token: anyone who can reach this "
            "address could read your sessions and run agents. Pass --token SECRET (or set "
            "MCP_AGENT_TOKEN), or bind to 127.0.0.1."
        )


class BearerTokenMiddleware:
    """Answers 401 unless the request carries ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, credentials = given.partition(b" ")
            # The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.strip(), self.token
            ):
                response = JSONResponse(
                    {"error": "unauthorized", "detail": "send Authorization: Bearer <token>"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="mcp-agent-sessions"'},
                )
                await response(scope, receive, send)
                return
        # Everything else, the lifespan scope included, goes through: the SDK's session
        # manager starts in the app's lifespan.
        await self.app(scope, receive, send)


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "[::]")


def transport_security(settings: ServerSettings) -> TransportSecuritySettings:
    """DNS rebinding protection for any address: the Host header must name the bound address,
    loopback, or a host given with --allowed-host (the SDK turns it off off loopback)."""
    names = [*LOOPBACK_NAMES, *settings.allowed_hosts]
    if settings.host not in WILDCARD_ADDRESSES and settings.host not in names:
        names.append(f"[{settings.host}]" if ":" in settings.host else settings.host)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for name in names for pattern in (name, f"{name}:*")],
        allowed_origins=[
            f"{scheme}://{name}{port}"
            for name in names
            for scheme in ("http", "https")
            for port in ("", ":*")
        ],
    )


def build_http_app(server: MCPServer, settings: ServerSettings) -> ASGIApp:
    check_bind(settings)
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path="/mcp",
        max_request_body_size=settings.max_request_bytes,
        host=settings.host,
        transport_security=transport_security(settings),
    )
    if settings.token:
        app = BearerTokenMiddleware(app, settings.token)
    return app


async def serve_http(server: MCPServer, settings: ServerSettings, **uvicorn_options: Any) -> None:
    import uvicorn

    app = build_http_app(server, settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        lifespan="on",
        **uvicorn_options,
    )
    await uvicorn.Server(config).serve()
