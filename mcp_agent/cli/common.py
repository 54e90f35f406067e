"""What every command shares: options, the database, error messages and exit codes, output.

Only the standard library, typer and rich are imported here: the everyday commands must start
without loading the MCP SDK, the providers or the server.
"""

from __future__ import annotations

import errno
import json
import logging
import sys
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from mcp_agent.paths import (
    DB_ENV,
    default_db_path,
    default_db_url,
    is_database_url,
    shown_url,
    user_db_path,
)

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, JustifyMethod, RenderableType, RenderResult
    from rich.segment import Segment

    from mcp_agent.runtime.change_feed import Announcer
    from mcp_agent.sessions.repo import SessionRepo
    from mcp_agent.sessions.session import Session

PROG = "mcp-agent-sessions"
# Exit codes: 0 ok, 1 failure at run time, 2 bad usage or bad input, 130 interrupted (Ctrl-C),
# 143 stopped by SIGTERM.
FAILED = 1
BAD_INPUT = 2
INTERRUPTED = 130
TERMINATED = 143  # stopped by SIGTERM (the shell's 128 + its number)


def plain_logging() -> None:
    """Warnings (a model's rate limit and the wait it causes, a downstream server's trouble) as
    one plain line each on stderr. Set up before the MCP SDK would install rich's handler,
    which draws each record over several lines with a time and a source line, logs at INFO,
    and imports rich.traceback when it first logs an error: with no file descriptor left (the
    very error being logged) that import fails and takes the process down."""
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="FILE|URL",
        help=f"SQLite database file of sessions, or a PostgreSQL URL postgresql://… shared by"
        f" server replicas (default: ${DB_ENV} or the per-user data dir)",
        show_default=False,
    ),
]
# The ``sessions`` commands also read and write a folder of pi JSONL files (pi's own
# ~/.pi/agent/sessions among them): they need no leases, no runs and no search index.
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="FILE|URL|FOLDER",
        help=f"SQLite database file of sessions, a PostgreSQL URL postgresql://…, or an existing"
        f" folder of pi JSONL session files such as ~/.pi/agent/sessions (default: ${DB_ENV} or"
        f" the per-user data dir)",
        show_default=False,
    ),
]


def home_path(value: Path | None) -> Path | None:
    """A path flag's ``~`` read as home: the shell leaves it as it is after an ``=``
    (``--manifests=~/agents``), which was taken for a folder named ``~``."""
    return value.expanduser() if value is not None else None


ManifestsOption = Annotated[
    Path | None,
    typer.Option(
        help="folder with servers.json and agents/*.toml (default: shipped)", callback=home_path
    ),
]


def utf8_text(value: str | None) -> str | None:
    """A command line's text that is to be stored or looked up (an id, a name), refused as
    a bad parameter (exit 2) when it is not UTF-8: Python hands such bytes over as lone
    surrogates, which no database, file or JSON can hold."""
    from mcp_agent.wire import lone_surrogate

    if value is not None and lone_surrogate(value) is not None:
        raise typer.BadParameter("is not valid UTF-8 text (check the terminal's encoding)")
    return value


def id_text(value: str | None) -> str | None:
    """A session or entry id from the command line: UTF-8 (``utf8_text``), without the spaces
    or line end around it that a paste or a ``$(…)`` brings along (an id has none: it was not
    found, in a message that looked just like the id), and not empty (an unset variable)."""
    if value is None:
        return None
    value = (utf8_text(value) or "").strip()
    if not value:
        raise typer.BadParameter("is empty (an unset shell variable?); give an id")
    return value


JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
SessionArg = Annotated[
    str, typer.Argument(metavar="ID", help="a session id (sessions list)", callback=id_text)
]


def say_error(message: str) -> None:
    """Print an error to stderr, its control characters escaped: an error quotes what the user
    gave, a session, a file name or a server."""
    from mcp_agent.wire import escape_controls

    typer.echo(f"{PROG}: {escape_controls(message)}", err=True)


def fail(message: str, code: int = BAD_INPUT) -> typer.Exit:
    """Print a one-line error to stderr; raise the returned Exit."""
    say_error(message)
    return typer.Exit(code)


def die(message: str, code: int = BAD_INPUT) -> NoReturn:
    raise fail(message, code)


class OutputClosed(Exception):
    """The reader of standard output (or error) has gone: `| head` has what it wanted. Every
    command ends then as ripgrep does, quietly with exit code 0 (see ``cli.main``)."""


def closable(console: Console) -> Console:
    """``console`` raising :class:`OutputClosed` when its pipe is closed; rich's own way
    exits with code 1 at once, where a command writing with ``sys.stdout`` ended with 0 or 1
    as its last write happened to fall."""

    def closed() -> None:
        console.quiet = True
        raise OutputClosed

    console.on_broken_pipe = closed  # type: ignore[method-assign]
    return console


class Interrupted(Exception):
    """Ctrl-C in a command: typer turns a KeyboardInterrupt into exit code 130 without a word,
    so it is carried past typer as this, and ``cli.main`` says the command was interrupted."""


class ClosableCommands(TyperGroup):
    """The commands, where a write to a closed pipe becomes :class:`OutputClosed` before
    typer turns it into exit code 1, and Ctrl-C :class:`Interrupted`."""

    def invoke(self, ctx: Any) -> Any:
        import errno

        try:
            return super().invoke(ctx)
        except OSError as error:
            if error.errno != errno.EPIPE:
                raise
            raise OutputClosed from error
        except KeyboardInterrupt as error:
            raise Interrupted from error


# Markup is off: session text such as "[bold]" or "[Paris]" must print as written. Styles are
# given with style= or rich Text objects instead.
@cache
def out() -> Console:
    from rich.console import Console

    return closable(Console(highlight=False, markup=False))


@cache
def err() -> Console:
    from rich.console import Console

    return closable(Console(stderr=True, highlight=False, markup=False))


def at_least(console: Console, width: int) -> Console:
    """``console``, or one as wide as ``width`` where it is narrower: a table's rows too wide
    for the terminal even at their least are printed at their width, each wrapped by the
    terminal (cropped, an id would be cut with no sign of it)."""
    if width <= console.width:
        return console
    from rich.console import Console

    return closable(Console(highlight=False, markup=False, width=width))


def print_table(
    headers: list[str],
    rows: list[tuple[list[str], str | None]],
    flexible: int | None,
    right: frozenset[str] = frozenset(),
    below: int = 0,
    notes: Sequence[str | None] = (),
) -> None:
    """A borderless table on stdout; ``notes``: a line to show under each row (dim, the
    table's whole width, cut with an ellipsis), or None. Every column keeps its full width except ``flexible``,
    which gets what is left and is cut with an ellipsis (rich alone would rather drop narrow
    columns than cut a long one); None: no column may be cut (each holds what people copy).
    ``rows`` are (cells, style). A terminal too narrow even for that gets the rows at their
    width, each wrapped by the terminal: cropped to its width, an id would be cut with no sign
    of it, and the columns after it would be gone. ``below``: when what is left for the last
    column, ``flexible``, is fewer cells than that, it goes on a line of its own under each
    row, indented."""
    from rich.table import Table

    widths = [max(len(h), *(len(cells[i]) for cells, _ in rows)) for i, h in enumerate(headers)]
    fixed = sum(w for i, w in enumerate(widths) if i != flexible) + 2 * (len(headers) - 1)
    console = out()
    if fixed - (2 if flexible is not None else 0) > console.width:
        _print_records(headers, rows, flexible, notes, console)
        return
    if flexible == len(headers) - 1 and min(widths[-1], below) > console.width - fixed:
        _print_stacked(headers, rows, right, fixed - 2, notes)
        return
    room = fixed + (min(12, widths[flexible]) if flexible is not None else 0)
    console = at_least(console, room)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for index, (header, width) in enumerate(zip(headers, widths, strict=True)):
        justify: JustifyMethod = "right" if header in right else "left"
        if index == flexible:
            table.add_column(
                header, no_wrap=True, overflow="ellipsis", max_width=max(12, console.width - fixed)
            )
        else:
            table.add_column(header, no_wrap=True, min_width=width, justify=justify)
    for cells, style in rows:
        table.add_row(*cells, style=style)
    console.print(Unpadded(table, notes))


def _print_records(
    headers: list[str],
    rows: list[tuple[list[str], str | None]],
    flexible: int | None,
    notes: Sequence[str | None],
    console: Console,
) -> None:
    """``print_table``'s rows for a terminal narrower than their columns (40 columns: lines
    of 66 and 75 cells, which the terminal broke anywhere): each row its first cell whole on
    a line, then its other cells as "Header value", as many on a line as fit, broken between
    them; the ``flexible`` cell on a line of its own, cut with an ellipsis, and the note."""
    from rich.text import Text

    width = max(1, console.width - 2)
    for index, (cells, style) in enumerate(rows):
        console.print(Text(cells[0], style=style or ""), soft_wrap=True)
        lines: list[str] = []
        for column in range(1, len(headers)):
            if column == flexible or not cells[column]:
                continue
            said = f"{headers[column]} {cells[column]}"
            if lines and len(lines[-1]) + 3 + len(said) <= width:
                lines[-1] += " · " + said
            else:
                lines.append(said)
        for line in lines:
            console.print(Text("  " + line, style="dim"), soft_wrap=True)
        if flexible not in (None, 0):
            shown = Text("  " + cells[flexible], style=style or "")
            console.print(shown, no_wrap=True, overflow="ellipsis")
        note = notes[index] if index < len(notes) else None
        if note:
            console.print(Text(note, style="dim"), no_wrap=True, overflow="ellipsis")


def _print_stacked(
    headers: list[str],
    rows: list[tuple[list[str], str | None]],
    right: frozenset[str],
    wide: int,
    notes: Sequence[str | None],
) -> None:
    """``print_table``'s rows with their last cell on a line of its own under each, indented
    and cut with an ellipsis at the width (``wide``: the other columns' width), and each
    row's note (if any) under that."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for header in headers[:-1]:
        table.add_column(header, no_wrap=True, justify="right" if header in right else "left")
    for cells, style in rows:
        table.add_row(*cells[:-1], style=style)
    console = at_least(out(), wide)
    lines = [
        Text.assemble(*((s.text, s.style or "") for s in line))
        for line in unpadded_lines(console, table, console.options)
    ]
    for index, (line, (cells, style)) in enumerate(
        zip(lines, [([headers[-1]], "bold"), *rows], strict=True)
    ):
        console.print(line, soft_wrap=True)
        console.print(Text("  " + cells[-1], style=style or ""), no_wrap=True, overflow="ellipsis")
        note = notes[index - 1] if 0 < index <= len(notes) else None
        if note:
            console.print(Text(note, style="dim"), no_wrap=True, overflow="ellipsis")


class Unpadded:
    """``renderable`` drawn without the blanks rich leaves at the ends of its lines (a table's
    cells padded to their column, a wrapped line's last space): piped to a file, a listing's
    lines ended in runs of spaces. ``notes``: a line under each line after the first (a
    table's rows), or None."""

    def __init__(self, renderable: RenderableType, notes: Sequence[str | None] = ()) -> None:
        self.renderable = renderable
        self.notes = notes

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment
        from rich.text import Text

        for index, line in enumerate(unpadded_lines(console, self.renderable, options)):
            yield from line
            yield Segment.line()
            note = self.notes[index - 1] if 0 < index <= len(self.notes) else None
            if note:
                yield Text(note, style="dim", no_wrap=True, overflow="ellipsis", end="\n")


def unpadded_lines(
    console: Console, renderable: RenderableType, options: ConsoleOptions
) -> Iterator[list[Segment]]:
    """The lines of ``renderable`` without the blanks at their ends (see ``Unpadded``)."""
    from rich.segment import Segment

    for line in console.render_lines(renderable, options, pad=False):
        while line and not line[-1].text.rstrip(" "):
            line.pop()
        if line:
            last = line.pop()
            line.append(Segment(last.text.rstrip(" "), last.style, last.control))
        yield line


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 message``, ``2 messages`` (``nouns``: the plural, when it is not ``noun`` + s)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def emit_json_stream(fields: dict[str, Any], key: str, items: Iterable[Any]) -> None:
    """``fields`` and ``key`` holding ``items``, written as ``emit_json`` writes the one object,
    each item as it comes (a list of a million need not be held)."""

    def indented(value: Any, by: int) -> str:
        return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + " " * by)

    write = sys.stdout.write
    write("{\n")
    for name, value in fields.items():
        write(f"  {json.dumps(name)}: {indented(value, 2)},\n")
    write(f"  {json.dumps(key)}: [")
    separator = "\n    "
    for item in items:
        write(separator + indented(item, 4))
        separator = ",\n    "
    write("]\n}\n" if separator == "\n    " else "\n  ]\n}\n")


def database_location(db: str | Path | None) -> str | Path:
    """``--db``, else ``$MCP_AGENT_DB``, else the per-user data dir: a PostgreSQL URL (a str)
    or a SQLite file (a Path)."""
    if db is None:
        return default_db_url() or default_db_path()
    return db if is_database_url(db) else Path(db).expanduser()


def open_database(location: str | Path, folders: bool = False, create: bool = True) -> SessionRepo:
    """The session repo at ``location`` (see :func:`database_location`), for the commands
    that work on sessions without running agents; with ``folders``, a folder is a store of pi
    JSONL files; without ``create``, a PostgreSQL database must hold our tables already."""
    # A session a server runs an agent in is refused changes here too, as the server refuses
    # them (the guard reads its leases inside each change's transaction).
    if isinstance(location, str):
        from mcp_agent.runtime.leases import PostgresLeases
        from mcp_agent.runtime.settings import statement_timeout_from_env
        from mcp_agent.sessions.postgres import PostgresSessionRepo

        repo = PostgresSessionRepo(
            location, create=create, statement_timeout=statement_timeout_from_env()
        )
        repo.database.session_guard = PostgresLeases(repo.database).guard
        announce_changes(repo)
        return repo
    if folders and location.is_dir():
        from mcp_agent.sessions.jsonl import JsonlSessionRepo

        return JsonlSessionRepo(location)
    from mcp_agent.runtime.leases import LeaseCheck
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    return SqliteSessionRepo(location, session_guard=LeaseCheck().guard)


def shown_location(location: str | Path) -> str:
    return shown_url(location) if isinstance(location, str) else str(location)


# The newest sessions an unknown session id is compared with, for one it may have meant.
SIMILAR_IDS_SCANNED = 1_000


def similar_session_ids(repo: SessionRepo, given: str) -> str | None:
    """What an unknown session id ``given`` may have meant, as the end of a sentence, or None:
    the id of the one session among the newest ``SIMILAR_IDS_SCANNED`` whose id begins with
    it or differs from it by a typo or two, or the ids it begins several of."""
    import difflib

    wanted = given.strip().lower()
    if len(wanted) < 4:
        return None
    ids: list[str] = []
    cursor = None
    while len(ids) < SIMILAR_IDS_SCANNED:
        page = repo.list(limit=min(500, SIMILAR_IDS_SCANNED - len(ids)), cursor=cursor)
        ids.extend(item.id for item in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    starting = sorted(found for found in ids if found.lower().startswith(wanted))
    if len(starting) > 1:
        shown = ", ".join(starting[:3]) + (", …" if len(starting) > 3 else "")
        return f"the ids of {len(starting)} sessions begin with it ({shown}): give the whole id"
    close = starting or difflib.get_close_matches(wanted, ids, n=1, cutoff=0.9)
    return f"did you mean {close[0]}?" if close else None


def session_error_exit(error: Exception, repo: SessionRepo | None = None) -> typer.Exit:
    """A SessionError as a one-line message with a hint, and its exit code; with the ``repo``
    it came from, an unknown session id names the one that may have been meant."""
    import re

    code = getattr(error, "code", "")
    message = getattr(error, "message", str(error))
    if code == "not_found" and message.startswith("session "):
        unknown = re.fullmatch(r"session '?(.+?)'? not found", message)
        hint = similar_session_ids(repo, unknown.group(1)) if repo and unknown else None
        if hint is not None:
            return fail(f"{message}; {hint}")
        return fail(f"{message}; `{PROG} sessions list` shows the sessions in this database")
    if code == "not_found":
        return fail(f"{message}; `{PROG} sessions show ID` lists the entry ids")
    if code == "corrupt" and "session database" not in message:  # one session's, not the file's
        return fail(
            f"{message}; it is damaged (`{PROG} sessions delete ID` removes a damaged session;"
            " export the others while they still read)",
            FAILED,
        )
    return fail(message)


# The servers on a PostgreSQL database that each repo opened here tells of its changes.
_ANNOUNCERS: weakref.WeakKeyDictionary[SessionRepo, Announcer] = weakref.WeakKeyDictionary()


def announce_changes(repo: SessionRepo) -> Announcer | None:
    """Have the servers on ``repo``'s PostgreSQL database hear what this process writes to it
    (runtime.change_feed): each session's entries in the transaction storing them; sessions
    made or gone through ``announced``. None for a repo no server follows that way (a SQLite file's
    servers look at the file themselves)."""
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    if not isinstance(repo, PostgresSessionRepo):
        return None
    announcer = _ANNOUNCERS.get(repo)
    if announcer is None:
        from mcp_agent.runtime.change_feed import Announcer

        announcer = _ANNOUNCERS[repo] = Announcer(repo.database)
        repo.database.announce = announcer.in_write
    return announcer


def announced(repo: SessionRepo) -> Announcer | None:
    """The announcer ``announce_changes`` gave ``repo``, if any."""
    return _ANNOUNCERS.get(repo)


@contextmanager
def opened_repo(
    db: str | Path | None, folders: bool = False, create: bool = True
) -> Iterator[SessionRepo]:
    """The session database (``folders``: or a folder of pi files), with every SessionError
    turned into a one-line message; ``create``: see :func:`opened_store`."""
    with opened_store(db, "--db", folders, create) as repo:
        yield repo


def named_store(db: str | Path | None, flag: str, create: bool) -> None:
    """Exit with a one-line message, having created nothing, when the store ``flag`` (or
    ``$MCP_AGENT_DB``) names cannot be meant: an empty name, a URL that is not PostgreSQL's,
    a file that does not exist for a command that only reads or changes what is there (a
    typo must not leave an empty database behind), or a new file in a folder that does not
    exist. The per-user default is created when needed."""
    import os
    import re

    if db is None:
        db, flag = os.environ.get(DB_ENV), f"${DB_ENV}"
        if not db:
            return
    given = str(db)
    if not given.strip():
        die(f"{flag} is empty; give a SQLite file, a postgresql:// URL or a folder of pi files")
    if is_database_url(given):
        return
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", given):
        die(f"{flag} {given}: only postgresql:// URLs name a database; give one, or a file")
    path = Path(given).expanduser()
    try:
        if path.exists() or path == user_db_path():
            return
        if given.endswith(("/", os.sep)):
            die(f"{flag} {given}: no such folder; create it first for pi files, or drop the slash")
        if not create:
            die(f"{flag} {given}: no such database (nothing was created); check the path")
        if not path.parent.exists():
            die(f"{flag} {given}: the folder {path.parent} does not exist; create it first")
        if not path.parent.is_dir():
            die(f"{flag} {given}: {path.parent} is not a folder")
    except OSError as error:  # a folder on the way that may not be searched
        die(f"{flag} {given}: cannot be reached ({error.strerror or error})")


@contextmanager
def opened_store(
    db: str | Path | None, flag: str, folders: bool = False, create: bool = True
) -> Iterator[SessionRepo]:
    """The sessions ``flag`` names, with every SessionError turned into a one-line message
    (``folders``: see :func:`open_database`). Without ``create`` the store must exist already
    (see :func:`named_store`)."""
    import sqlite3

    from mcp_agent.sessions.errors import SessionError

    named_store(db, flag, create)
    location = database_location(db)
    try:
        repo = open_database(location, folders, create)
    except (sqlite3.Error, OSError, SessionError) as error:
        code = FAILED if failed_at_run_time(error) else BAD_INPUT
        die(_unopened(location, error, flag, given=db is not None, folders=folders), code)
    try:
        yield repo
    except SessionError as error:
        raise session_error_exit(error, repo) from None
    finally:
        repo.close()


# Failures of the disk, not of what was asked: exit FAILED (as a write refused later does).
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def failed_at_run_time(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a full or failing disk: exit code 1, a
    failure at run time, where a store or output that cannot be used as given is bad input
    (exit 2). A copy to a full disk exited 1 or 2 by where it met the full disk."""
    seen: BaseException | None = error
    for _ in range(5):  # a SessionError's cause is the sqlite3 or OS error
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _DISK_ERRNOS:
            return True
        name = getattr(seen, "sqlite_errorname", None) or ""
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")):
            return True
        seen = seen.__cause__
    return False


def _unopened(
    location: str | Path, error: BaseException, flag: str, given: bool, folders: bool
) -> str:
    """Why the store at ``location`` cannot be opened, and what to do, in one line."""
    import os

    shown = shown_location(location)
    if isinstance(location, Path) and not folders and location.is_dir():
        return (
            f"{flag} {shown} is a folder; name a database file (`{PROG} serve --sessions-dir"
            " FOLDER` serves a folder of pi session files)"
        )
    why = getattr(error, "message", None) or str(error)
    said = "is read-only" in why  # and why, already (sessions.sqlite.read_only)
    if isinstance(location, Path) and not said and not os.access(location.parent, os.W_OK):
        why += (
            f" (the folder {location.parent} cannot be written, and SQLite writes its -wal and"
            " -shm files beside the database)"
        )
    if str(location) not in why and shown not in why:
        why = f"cannot open the session database {shown}: {why}"
    if flag != "--db":
        return f"{flag}: {why}"
    return why if given else f"{why}; pass --db FILE|URL or set {DB_ENV}"


def refuse_read_only(repo: SessionRepo) -> None:
    """Exit, having tried nothing, when ``repo`` is a SQLite file this process cannot write:
    each of the many sessions an import or a copy writes would be refused alike."""
    from mcp_agent.sessions.errors import SessionError
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    if isinstance(repo, SqliteSessionRepo):
        try:
            repo.database.check_writable()
        except SessionError as error:
            die(error.message)


def check_database(db: str | Path | None) -> None:
    """Exit with a one-line message when the session database cannot be opened (a folder, a
    file that is not a database, a place that cannot be written). A run, a chat and the
    server write to it (sessions, leases), so a read-only file is refused too."""
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    location = database_location(db)
    why: str | None = None  # why it is read-only ("": no more to say)
    with opened_repo(db) as repo:
        if isinstance(repo, SqliteSessionRepo):  # the file, its folder or its mount
            why = repo.database.read_only
        else:  # PostgreSQL: a standby, default_transaction_read_only, a role that only reads
            from mcp_agent.sessions.postgres import PostgresSessionRepo

            if isinstance(repo, PostgresSessionRepo):
                why = repo.database.read_only()
    if why is not None:
        where = location if isinstance(location, Path) else shown_url(location)
        detail = f" ({why})" if why else ""
        die(
            f"the session database {where} is read-only{detail}: runs, chats and the server"
            " write to it; `sessions list` (and its --search), `show`, `tree` and `export`"
            " read it as it is"
        )


def open_session(repo: SessionRepo, session_id: str) -> Session:
    """``repo.open`` with the hint of :func:`session_error_exit` for an unknown id."""
    from mcp_agent.sessions.errors import SessionError

    try:
        return repo.open(session_id)
    except SessionError as error:
        raise session_error_exit(error, repo) from None


def single(error: BaseException) -> BaseException:
    """The one exception inside nested task-group exception groups, else ``error``."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def stdin_is_tty() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


# How --help names the value an option takes where we give no metavar: Typer 0.29 shows the
# Python type (`<str>`, `<list[Path]>`, `<bool>` even for flags, which take none).
_HELP_TYPES = {"str": "TEXT", "int": "N", "float": "NUMBER", "Path": "PATH", "path": "PATH"}


# The narrowest terminal that --help is drawn in rich's panels for (see plain_help_types).
RICH_HELP_COLUMNS = 60


def _narrow_help_class() -> type:
    from typer._click.formatting import HelpFormatter

    class NarrowHelp(HelpFormatter):
        """click's help, each option's words under its name rather than beside it: beside
        it, a narrow terminal left them a column of a word or two."""

        def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
            for term, text in rows:
                self.write(f"{'':>{self.current_indent}}{term}\n")
                if text:
                    with self.indentation(), self.indentation():
                        self.write_text(text)

    return NarrowHelp


def _narrow_help(width: int) -> Any:
    """A ``NarrowHelp`` formatter ``width`` columns wide (click imported when help is asked)."""
    return _narrow_help_class()(width=width)


def plain_help_types() -> None:
    """Make --help show words (TEXT, N, PATH, FILE…) for values, and nothing for flags, and
    flow the paragraphs of a command's help to the terminal's width."""
    import re

    from typer import core

    def flowed(paragraphs: list[str], markup_mode: Any) -> str:
        # typer keeps the line breaks of rich-mode help beyond its first paragraph, so the
        # docstrings' lines, broken for the source, showed broken again at every width.
        return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)

    # typer's rich_utils (rich's markdown, pretty-printing and tracebacks with it) costs every
    # command, `serve` included, a noticeable share of its start; only help needs it.
    for command in (core.TyperCommand, core.TyperGroup):
        shown = command.format_help

        def format_help(self: Any, ctx: Any, formatter: Any, shown: Any = shown) -> None:
            from typer import rich_utils

            rich_utils._fix_linebreaks = flowed
            if not hasattr(rich_utils, "_made_console"):
                made = rich_utils._made_console = rich_utils._get_rich_console  # type: ignore[attr-defined]
                rich_utils._get_rich_console = lambda stderr=False: closable(made(stderr))
            width = rich_utils._get_rich_console().width
            if width >= RICH_HELP_COLUMNS:
                return shown(self, ctx, formatter)
            # Narrower, rich's panels cut the options' names and defaults ("--transp…",
            # "127.0.0.…"): click's plain help instead, whose lines wrap at whole words, at
            # the terminal's width (click's own is 50 columns at least).
            plain = _narrow_help(max(20, width - 1))
            markup, self.rich_markup_mode = self.rich_markup_mode, None
            try:
                shown(self, ctx, plain)
            finally:
                self.rich_markup_mode = markup
            formatter.write(plain.getvalue())

        command.format_help = format_help  # type: ignore[method-assign]

    def plain(shown: str | None) -> str | None:
        if shown is None or not shown.startswith("<"):
            return shown
        inner = shown.strip("<>.")
        listed = re.fullmatch(r"list\[(\w+)\]", inner)
        if listed:
            return _HELP_TYPES.get(listed.group(1), listed.group(1).upper()) + "…"
        if inner.endswith(" range"):
            return "N"
        return _HELP_TYPES.get(inner, inner.upper())

    option_type = core.TyperOption.display_type_rich
    argument_type = core.TyperArgument.display_type_rich

    def option(self: core.TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else plain(option_type(self, ctx))

    def argument(self: core.TyperArgument, ctx: Any) -> str | None:
        return plain(argument_type(self, ctx))

    core.TyperOption.display_type_rich = option  # type: ignore[method-assign]
    core.TyperArgument.display_type_rich = argument  # type: ignore[method-assign,assignment]
