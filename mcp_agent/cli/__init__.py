"""The command line: ``mcp-agent-sessions serve`` and the commands people use in a terminal.

Each command imports what it needs when it runs, so that everyday commands start fast: the
session commands load neither the MCP SDK nor the providers nor the server.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def _quiet_ctrl_c() -> Iterator[None]:
    """Ctrl-C while the command line loads (its first fifth of a second: typer, pydantic)
    ends it quietly with exit code 130, as Ctrl-C later does, not with the traceback of the
    import it stopped. The handler before is put back after; only the main thread may set one
    (this module imported from another is left as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(_signal: int, _frame: FrameType | None) -> None:
        raise SystemExit(130)  # INTERRUPTED, not yet imported

    before = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


with _quiet_ctrl_c():
    import typer

    from mcp_agent.cli import catalog, chat, demo, install, run, serve, sessions
    from mcp_agent.cli.common import (
        BAD_INPUT,
        FAILED,
        INTERRUPTED,
        PROG,
        fail,
        plain_help_types,
        say_error,
    )
    from mcp_agent.runtime.settings import SettingError

    plain_help_types()

app = typer.Typer(
    name=PROG,
    help="An MCP server that runs agents and keeps every conversation as a session tree.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(context: typer.Context) -> None:
    """An MCP server that runs agents and keeps every conversation as a session tree."""
    # Started with the cyclic collector off (mcp_agent.__main__.run): on for every command but
    # serve, which turns it on once its server is built.
    if context.invoked_subcommand != "serve":
        gc.enable()


app.command()(serve.serve)
app.add_typer(sessions.app, name="sessions")
app.command()(run.run)
app.command()(chat.chat)
app.command()(catalog.models)
app.command()(demo.demo)
app.command()(install.install)


def main() -> None:
    """The console script. A usage error is one line with a hint (exit 2); Ctrl-C outside a
    run ends the program quietly (exit 130); output that cannot be written (a full disk, a
    closed pipe) is one line too (exit 1), and so is a standard output closed from the start."""
    # Started with a standard stream closed (`<&-`, `2>&-`), Python holds None for it: chat's
    # reading thread died and left the chat waiting for ever, `run -` and every print raised.
    # No input reads as empty, no stderr as the null device, which takes the free descriptor,
    # so that no file opened later lands on 0 or 2 and gets what is meant for the stream.
    if sys.stdin is None:
        sys.stdin = open(os.devnull, encoding="utf-8")  # for the whole run
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    if sys.stdout is None:
        typer.echo(f"{PROG}: standard output is closed; nothing was done", err=True)
        sys.exit(FAILED)
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe whose encoding cannot hold a character ("…" in ASCII) gets an
        # escape for it rather than a UnicodeEncodeError half-way through the output.
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    try:
        code = app(prog_name=PROG, standalone_mode=False)
        sys.stdout.flush()
    except typer.Abort:
        typer.echo(f"\n{PROG}: interrupted", err=True)
        code = INTERRUPTED
    except OSError as error:
        code = _output_failed(error)
    except Exception as error:
        if _interrupted_in_pydantic(error):
            code = INTERRUPTED  # quietly, as typer ends on Ctrl-C anywhere else
        elif isinstance(error, SettingError):  # e.g. a bad MCP_AGENT_LEASE_SECONDS
            say_error(str(error))
            code = BAD_INPUT
        elif not is_usage_error(error):
            raise
        else:
            code = getattr(error, "exit_code", BAD_INPUT)
            if type(error).__name__ != "NoArgsIsHelpError":  # the help was shown instead
                say_error(usage_message(error))
    sys.exit(code if isinstance(code, int) else 0)


def _interrupted_in_pydantic(error: Exception) -> bool:
    """Ctrl-C while pydantic ran one of our serializers (each entry stored goes through one):
    pydantic-core turns the KeyboardInterrupt into an error of its own, in words only."""
    return type(error).__name__ == "PydanticSerializationError" and (
        "KeyboardInterrupt" in str(error)
    )


def _output_failed(error: OSError) -> int:
    """One line for an error no command handled, typically writing its output; and stdout
    pointed at the null device, so that the interpreter's last flush of what could not be
    written does not print a traceback of its own."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if error.errno != errno.EPIPE:  # a closed pipe (| head) is no news to whoever closed it
        where = f": {error.filename}" if error.filename else ""
        with contextlib.suppress(OSError):
            say_error(f"{error.strerror or error}{where}")
    return FAILED


def is_usage_error(error: Exception) -> bool:
    """A click exception (typer vendors click, so its classes are not importable by name)."""
    return hasattr(error, "format_message") and isinstance(getattr(error, "exit_code", None), int)


def usage_message(error: Exception) -> str:
    message = error.format_message()  # type: ignore[attr-defined]
    context = getattr(error, "ctx", None)
    path = getattr(context, "command_path", None)
    return f"{message} (see `{path} --help`)" if path else message


__all__ = ["app", "fail", "main"]
