"""The command line: ``mcp-agent-sessions serve`` and the commands people use in a terminal.

Each command imports what it needs when it runs, so that everyday commands start fast: the
session commands load neither the MCP SDK nor the providers nor the server.
"""

from __future__ import annotations

# First of all, before any import: Ctrl-C while the command line loads (its first fifth of a
# second: typer, pydantic) ends it with the one line and exit code 130 that Ctrl-C later gives,
# not with the traceback of the import it stopped. Through signal's C half, which the
# interpreter has loaded already (`signal` itself imports enum: 12 ms more of that window).
# Only the main thread may set a handler (this module imported from another is left as it
# was); the handler before is put back once the command line is ready to take Ctrl-C itself
# (typer's, then main's, turn it into the same line).
import _signal  # type: ignore[import-not-found]  # no stub: signal's C module
import gc
import os
import sys


def _interrupted_while_loading(_signal_number: int, _frame: object) -> None:
    """The line, and the process ends at once: nothing is open yet, and an exception raised
    here lands in whatever import was under way, which may wrap it in one of its own (a
    class's ``__set_name__`` did) and print that."""
    try:  # stderr may be closed
        sys.stderr.write("\nmcp-agent-sessions: interrupted\n")  # PROG, not imported yet
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # contextlib.suppress: not imported yet
        pass
    os._exit(130)  # INTERRUPTED, not imported yet


try:
    _before_loading = _signal.signal(_signal.SIGINT, _interrupted_while_loading)
    _loading = True
except ValueError:  # not the main thread
    _loading = False
try:
    import contextlib
    import errno

    import typer

    from mcp_agent.cli import catalog, chat, demo, install, run, serve, sessions
    from mcp_agent.cli.common import (
        BAD_INPUT,
        FAILED,
        INTERRUPTED,
        PROG,
        ClosableCommands,
        Interrupted,
        OutputClosed,
        fail,
        plain_help_types,
        say_error,
    )
    from mcp_agent.runtime.settings import SettingError

    plain_help_types()

    def _commands() -> typer.Typer:
        return typer.Typer(
            name=PROG,
            cls=ClosableCommands,
            help="An MCP server that runs agents and keeps every conversation as a session tree.",
            no_args_is_help=True,
            add_completion=False,
            pretty_exceptions_enable=False,
        )

    def _show_version(given: bool) -> None:
        if given:
            import mcp_agent

            typer.echo(f"{PROG} {mcp_agent.__version__}")
            raise typer.Exit()

    def _root(
        context: typer.Context,
        version: bool = typer.Option(
            False,
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Show the version and exit.",
        ),
    ) -> None:
        """An MCP server that runs agents and keeps every conversation as a session tree."""
        # Started with the cyclic collector off (mcp_agent.__main__.run): on for every command
        # but serve, which turns it on once its server is built.
        if context.invoked_subcommand != "serve":
            gc.enable()

    app = _commands()
    app.callback()(_root)
    app.command()(serve.serve)
    # `serve` given first: the same root and command without the others, which typer would
    # otherwise make into click's commands (each option of each) before a server's start.
    serve_app = _commands()
    serve_app.callback()(_root)
    serve_app.command()(serve.serve)
    app.add_typer(sessions.app, name="sessions")
    app.command()(run.run)
    app.command()(chat.chat)
    app.command()(catalog.models)
    app.command()(demo.demo)
    app.command()(install.install)
finally:
    if _loading:
        _signal.signal(_signal.SIGINT, _before_loading)


def main() -> None:
    """The console script. A usage error is one line with a hint (exit 2); Ctrl-C outside a
    run ends the program with one line, `interrupted` (exit 130); output that cannot be written (a full disk) is
    one line too (exit 1), and so is a standard output closed from the start; a pipe whose
    reader has gone (`| head`) ends every command quietly (exit 0)."""
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
        commands = serve_app if sys.argv[1:2] == ["serve"] else app
        code = commands(prog_name=PROG, standalone_mode=False)
        sys.stdout.flush()
    except (typer.Abort, KeyboardInterrupt, Interrupted):  # KeyboardInterrupt: after typer's part
        typer.echo(f"\n{PROG}: interrupted", err=True)
        code = INTERRUPTED
    except OutputClosed:
        code = _output_closed()
    except OSError as error:
        code = _output_failed(error)
    except Exception as error:
        if _interrupted_in_pydantic(error):
            typer.echo(f"\n{PROG}: interrupted", err=True)  # as on Ctrl-C anywhere else
            code = INTERRUPTED
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
    """One line for an error no command handled, typically writing its output (exit 1); and
    stdout pointed at the null device, so that the interpreter's last flush of what could not
    be written does not print a traceback of its own."""
    if error.errno == errno.EPIPE:
        return _output_closed()
    _drop_stdout()
    where = f": {error.filename}" if error.filename else ""
    with contextlib.suppress(OSError):
        say_error(f"{error.strerror or error}{where}")
    return FAILED


def _output_closed() -> int:
    """The reader of our output went away (`| head`): no word, as it is no news to whoever
    closed the pipe, and exit code 0, as ripgrep does, since the command did what it was
    asked. Not 1, which `set -o pipefail` takes for a failure of the command, nor dying of
    SIGPIPE as git does (141), which pipefail takes for one too."""
    _drop_stdout()
    return 0


def _drop_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def is_usage_error(error: Exception) -> bool:
    """A click exception (typer vendors click, so its classes are not importable by name)."""
    return hasattr(error, "format_message") and isinstance(getattr(error, "exit_code", None), int)


def usage_message(error: Exception) -> str:
    message = error.format_message()  # type: ignore[attr-defined]
    context = getattr(error, "ctx", None)
    path = getattr(context, "command_path", None)
    return f"{message} (see `{path} --help`)" if path else message


__all__ = ["app", "fail", "main", "serve_app"]
