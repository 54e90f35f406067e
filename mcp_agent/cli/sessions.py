"""``sessions …``: list, show, draw, export, import, delete, fork and rename stored sessions.

These read and write the database directly (no server, no MCP SDK, no providers), so they start
fast; rich is imported when something is drawn.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import sys
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_agent.cli.common import (
    BAD_INPUT,
    FAILED,
    PROG,
    JsonOption,
    SessionArg,
    StoreOption,
    announced,
    database_location,
    die,
    emit_json,
    emit_json_stream,
    err,
    failed_at_run_time,
    id_text,
    open_session,
    opened_repo,
    opened_store,
    out,
    plural,
    print_table,
    refuse_read_only,
    say_error,
    stdin_is_tty,
    utf8_text,
)

if TYPE_CHECKING:
    from mcp_agent.sessions.hits import HitPage
    from mcp_agent.sessions.repo import SessionRepo

app = typer.Typer(
    help="Browse, export, import, fork and delete stored sessions.", no_args_is_help=True
)

FullOption = Annotated[bool, typer.Option("--full", help="show everything, uncut")]
# Show a progress bar when an import is at least this big (bytes) or has this many files.
PROGRESS_BYTES = 2_000_000
PROGRESS_FILES = 5


class Position(StrEnum):
    before = "before"
    at = "at"


@app.command("list")
def list_sessions(
    search: Annotated[
        str | None,
        typer.Option(
            "--search", "-s", help="only sessions containing these words, each with its best match"
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many")] = 20,
    cursor: Annotated[
        str | None, typer.Option(help="continue a listing (the nextCursor of --json)")
    ] = None,
    db: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Sessions, newest first."""
    from mcp_agent.sessions.repo import listed_hits, mark_linked, unreadable_note
    from mcp_agent.sessions.words import query_words

    with opened_repo(db, folders=True, create=False) as repo:
        words = query_words(search)
        page = repo.list(query=search, limit=limit, cursor=cursor)
        mark_linked(repo, page.items)
        # Where each session matched: its best hits.
        hits = listed_hits(repo, [s.id for s in page.items], search or "") if words else {}
        # A folder's files that could not be read (a line damaged inside): left out, and why.
        skipped = list(getattr(repo, "skipped", {}).values())
    if as_json:
        listed = [s.to_json_dict() for s in page.items]
        for item in listed if words else []:
            found = hits[item["id"]]
            item["hits"] = [hit.to_json_dict(words) for hit in found.hits]
            item["hitCount"] = found.total
        listing: dict[str, Any] = {"sessions": listed, "nextCursor": page.next_cursor}
        # as session_list says them: a script sees a folder of damaged files for what it is
        note = unreadable_note([why for _, why in page.left_out], "stderr")
        if note is not None:
            listing["unreadable"] = note
        emit_json(listing)
        return
    if not page.items:
        if search or cursor:
            err().print("no sessions match" if search else "no more sessions", style="dim")
        elif skipped:
            files = f"{len(skipped)} session file{'s' if len(skipped) > 1 else ''}"
            err().print(f"no session could be read: {files} left out, unreadable:")
            for why in skipped[:5]:
                err().print(f"  {why}", soft_wrap=True)
        else:
            from mcp_agent.sessions.jsonl import JsonlSessionRepo

            hint = f'no sessions yet (start one with `{PROG} run "…"` or `{PROG} chat`)'
            if isinstance(repo, JsonlSessionRepo):  # which run and chat do not take for --db
                hint = (
                    f"no sessions in this folder yet (`{PROG} serve --sessions-dir FOLDER` "
                    "keeps new ones in it, as pi does in its own)"
                )
            err().print(hint, style="dim")
        return
    from mcp_agent.cli.render import short_time
    from mcp_agent.wire import one_line

    rows = [
        (
            [
                item.id,
                short_time(item.modified),
                f"{item.message_count:,}",
                f"{item.total_tokens:,}",
                # A sub-agent's session says so: its parent's listing row shows the task too.
                ("↳ sub-agent: " if item.started_by else "")
                + (one_line(item.name or item.first_user_message or "", 200) or "—"),
            ],
            "bold" if item.name else None,
        )
        for item in page.items
    ]
    # Under each session found, where: its best hit (--json gives its first three).
    notes = [best_hit(hits[item.id], words) for item in page.items] if words else []
    # Ids are never shortened: people copy them. At 80 columns they leave the names 15 cells:
    # a name or first message goes under its session then.
    headers = ["ID", "Modified", "Msgs", "Tokens", "Name / first message"]
    right = frozenset({"Msgs", "Tokens"})
    print_table(headers, rows, flexible=4, right=right, below=30, notes=notes)
    if page.next_cursor:
        err().print(f"more: --cursor {page.next_cursor}", style="dim", soft_wrap=True)


def best_hit(found: HitPage, words: list[str]) -> str | None:
    """A line for a session's best hit: ``  ↳ <entry id> <role>: <snippet>``."""
    from mcp_agent.wire import one_line

    if not found.hits:
        return None
    best = found.hits[0].to_json_dict(words)
    return f"  ↳ {best['entryId']} {best['role'] or best['type']}: {one_line(best['snippet'])}"


@app.command()
def show(
    session_id: SessionArg,
    full: FullOption = False,
    db: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The current branch, entry by entry: roles, text, tool calls and results, entry ids.

    Of a long branch, the newest 200 entries unless --full."""
    from mcp_agent.sessions.repo import linked_origin

    with opened_repo(db, folders=True, create=False) as repo:
        session = open_session(repo, session_id)
        started = linked_origin(repo, session.header)
        if as_json:
            from mcp_agent.cli.render import branch_entries, session_json

            entries = (entry.to_json_dict() for entry in branch_entries(session))
            emit_json_stream({"session": session_json(session, started)}, "entries", entries)
            return
        from mcp_agent.cli.render import branch_view

        out().print(branch_view(session, full, started))


@app.command()
def tree(
    session_id: SessionArg,
    full: Annotated[
        bool, typer.Option("--full", help="do not shorten long runs of entries")
    ] = False,
    db: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The session tree: branch points, labels, names, and the current leaf."""
    from mcp_agent.sessions.repo import linked_origin

    with opened_repo(db, folders=True, create=False) as repo:
        session = open_session(repo, session_id)
        started = linked_origin(repo, session.header)
        if as_json:
            from mcp_agent.cli.render import tree_json

            fields, nodes = tree_json(session, started)
            emit_json_stream(fields, "nodes", nodes)
            return
        from mcp_agent.cli.render import session_tree

        out().print(session_tree(session, full, out().width, started=started))


@app.command()
def export(
    session_id: SessionArg,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="write here instead of stdout (-: stdout)"),
    ] = None,
    db: StoreOption = None,
) -> None:
    """The session as a pi version-3 JSONL file."""
    from mcp_agent.sessions.jsonl import write_file_atomically

    if output == Path("-"):  # as most tools take it; it made a file named "-"
        output = None
    # Messages name the file as the user wrote it (not the folder a link points into).
    given = output
    if output is not None:
        output = _export_target(output, database_location(db))
    count = 0
    with (
        opened_repo(db, folders=True, create=False) as repo,
        contextlib.closing(repo.export_chunks(session_id)) as pieces,
    ):
        # Written as it is read, a thousand lines at a time: a session of any size in the
        # memory of one piece. The first piece opens the session, so that a wrong id fails
        # before anything is written.
        chunks = itertools.chain([next(pieces)], pieces)
        if output is None:
            for piece in chunks:
                sys.stdout.write(piece)
            return

        def lines() -> Iterator[str]:
            nonlocal count
            for piece in chunks:
                for line in piece.split("\n")[:-1]:  # stored JSON holds no line break
                    count += 1
                    yield line

        try:
            if output.exists() and not output.is_file():  # /dev/stdout, a pipe: as it comes
                with output.open("w", encoding="utf-8", newline="\n") as handle:
                    handle.writelines(line + "\n" for line in lines())
            else:  # a failure part-way leaves the file that was there, not half of this one
                write_file_atomically(output, lines())
        except OSError as error:
            if error.errno == errno.EPIPE:  # `-o /dev/stdout | head`: as every `| head` ends
                raise
            # A full disk or a failing one is a failure at run time (exit 1); a path that
            # cannot be written is bad input (exit 2).
            die(
                f"cannot write {given}: {error.strerror or error}; choose another --output",
                FAILED if failed_at_run_time(error) else BAD_INPUT,
            )
    err().print(f"wrote {given} ({count} lines)", style="dim")


def _export_target(output: Path, store: str | Path) -> Path:
    """Where ``export -o OUTPUT`` writes: the file a link names; refused (exit 2) when that
    is the session store itself or one of its files (a database, its journal, a session file
    of a folder store), which the export would overwrite, or when its folder does not exist."""
    given = output.expanduser()
    if given.is_dir():
        die(f"--output {output} is a folder; give a file name in it")
    if given.exists() and not given.is_file():  # /dev/stdout, a pipe: written as it is
        return given
    target = given.resolve()
    if not target.parent.is_dir():
        die(f"--output {output}: the folder {target.parent} does not exist; create it first")
    if isinstance(store, Path):
        home = store.expanduser().resolve()
        ours = {home, *(home.with_name(home.name + end) for end in ("-wal", "-shm", "-journal"))}
        if target in ours or (home.is_dir() and target.is_relative_to(home)):
            die(
                f"--output {output} is a file of the session store {store}, which the export "
                "would overwrite; choose a path outside it"
            )
    return target


@app.command("import")
def import_files(
    files: Annotated[list[Path], typer.Argument(metavar="FILE", help="pi session files")],
    db: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import pi session files (version 1, 2 or 3). Each file is stored whole or not at all."""
    results: list[dict[str, Any]] = []
    # "~/…" as --db, --manifests and export -o take it (a ~ the shell left: quoted, a config)
    files = [path.expanduser() for path in files]
    sizes = [_size(f) for f in files]
    unreadable = {path: why for path in files if (why := _unreadable(path)) is not None}
    if len(unreadable) == len(files):  # nothing to import: no store is opened, or created
        results = [{"file": str(path), "error": unreadable[path]} for path in files]
    else:
        _import_each(files, sizes, unreadable, db, results)
    failed = [r for r in results if "error" in r]
    if as_json:
        emit_json({"imported": [r for r in results if "error" not in r], "failed": failed})
    else:
        for result in results:
            if "error" in result:
                continue
            # The id first, so that `cut -d' ' -f1` gives the new ids (or use --json).
            out().print(
                f"{result['sessionId']}  ← {result['file']} "
                f"(pi v{result['version']}, {plural(result['messages'], 'message')})",
                soft_wrap=True,
                markup=False,
            )
    for result in results:
        for note in result.get("notes", []):
            say_error(f"note: {note}")
    for result in failed:
        say_error(result["error"])
    if failed:
        raise typer.Exit(BAD_INPUT)


def _import_each(
    files: list[Path],
    sizes: list[int],
    unreadable: dict[Path, str],
    db: str | None,
    results: list[dict[str, Any]],
) -> None:
    """Import each of ``files`` but the ``unreadable`` ones into the store ``db``, adding to
    ``results`` what came of each file, in order."""
    from mcp_agent.sessions.errors import SessionError

    with (
        opened_repo(db, folders=True, create=True) as repo,
        _progress(len(files), sum(sizes)) as advance,
    ):
        refuse_read_only(repo)
        for path, size in zip(files, sizes, strict=True):
            if path in unreadable:
                results.append({"file": str(path), "error": unreadable[path]})
                continue
            try:
                imported = repo.import_session(path)
            except SessionError as error:
                results.append({"file": str(path), "error": _import_hint(error)})
            else:
                session = imported.session
                stats = session.stats()
                results.append(
                    {
                        "file": str(path),
                        "sessionId": session.id,
                        "version": imported.version,
                        "entries": stats.entry_count,
                        "messages": stats.message_count,
                        "notes": imported.notes,
                    }
                )
            advance(size)
        if len(results) > sum("error" in r for r in results):
            if (announcer := announced(repo)) is not None:
                announcer.list_changed()
            _index_for_search(repo)


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be imported, known without opening it (a named pipe's writer would
    take an open for the read): missing, a folder, not allowed; None when it may be read."""
    try:
        is_folder = path.is_dir()
        why = None if os.access(path, os.R_OK) else "Permission denied"
        path.stat()
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        why = getattr(error, "strerror", None) or str(error)
    else:
        folder = f"a folder (`{PROG} sessions copy --from {path}` copies a pi folder's sessions)"
        why = folder if is_folder else why
    return None if why is None else f"cannot read {path}: {why}; nothing was imported from it"


def _index_for_search(repo: SessionRepo) -> None:
    """Index the text just stored for search now, while the command is waited for anyway,
    rather than at the first search (in batches, see ``SessionRepo.index_search_text``)."""
    from mcp_agent.sessions.errors import SessionError

    try:
        while repo.index_search_text():
            pass
    except SessionError as error:  # what was stored stays; a search indexes it
        say_error(f"note: not indexed for search yet ({error.message})")


@app.command()
def copy(
    source: Annotated[
        str,
        typer.Option(
            "--from", metavar="FILE|URL|FOLDER", help="where the sessions are", show_default=False
        ),
    ],
    target: Annotated[
        str,
        typer.Option("--to", metavar="FILE|URL|FOLDER", help="where they go", show_default=False),
    ],
    as_json: JsonOption = False,
) -> None:
    """Copy every session from one store to another, whole, under its own id.

    A store is a SQLite file, a PostgreSQL URL postgresql://… or an existing folder of pi JSONL
    files. Each session arrives whole or not at all; sessions already there are left alone, so
    an interrupted copy can be run again."""
    from mcp_agent.sessions.errors import SessionError
    from mcp_agent.sessions.folders import session_id_of
    from mcp_agent.sessions.jsonl import JsonlSessionRepo
    from mcp_agent.sessions.repo import copy_session, session_ids

    results: dict[str, list[str]] = {"copied": [], "present": []}
    failed: list[dict[str, str]] = []
    if _same_store(database_location(source), database_location(target)):
        die("--from and --to name the same store; copy to another one")
    with (
        opened_store(source, "--from", folders=True, create=False) as origin,
        opened_store(target, "--to", folders=True) as destination,
    ):
        refuse_read_only(destination)
        try:
            ids = list(session_ids(origin))
        except SessionError as error:
            die(f"cannot list the sessions of --from {source}: {error.message}", FAILED)
        if isinstance(origin, JsonlSessionRepo):  # files of the folder it could not read
            for path, why in origin.skipped.items():
                failed.append({"sessionId": session_id_of(path) or str(path), "error": why})
        with _bar("copying", len(ids)) as advance:
            for session_id in ids:
                try:
                    results[copy_session(origin, destination, session_id)].append(session_id)
                except SessionError as error:
                    failed.append({"sessionId": session_id, "error": error.message})
                advance(1)
        if results["copied"]:
            if (announcer := announced(destination)) is not None:
                announcer.list_changed()
            _index_for_search(destination)
    if as_json:
        emit_json({**results, "failed": failed})
    else:
        err().print(
            f"copied {len(results['copied'])} sessions; {len(results['present'])} were there"
            f" already; {len(failed)} failed",
            style="dim",
        )
    for failure in failed:
        say_error(f"session {failure['sessionId']}: {failure['error']}")
    if failed:
        raise typer.Exit(FAILED)


@app.command()
def delete(
    session_id: SessionArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    db: StoreOption = None,
) -> None:
    """Delete a session and every entry in it (a damaged one too)."""
    from mcp_agent.sessions.errors import SessionError
    from mcp_agent.wire import one_line

    with opened_repo(db, folders=True, create=False) as repo:
        try:
            session = repo.open(session_id)
        except SessionError as error:
            if error.code != "corrupt":  # damaged: deleting it is how to be rid of it
                raise
            what = f"session {session_id}, which is damaged ({one_line(error.message, 200)})"
        else:
            stats = session.stats()
            name = f" “{one_line(session.name, 200)}”" if session.name else ""
            what = f"session {session_id}{name} ({plural(stats.message_count, 'message')})"
        if not yes:
            if not stdin_is_tty():
                die(f"refusing to delete {what} without a terminal to ask; add --yes")
            try:
                confirmed = _confirm(f"Delete {what}?")
            except KeyboardInterrupt:  # exit 130, the line the prompt left open ended first
                typer.echo(err=True)
                err().print("nothing deleted", style="dim")
                raise
            if not confirmed:
                # Declined is no error (as `rm -i` answered no): the user chose, nothing failed.
                err().print("nothing deleted", style="dim")
                return
        repo.delete(session_id)
        if (announcer := announced(repo)) is not None:
            announcer.session_deleted(session_id)
    err().print(f"deleted {what}", style="dim")


def _confirm(question: str) -> bool:
    """Asks on stderr, reads the answer from the terminal: y or yes is yes; no, Enter or the
    input's end (Ctrl-D) is no, as `rm -i` takes it; Ctrl-C interrupts."""
    while True:
        typer.echo(f"{question} [y/N]: ", err=True, nl=False)
        line = sys.stdin.readline()
        if not line:
            typer.echo(err=True)  # the line the prompt left open
            return False
        answer = line.strip().lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        typer.echo("answer y or n", err=True)


@app.command()
def fork(
    session_id: SessionArg,
    entry: Annotated[
        str | None,
        typer.Option("--entry", "-e", help="fork at or before this entry id", callback=id_text),
    ] = None,
    position: Annotated[
        Position | None,
        typer.Option(help="before: up to a user message, to ask it again; at: up to the entry"),
    ] = None,
    db: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy the whole session (or the path to an entry) into a new session; prints its id."""
    if position is not None and entry is None:
        die("--position needs --entry (which entry to fork at or before)")
    with opened_repo(db, folders=True, create=False) as repo:
        forked = repo.fork(session_id, entry, (position or Position.before).value)
        if (announcer := announced(repo)) is not None:
            announcer.list_changed()
        if as_json:
            from mcp_agent.cli.render import session_json

            emit_json(session_json(forked))
            return
        count = forked.stats().entry_count
    out().print(forked.id, soft_wrap=True)
    err().print(f"forked {session_id} into a new session ({count} entries)", style="dim")


@app.command()
def rename(
    session_id: SessionArg,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help='the new name ("" clears it)', callback=utf8_text)
    ],
    db: StoreOption = None,
) -> None:
    """Name a session (shown in listings and the tree)."""
    from mcp_agent.wire import one_line

    with opened_repo(db, folders=True, create=False) as repo:
        session = open_session(repo, session_id)
        session.set_name(name)
        shown = session.name
    said = f"renamed {session_id} to “{one_line(shown, 200)}”" if shown else "name cleared"
    err().print(said, style="dim")


# --- import helpers ---------------------------------------------------------------------------


def _same_store(one: str | Path, other: str | Path) -> bool:
    """Whether two locations are one store, however each is spelled (relative, through a link,
    or the same file under two names)."""
    if isinstance(one, str) or isinstance(other, str):
        return one == other
    try:
        return one.resolve() == other.resolve() or (
            one.exists() and other.exists() and one.samefile(other)
        )
    except OSError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _import_hint(error: Exception) -> str:
    code = getattr(error, "code", "")
    message = getattr(error, "message", str(error))
    if code == "conflict":
        return (
            f"{message} (imported before, or copied): delete that session to import the file again"
        )
    return f"{message}; nothing was imported from it"


class _NoProgress:
    def __enter__(self) -> Any:
        return lambda _size: None

    def __exit__(self, *exc: object) -> None:
        pass


def _progress(files: int, size: int) -> Any:
    """A progress bar (on a terminal, for a big import), as a context giving ``advance``."""
    if files < PROGRESS_FILES and size < PROGRESS_BYTES:
        return _NoProgress()
    return _bar("importing", size, in_bytes=True)


def _bar(label: str, total: int, in_bytes: bool = False) -> Any:
    """A rich progress bar on stderr (a terminal only), as a context giving ``advance``."""
    if not err().is_terminal:
        return _NoProgress()
    from contextlib import contextmanager

    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    @contextmanager
    def bar() -> Any:
        with Progress(
            TextColumn(label),
            BarColumn(),
            DownloadColumn() if in_bytes else MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err(),
            transient=True,
        ) as progress:
            task = progress.add_task(label, total=total or None)
            yield lambda done: progress.advance(task, done)

    return bar()
