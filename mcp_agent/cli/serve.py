"""``serve``: the MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import copy
import gc
import sys
import threading
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from mcp_agent.cli.common import (
    INTERRUPTED,
    PROG,
    TERMINATED,
    DbOption,
    ManifestsOption,
    check_database,
    database_location,
    die,
    home_path,
    named_store,
    plain_logging,
    say_error,
)
from mcp_agent.cli.stderr_log import log_to_stderr_off_the_loop
from mcp_agent.wire import one_line

if TYPE_CHECKING:
    from mcp_agent.server.http_auth import HttpAuth


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class SessionsLayout(StrEnum):
    pi = "pi"
    flat = "flat"


class Durability(StrEnum):
    full = "full"
    normal = "normal"


def _named(option: Any, metavar: str) -> Any:
    """A shared option (``DbOption``...) with a metavar a person would write, not a type."""
    info = copy.copy(get_args(option)[1])
    info.metavar = metavar
    return info


# The flags that mean something only to the HTTP transport.
_HTTP_ONLY = (
    "host",
    "port",
    "token_file",
    "token",
    "no_auth",
    "max_http_sessions",
    "http_session_idle_timeout",
    "http_send_buffer",
    "allowed_host",
)


def _given(context: typer.Context, names: tuple[str, ...]) -> list[str]:
    """Which of these parameters of the running command were given on its command line, as
    flags (``--no-auth``), not taken from their defaults or the environment."""
    given = []
    for parameter in context.command.params:
        if parameter.name not in names:
            continue
        source = context.get_parameter_source(parameter.name)
        if source is not None and source.name == "COMMANDLINE":
            given.append(max(parameter.opts, key=len))
    return given


def serve(
    context: typer.Context,
    transport: Annotated[
        Transport, typer.Option(metavar="stdio|http", help="stdio or streamable HTTP")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option(metavar="HOST", help="HTTP address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="HTTP port (0 to 65535)")] = 8765,
    db: Annotated[str | None, _named(DbOption, "FILE|URL")] = None,
    manifests: Annotated[Path | None, _named(ManifestsOption, "FOLDER")] = None,
    sessions_dir: Annotated[
        Path | None,
        typer.Option(
            metavar="FOLDER",
            help="keep sessions as JSONL files in this folder instead of the database (which "
            "then holds only run leases), e.g. pi's ~/.pi/agent/sessions: pi's sessions are "
            "listed, read and continued, and pi opens the ones made here",
            show_default=False,
        ),
    ] = None,
    sessions_layout: Annotated[
        SessionsLayout | None,
        typer.Option(
            metavar="pi|flat",
            help="where --sessions-dir gets new sessions: pi (a folder per working directory, "
            "pi's file names) or flat (ID.jsonl); default: pi for ~/.pi/agent/sessions or a "
            "folder that holds pi's, else flat",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="HTTP: require the bearer token in this file (or set MCP_AGENT_TOKEN_FILE); "
            "without a token, serve generates one and prints it",
            show_default=False,
            callback=home_path,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN",
            help="HTTP: require this bearer token (or set MCP_AGENT_TOKEN); other users can "
            "read a command line, so prefer --token-file",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            metavar="",
            help="HTTP: no token at all, so any user of this machine can use the server "
            "(loopback addresses only)",
        ),
    ] = False,
    max_http_sessions: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="HTTP: sessions (2025 handshake) open at once; a new client beyond it closes "
            "the session idle the longest, or gets 503 when every one is busy; 0: no limit "
            "(default 1000, or MCP_AGENT_MAX_HTTP_SESSIONS)",
            show_default=False,
        ),
    ] = None,
    http_session_idle_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="HTTP: close a session with no request in flight for this long (an open "
            "event stream or a running call keeps it); 0: never (default 300, or "
            "MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT)",
            show_default=False,
        ),
    ] = None,
    http_send_buffer: Annotated[
        int | None,
        typer.Option(
            metavar="BYTES",
            help="HTTP: the kernel send buffer of each connection (the kernel doubles it); a "
            "client that stops reading is noticed once this much waits for it, 4096 to 4194304 "
            "(default 262144, or MCP_AGENT_HTTP_SEND_BUFFER)",
            show_default=False,
        ),
    ] = None,
    max_subscriptions: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="resources one client (2025 handshake) may subscribe to at once, and one "
            "listen stream (2026-07-28) may follow; 0: no limit (default 1000, or "
            "MCP_AGENT_MAX_SUBSCRIPTIONS)",
            show_default=False,
        ),
    ] = None,
    notification_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="a client (2025 handshake) whose notification is not sent within this long, "
            "because it stopped reading, gets no more (default 5, or "
            "MCP_AGENT_NOTIFICATION_TIMEOUT)",
            show_default=False,
        ),
    ] = None,
    client_stream_wait: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="a run asking its client's model (2025 HTTP) once no call waits for it asks "
            "on the GET stream, waiting this long for the client to open one (default 30, or "
            "MCP_AGENT_CLIENT_STREAM_WAIT)",
            show_default=False,
        ),
    ] = None,
    progress_interval: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="a client waiting on agent_run with progress hears from it at least this "
            "often, while the model or a tool is silent (at least 0.1; default 15, or "
            "MCP_AGENT_PROGRESS_INTERVAL)",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="PROVIDER:MODEL",
            help="the model of runs that name none, e.g. openai:gpt-4o-mini or scripted:echo "
            f"(or MCP_AGENT_MODEL); `{PROG} models` lists them",
        ),
    ] = None,
    max_depth: Annotated[
        int,
        typer.Option(
            metavar="N", help="how deep sub-agents may nest; 0: no sub-agents", show_default=True
        ),
    ] = 3,
    max_runs: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="agent runs under way at once in this server; a start beyond it is refused; "
            "0: no limit (default 64, or MCP_AGENT_MAX_RUNS)",
            show_default=False,
        ),
    ] = None,
    max_runs_per_client: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="agent runs under way at once for one client; 0: no limit (default 16, or "
            "MCP_AGENT_MAX_RUNS_PER_CLIENT)",
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="HOST", help="a host name HTTP clients may use besides --host (repeatable)"
        ),
    ] = None,
    model_retries: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="run again a run that ended on a passing model error (overloaded, a broken "
            "stream) this many times; 0: never (default 3, or MCP_AGENT_MODEL_RETRIES)",
        ),
    ] = None,
    durability: Annotated[
        Durability | None,
        typer.Option(
            metavar="full|normal",
            help="full (default): every append survives a power loss; normal: a killed "
            "process, not a power cut (or MCP_AGENT_DURABILITY)",
        ),
    ] = None,
) -> None:
    """Run the MCP server (stdio by default).

    Every flag is checked before the server starts: a bad one is one line on stderr, exit 2."""
    collector_off_while_starting(context)
    import anyio

    from mcp_agent.cli.demo import cli_models
    from mcp_agent.manifests import ManifestError
    from mcp_agent.runtime.descriptors import raise_descriptor_limit
    from mcp_agent.runtime.settings import TOKEN_ENV, TOKEN_FILE_ENV, ServerSettings
    from mcp_agent.server.app import build_server, print_banner
    from mcp_agent.server.http_auth import HttpAuthError, UnsafeBindError, http_auth, viewer_link

    if transport == Transport.stdio and (http_only := _given(context, _HTTP_ONLY)):
        # Else `serve --port 8080` served stdio, leaving the terminal (or a launcher) waiting.
        verb = "is" if len(http_only) == 1 else "are"
        die(f"{', '.join(http_only)} {verb} for --transport http: add that (stdio is the default)")
    if token is not None and token_file is not None:
        die("give --token-file or --token, not both")
    if no_auth and (token is not None or token_file is not None):
        die("give --no-auth or a token (--token-file, --token), not both")
    if transport == Transport.http and not 0 <= port <= 65535:
        die(f"--port must be 0 to 65535, not {port}")
    # Only what was given on the command line: the rest keeps its default (or environment).
    given: dict[str, Any] = {
        "durability": durability.value if durability is not None else None,
        "model_retries": model_retries,
        "max_http_sessions": max_http_sessions,
        "http_session_idle_timeout": http_session_idle_timeout,
        "http_send_buffer": http_send_buffer,
        "max_runs": max_runs,
        "max_runs_per_client": max_runs_per_client,
        "max_subscriptions": max_subscriptions,
        "notification_timeout": notification_timeout,
        "client_stream_wait": client_stream_wait,
        "progress_interval": progress_interval,
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
        settings.set_database(database_location(db))
    if manifests is not None:
        settings.manifests_dir = manifests
    if sessions_layout is not None and sessions_dir is None:
        die("--sessions-layout needs --sessions-dir FOLDER")
    if sessions_dir is not None:
        check_sessions_dir(sessions_dir)
        settings.sessions_dir = sessions_dir.expanduser()
        settings.sessions_layout = sessions_layout.value if sessions_layout else None
    # A flag beats the environment; from the environment, a token and a token file conflict.
    if token_file is not None:
        settings.token, settings.token_file = None, token_file
    elif token is not None:
        settings.token, settings.token_file = token, None
    elif settings.token and settings.token_file is not None and not no_auth:
        die(f"${TOKEN_ENV} and ${TOKEN_FILE_ENV} are both set: keep one")
    if model:
        settings.default_model = model
    check_manifests(manifests)
    keyless = check_model(settings.default_model, from_flag=bool(model))
    named_store(db, "--db", create=True)
    auth: HttpAuth | None = None
    if transport == Transport.http:
        try:
            auth = http_auth(settings, token_from_flag=token is not None)
        except (UnsafeBindError, HttpAuthError) as error:
            die(str(error))
    raise_descriptor_limit()  # as servers do; what fits in it bounds runs and connections
    check_database(settings.db_url or settings.db_path)
    plain_logging()
    # A client that never reads stderr must not freeze the server once the pipe is full (what
    # is queued at the end is written by logging's own flush at exit, waiting at most 1 s,
    # and what never was is counted on the last line).
    log_to_stderr_off_the_loop()
    server = build_server(settings, models=cli_models())
    if transport == Transport.http:  # before a token file is written for it
        settings.port = check_port_free(settings.host, settings.port)
    if auth is not None:
        try:
            auth.save(settings.port)
        except HttpAuthError as error:
            die(str(error))
    print_banner(settings, transport.value)
    if keyless is not None:
        say_error(keyless)
    if auth is not None and sys.stderr is not None:
        print(auth.banner(), file=sys.stderr, flush=True)
        print(viewer_link(auth, settings), file=sys.stderr, flush=True)
    tune_collector()
    if auth is not None and auth.origin == "generated":
        _remove_on_sigterm(auth)
    try:
        if transport == Transport.http:
            # HTTP's own modules (uvicorn's protocols among them): not loaded to serve stdio.
            from mcp_agent.server.streamable_http import event_loop_options, serve_http

            anyio.run(serve_http, server, settings, backend_options=event_loop_options())
        else:
            stopped_by = anyio.run(_stdio_until_sigterm, server)
            if stopped_by is not None:
                raise typer.Exit(INTERRUPTED if stopped_by == "SIGINT" else TERMINATED)
    except ManifestError as error:
        die(str(error))
    except KeyboardInterrupt:  # over HTTP: uvicorn stopped at Ctrl-C, then raised it again
        raise typer.Exit(INTERRUPTED) from None
    finally:
        if auth is not None:
            auth.remove()


async def _stdio_until_sigterm(server: Any) -> str | None:
    """Serve over stdio until the input ends, or until SIGTERM (a client that stops its
    server so, a supervisor) or SIGINT (Ctrl-C in the terminal of a host that started it,
    which reaches its whole process group): then the server stops as at the end of its input,
    its runs and downstream servers with it, these given at most ``HURRIED_KILL`` seconds
    after the signal (SIGTERM's default would end it at once, and leave those servers
    running; SIGINT's cancelled it mid-request, with a traceback). The name of the signal
    that stopped it, if one did; a second Ctrl-C interrupts the stop itself."""
    import signal

    import anyio

    from mcp_agent.server.stdio import StdioStop, run_stdio
    from mcp_agent.sessions.sqlite.database import stop_waiting_for_locks

    stop = StdioStop()
    stopped_by: list[str] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for received in signals:
                    # Not a cancellation of the server: its runs must record their end.
                    stopped_by.append(signal.Signals(received).name)
                    stop.stop()
                    # A request waiting for another process's lock on the database (the
                    # server cannot cancel it) ends at once, nothing written: not the stop
                    # held for up to the busy timeout.
                    stop_waiting_for_locks()
                    return

        group.start_soon(watch)
        await run_stdio(server, stop=stop)
        group.cancel_scope.cancel()
    return stopped_by[0] if stop.stopped and stopped_by else None


# The cyclic collector's thresholds while serving. A request allocates a few thousand
# container objects (models, dicts, frames) that die by reference counting; at Python's
# default of 700 the collector ran every few requests and took about 7% of the server's CPU
# under load (50 HTTP clients). Fewer, larger young collections find the same garbage.
COLLECTOR_THRESHOLDS = (20_000, 20, 20)


def collector_off_while_starting(context: typer.Context) -> None:
    """No cyclic collection while the server starts (``tune_collector`` turns the collector
    on once it is built; so does the end of the command, whatever ends it). Start-up imports
    the SDK and our modules and builds the tools' schemas: about 160,000 objects, nearly all
    kept for the server's life, through which the collector ran some 200 times (about 15% of
    the CPU of a start, measured) to free about 7,000 (1.2 MB, kept instead, once)."""
    gc.disable()
    context.call_on_close(gc.enable)


def tune_collector() -> None:
    """Set the collector for a long-running server: what start-up built (modules, schemas)
    lives as long as the server, so it is kept out of every full pass (a pause of tens of
    milliseconds each), and young collections run less often; the collector, off while the
    server started, is on from here."""
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    gc.enable()


# --- the checks before start-up ---------------------------------------------------------------


def check_manifests(folder: Path | None) -> None:
    """The manifests load as the server will load them (the shipped ones without a folder)."""
    from mcp_agent.manifests import ManifestError, load_agents, load_servers, shipped_manifests_dir

    if folder is not None and not folder.is_dir():
        why = "it is a file" if folder.exists() else "it does not exist"
        die(f"--manifests {folder} is not a folder ({why}); pass a folder with agents/*.toml")
    try:
        load_agents(folder or shipped_manifests_dir())
        load_servers(folder or shipped_manifests_dir())
    except (ManifestError, OSError) as error:
        flag = "--manifests" if folder is not None else "the shipped manifests"
        die(f"{flag}: {one_line(error)} (fix the manifest or pass another --manifests folder)")


def check_model(name: str | None, *, from_flag: bool) -> str | None:
    """The default model names a known provider (and, for the scripted one, a known model),
    resolved as a run resolves it. A missing API key is no error here (an agent may name a
    model of its own, the client's may be asked): the warning to print, if its key is unset."""
    from mcp_agent.cli.demo import cli_models
    from mcp_agent.runtime.errors import ModelUnavailable
    from mcp_agent.runtime.models import is_client_model, missing_key, resolve_run_model
    from mcp_agent.runtime.settings import MODEL_ENV

    if not name or is_client_model(name):
        return None  # the MCP client's own model: whether it can be used depends on each client
    models = cli_models()
    source = f"--model {name}" if from_flag else f"${MODEL_ENV} ({name})"
    try:
        chosen, model, _ = resolve_run_model(name, None, None, models)
    except ModelUnavailable as error:
        die(f"{source}: {one_line(error)}; `{PROG} models` lists the known models")
    env = None if chosen in models else missing_key(model.provider)
    if env is None:
        return None
    # The server reads its environment once: a run on this model is refused until it is
    # started again with the key, and a user who just set up a client should hear it now.
    return (
        f"warning: {source} needs an API key and {env} is not set: runs on it are refused"
        " until the server is started with it"
    )


def check_port_free(host: str, port: int) -> int:
    """The port to serve on: ``port``, or with 0 a free one (the banner, the token file and
    the viewer link name the real one). Checked before anything is written for it: another
    server on the port would fail this one only once it binds, after the token file that the
    other server's clients read was overwritten; a host that does not resolve, or is no
    address of this machine, fails the same way."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as error:
        die(f"--host {host}: cannot be resolved ({getattr(error, 'strerror', None) or error})")
    family, kind, protocol, _, address = infos[0]
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                die(f"port {port} on {host} is in use (another server?); choose another --port")
            die(f"cannot listen on {host} port {port}: {error.strerror or error}")
        # Port 0: the one the system gave; free again once the probe closes, taken at start-up.
        return int(probe.getsockname()[1])


def check_sessions_dir(folder: Path) -> None:
    """The folder of --sessions-dir exists (a typo must not create folders) and is a folder."""
    path = folder.expanduser()
    if not path.exists():
        die(f"--sessions-dir {folder}: the folder does not exist; create it first")
    if not path.is_dir():
        die(f"--sessions-dir {folder}: it is a file, not a folder")


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
