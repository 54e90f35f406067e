"""The command line: ``mcp-agent-sessions serve`` and the commands people use in a terminal.

Each command imports only what it needs, so that everyday commands start fast.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="mcp-agent-sessions",
    help="An MCP server that runs agents and keeps every conversation as a session tree.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="SQLite database of sessions (default: $MCP_AGENT_DB or the per-user data dir)",
    ),
]


@app.callback()
def _root() -> None:
    """An MCP server that runs agents and keeps every conversation as a session tree."""


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"mcp-agent-sessions: {message}", err=True)
    return typer.Exit(code)


@app.command()
def serve(
    transport: Annotated[
        Transport, typer.Option(help="stdio or streamable HTTP")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option(help="HTTP address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
    db: DbOption = None,
    manifests: Annotated[
        Path | None,
        typer.Option(help="folder with servers.json and agents/*.toml (default: shipped)"),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(help="require this bearer token over HTTP (or set MCP_AGENT_TOKEN)"),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="default model, provider:model-id (or MCP_AGENT_MODEL)")
    ] = None,
    max_depth: Annotated[int, typer.Option(help="how deep sub-agents may nest")] = 3,
) -> None:
    """Run the MCP server (stdio by default)."""
    import anyio

    from mcp_agent.manifests import ManifestError
    from mcp_agent.server.app import build_server, print_banner
    from mcp_agent.server.http import UnsafeBindError, check_bind, serve_http
    from mcp_agent.server.settings import ServerSettings

    settings = ServerSettings(host=host, port=port, max_subagent_depth=max_depth)
    if db is not None:
        settings.db_path = db
    if manifests is not None:
        if not manifests.is_dir():
            raise fail(f"--manifests {manifests} is not a folder")
        settings.manifests_dir = manifests
    if token:
        settings.token = token
    if model:
        settings.default_model = model
    if transport == Transport.http:
        try:
            check_bind(settings)
        except UnsafeBindError as error:
            raise fail(str(error)) from None
    server = build_server(settings)
    print_banner(settings, transport.value)
    try:
        if transport == Transport.http:
            anyio.run(serve_http, server, settings)
        else:
            anyio.run(server.run_stdio_async)
    except ManifestError as error:
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        pass


def main() -> None:
    app()


if __name__ == "__main__":
    main()
