"""``serve``: the MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import gc
import logging
import sys
import threading
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_agent.cli.common import DbOption, ManifestsOption, check_database, die

if TYPE_CHECKING:
    from mcp_agent.server.streamable_http import HttpAuth


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class Durability(StrEnum):
    full = "full"
    normal = "normal"


def serve(
    transport: Annotated[
        Transport, typer.Option(help="stdio or streamable HTTP")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option(help="HTTP address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
    db: DbOption = None,
    manifests: ManifestsOption = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="HTTP: require the bearer token in this file (or set MCP_AGENT_TOKEN_FILE); "
            "without a token, serve generates one and prints it",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="HTTP: require this bearer token (or set MCP_AGENT_TOKEN); other users can "
            "read a command line, so prefer --token-file",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="HTTP: no token at all, so any user of this machine can use the server "
            "(loopback addresses only)",
        ),
    ] = False,
    max_http_sessions: Annotated[
        int | None,
        typer.Option(
            help="HTTP: sessions (2025 handshake) open at once; a new client beyond it closes "
            "the session idle the longest, or gets 503 when every one is busy; 0: no limit "
            "(default 1000, or MCP_AGENT_MAX_HTTP_SESSIONS)",
            show_default=False,
        ),
    ] = None,
    http_session_idle_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="<seconds>",
            help="HTTP: close a session with no request in flight for this long (an open "
            "event stream or a running call keeps it); 0: never (default 300, or "
            "MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT)",
            show_default=False,
        ),
    ] = None,
    max_subscriptions: Annotated[
        int | None,
        typer.Option(
            help="resources one client (2025 handshake) may subscribe to at once; 0: no limit "
            "(default 1000, or MCP_AGENT_MAX_SUBSCRIPTIONS)",
            show_default=False,
        ),
    ] = None,
    notification_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="<seconds>",
            help="a client (2025 handshake) whose notification is not sent within this long, "
            "because it stopped reading, gets no more (default 5, or "
            "MCP_AGENT_NOTIFICATION_TIMEOUT)",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="default model, provider:model-id (or MCP_AGENT_MODEL)")
    ] = None,
    max_depth: Annotated[int, typer.Option(help="how deep sub-agents may nest")] = 3,
    max_runs: Annotated[
        int | None,
        typer.Option(
            help="agent runs under way at once in this server; a start beyond it is refused; "
            "0: no limit (default 64, or MCP_AGENT_MAX_RUNS)",
            show_default=False,
        ),
    ] = None,
    max_runs_per_client: Annotated[
        int | None,
        typer.Option(
            help="agent runs under way at once for one client; 0: no limit (default 16, or "
            "MCP_AGENT_MAX_RUNS_PER_CLIENT)",
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="a host name HTTP clients may use besides --host (repeatable)"),
    ] = None,
    model_retries: Annotated[
        int | None,
        typer.Option(
            help="run again a run that ended on a passing model error (overloaded, a broken "
            "stream) this many times; 0: never (default 3, or MCP_AGENT_MODEL_RETRIES)"
        ),
    ] = None,
    durability: Annotated[
        Durability | None,
        typer.Option(
            help="full (default): every append survives a power loss; normal: a killed "
            "process, not a power cut (or MCP_AGENT_DURABILITY)"
        ),
    ] = None,
) -> None:
    """Run the MCP server (stdio by default)."""
    if manifests is not None and not manifests.is_dir():
        die(f"--manifests {manifests} is not a folder (it needs agents/*.toml)")
    import anyio

    from mcp_agent.cli.demo import cli_models
    from mcp_agent.manifests import ManifestError
    from mcp_agent.runtime.descriptors import raise_descriptor_limit
    from mcp_agent.runtime.settings import TOKEN_ENV, TOKEN_FILE_ENV, ServerSettings
    from mcp_agent.server.app import build_server, print_banner
    from mcp_agent.server.stdio import run_stdio
    from mcp_agent.server.streamable_http import (
        HttpAuthError,
        UnsafeBindError,
        http_auth,
        serve_http,
    )

    if token is not None and token_file is not None:
        die("give --token-file or --token, not both")
    if no_auth and (token is not None or token_file is not None):
        die("give --no-auth or a token (--token-file, --token), not both")
    # Only what was given on the command line: the rest keeps its default (or environment).
    given: dict[str, Any] = {
        "durability": durability.value if durability is not None else None,
        "model_retries": model_retries,
        "max_http_sessions": max_http_sessions,
        "http_session_idle_timeout": http_session_idle_timeout,
        "max_runs": max_runs,
        "max_runs_per_client": max_runs_per_client,
        "max_subscriptions": max_subscriptions,
        "notification_timeout": notification_timeout,
    }
    overrides = {name: value for name, value in given.items() if value is not None}
    try:
        settings = ServerSettings(
            host=host, port=port, max_subagent_depth=max_depth, no_auth=no_auth, **overrides
        )
    except ValueError as error:
        die(str(error))
    settings.allowed_hosts = list(allowed_host or [])
    if db is not None:
        settings.db_path = db
    if manifests is not None:
        settings.manifests_dir = manifests
    # A flag beats the environment; from the environment, a token and a token file conflict.
    if token_file is not None:
        settings.token, settings.token_file = None, token_file
    elif token is not None:
        settings.token, settings.token_file = token, None
    elif settings.token and settings.token_file is not None and not no_auth:
        die(f"${TOKEN_ENV} and ${TOKEN_FILE_ENV} are both set: keep one")
    if model:
        settings.default_model = model
    auth: HttpAuth | None = None
    if transport == Transport.http:
        try:
            auth = http_auth(settings, token_from_flag=token is not None)
        except (UnsafeBindError, HttpAuthError) as error:
            die(str(error))
    raise_descriptor_limit()  # as servers do; what fits in it bounds runs and connections
    check_database(settings.db_path)
    # Plain log lines, set up before the SDK would install rich's handler: that one imports
    # rich.traceback when it first logs an error, and with no file descriptor left (the
    # very error being logged) the import fails and takes the process down.
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    server = build_server(settings, models=cli_models())
    if auth is not None:
        try:
            auth.save(settings.port)
        except HttpAuthError as error:
            die(str(error))
    print_banner(settings, transport.value)
    if auth is not None and sys.stderr is not None:
        print(auth.banner(), file=sys.stderr, flush=True)
    # What start-up built (modules, schemas) lives as long as the server: keeping it out of
    # the collector's full passes spares every request a pause of tens of milliseconds.
    gc.freeze()
    if auth is not None and auth.origin == "generated":
        _remove_on_sigterm(auth)
    try:
        if transport == Transport.http:
            anyio.run(serve_http, server, settings)
        else:
            anyio.run(run_stdio, server)
    except ManifestError as error:
        die(str(error))
    except KeyboardInterrupt:
        pass
    finally:
        if auth is not None:
            auth.remove()


def _remove_on_sigterm(auth: HttpAuth) -> None:
    """Delete a generated token's file on SIGTERM too, then die of the signal as before.
    (uvicorn stops gracefully on SIGTERM, puts this handler back and raises the signal again.)"""
    import signal

    def on_sigterm(sig: int, frame: FrameType | None) -> None:
        auth.remove()
        signal.signal(sig, signal.SIG_DFL)
        signal.raise_signal(sig)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)
