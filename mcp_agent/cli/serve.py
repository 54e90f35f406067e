"""``serve``: the MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import gc
from enum import StrEnum
from typing import Annotated, TypedDict

import typer

from mcp_agent.cli.common import DbOption, ManifestsOption, check_database, die


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class Durability(StrEnum):
    full = "full"
    normal = "normal"


class _SettingsOverrides(TypedDict, total=False):
    """ServerSettings fields given on the command line; the others keep their defaults (which
    may come from the environment, read only when not given here)."""

    durability: str
    model_retries: int


def serve(
    transport: Annotated[
        Transport, typer.Option(help="stdio or streamable HTTP")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option(help="HTTP address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
    db: DbOption = None,
    manifests: ManifestsOption = None,
    token: Annotated[
        str | None,
        typer.Option(help="require this bearer token over HTTP (or set MCP_AGENT_TOKEN)"),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="default model, provider:model-id (or MCP_AGENT_MODEL)")
    ] = None,
    max_depth: Annotated[int, typer.Option(help="how deep sub-agents may nest")] = 3,
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
    from mcp_agent.runtime.settings import ServerSettings
    from mcp_agent.server.app import build_server, print_banner
    from mcp_agent.server.stdio import run_stdio
    from mcp_agent.server.streamable_http import UnsafeBindError, check_bind, serve_http

    overrides: _SettingsOverrides = {}
    if durability is not None:
        overrides["durability"] = durability.value
    if model_retries is not None:
        overrides["model_retries"] = model_retries
    try:
        settings = ServerSettings(host=host, port=port, max_subagent_depth=max_depth, **overrides)
    except ValueError as error:
        die(str(error))
    settings.allowed_hosts = list(allowed_host or [])
    if db is not None:
        settings.db_path = db
    if manifests is not None:
        settings.manifests_dir = manifests
    if token:
        settings.token = token
    if model:
        settings.default_model = model
    if transport == Transport.http:
        try:
            check_bind(settings)
        except UnsafeBindError as error:
            die(str(error))
    check_database(settings.db_path)
    server = build_server(settings, models=cli_models())
    print_banner(settings, transport.value)
    # What start-up built (modules, schemas) lives as long as the server: keeping it out of
    # the collector's full passes spares every request a pause of tens of milliseconds.
    gc.freeze()
    try:
        if transport == Transport.http:
            anyio.run(serve_http, server, settings)
        else:
            anyio.run(run_stdio, server)
    except ManifestError as error:
        die(str(error))
    except KeyboardInterrupt:
        pass
