"""``install``: add this installation to an MCP client's config file.

The entry runs this very installation by absolute path (the ``mcp-agent-sessions`` script next
to the running interpreter, else ``python -m mcp_agent``), so it works from a checkout, a
``uv tool install .`` or a ``pipx install .`` without anything on the client's PATH. Only our
entry changes: every other key and server stays as it was, in order and in the file's own
layout; the old file is kept as ``<file>.bak`` and the new one replaces it atomically. A file
that already holds the very entry is left alone, .bak included.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from mcp_agent.cli.common import FAILED, PROG, die, named_store, utf8_text
from mcp_agent.paths import is_database_url
from mcp_agent.wire import loads_json

DEFAULT_NAME = "agent-sessions"
JSON_TYPES: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true/false",
    type(None): "null",
}


class Client(StrEnum):
    claude_desktop = "claude-desktop"
    claude_code = "claude-code"
    cursor = "cursor"
    vscode = "vscode"


@dataclass(frozen=True)
class ClientFormat:
    """Where a client keeps its servers and how an entry looks there."""

    servers_key: str
    typed: bool  # entries carry "type": "stdio"
    label: str


FORMATS: dict[Client, ClientFormat] = {
    Client.claude_desktop: ClientFormat("mcpServers", typed=False, label="Claude Desktop"),
    Client.claude_code: ClientFormat("mcpServers", typed=True, label="Claude Code (user scope)"),
    Client.cursor: ClientFormat("mcpServers", typed=False, label="Cursor"),
    Client.vscode: ClientFormat("servers", typed=True, label="VS Code (user mcp.json)"),
}


def default_config_path(client: Client) -> Path:
    """The client's user-level config file on this platform (the paths its docs give)."""
    from platformdirs import user_config_dir

    home = Path.home()
    if client is Client.claude_desktop:
        # macOS ~/Library/Application Support/Claude, Windows %APPDATA%\Claude,
        # Linux $XDG_CONFIG_HOME/Claude (~/.config/Claude)
        return Path(user_config_dir("Claude", appauthor=False, roaming=True)) / (
            "claude_desktop_config.json"
        )
    if client is Client.claude_code:
        return home / ".claude.json"
    if client is Client.cursor:
        return home / ".cursor" / "mcp.json"
    # The "User" folder of the default profile: ~/.config/Code/User on Linux,
    # ~/Library/Application Support/Code/User on macOS, %APPDATA%\Code\User on Windows.
    return Path(user_config_dir("Code", appauthor=False, roaming=True)) / "User" / "mcp.json"


def server_command(db: str | None = None) -> list[str]:
    """The absolute command line that serves this installation over stdio."""
    bin_dir = Path(os.path.abspath(sys.executable)).parent  # not resolved: keep the venv
    script = bin_dir / (f"{PROG}.exe" if sys.platform == "win32" else PROG)
    if script.is_file():
        command = [str(script), "serve"]
    else:
        command = [os.path.abspath(sys.executable), "-m", "mcp_agent", "serve"]
    if db is not None:
        # The server may start in any folder: a file is given by absolute path, while a
        # PostgreSQL URL is no path at all and goes as it is.
        command += ["--db", db if is_database_url(db) else os.path.abspath(Path(db).expanduser())]
    return command


def make_entry(client: Client, db: str | None) -> dict[str, Any]:
    command, *args = server_command(db)
    entry: dict[str, Any] = {"type": "stdio"} if FORMATS[client].typed else {}
    entry.update(command=command, args=args)
    return entry


def read_config(path: Path, client: Client) -> tuple[dict[str, Any], str] | None:
    """The config as a dict, with its text (``None`` when the file does not exist); exits 2
    when it cannot be read or is not a JSON object."""
    if not path.exists():
        return None
    if path.is_dir():
        die(f"{path} is a folder, not a config file; pass --config FILE")
    if not path.is_file():
        # A device or a pipe (/dev/null, say): it would be replaced by a file, and so gone
        # for every program on the machine, or read for ever.
        die(f"{path} is not a regular file; pass --config FILE; nothing was written")
    try:
        with path.open(encoding="utf-8", newline="") as handle:  # keeps \r\n as it is
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        die(f"cannot read {path}: {error}")
    if not text.strip("\ufeff \t\r\n"):
        return {}, text
    try:
        # written back, a key twice loses servers
        data = loads_json(text.removeprefix("\ufeff"), unique_keys=True)
    except json.JSONDecodeError as error:
        hint = (
            "; VS Code allows // comments and trailing commas, which this command does not "
            "rewrite: remove them, or add the entry by hand"
            if client is Client.vscode
            else "; fix the file, or add the entry by hand"
        )
        die(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: "
            f"{error.msg}){hint}; nothing was written"
        )
    except ValueError as error:  # too deep, a key twice, NaN, an unpaired surrogate escape
        die(f"{path} cannot be rewritten: {error}; nothing was written")
    if not isinstance(data, dict):
        found = JSON_TYPES.get(type(data), type(data).__name__)
        die(f"{path} does not hold a JSON object (found {found}); nothing was written")
    return data, text


@dataclass(frozen=True)
class Layout:
    """How a config file is written out. Kept from the file read, so that writing it back
    leaves the lines of the other servers and settings as they were in a consistently indented
    file (Claude Code's own ``JSON.stringify(config, null, 2)``, VS Code's tabs), with its
    Windows line endings and byte order mark, rather than rewriting every line of it."""

    bom: str = ""
    newline: str = "\n"
    indent: str = "  "
    end: str = "\n"

    @classmethod
    def of(cls, text: str | None) -> Layout:
        if text is None or not text.strip("\ufeff \t\r\n"):
            return cls(bom="\ufeff" if text and text.startswith("\ufeff") else "")
        newline = "\r\n" if "\r\n" in text else "\n"
        indent = "  "
        for line in text.splitlines()[1:]:
            body = line.lstrip(" \t")
            if body and body != line:  # the first indented line is one level in
                indent = line[: len(line) - len(body)]
                break
        return cls(
            bom="\ufeff" if text.startswith("\ufeff") else "",
            newline=newline,
            indent=indent,
            end=newline if text.endswith("\n") else "",
        )

    def render(self, data: dict[str, Any]) -> str:
        """``data`` as the file's text: JSON strings hold no raw line breaks, so every one
        in the dump is the layout's."""
        body = json.dumps(data, indent=self.indent, ensure_ascii=False)
        return self.bom + body.replace("\n", self.newline) + self.end


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` while a config in it is read, merged and replaced:
    two installs at once (into one file, with two names) would otherwise each write what they
    read, and the later would drop the other's entry. The folder, not the file, is locked, as
    the file is replaced by another; where there is no flock (Windows) installs are not
    serialised."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder this user may write but not read (mode -wx): unserialised
        yield
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def check_db(db: str) -> None:
    """Exit 2 when ``db`` is one that ``serve --db`` would refuse at every start of the
    client: a new file in a folder that does not exist, a folder, a URL not PostgreSQL's."""
    if not db.strip():  # before named_store, whose message offers folders, which serve refuses
        die("--db is empty; give a SQLite file or a postgresql:// URL")
    named_store(db, "--db", create=True)
    if not is_database_url(db) and Path(db).expanduser().is_dir():
        die(f"--db {db} is a folder; name a database file (in it, say)")


def merge(config: dict[str, Any], client: Client, name: str, entry: dict[str, Any]) -> bool:
    """Put ``entry`` under ``name`` in ``config`` (in place); True when it replaced one.

    An existing entry keeps its place among the others, and its ``env`` (API keys and the
    like that the user added); everything else of it is ours to replace."""
    key = FORMATS[client].servers_key
    servers = config.setdefault(key, {})
    if not isinstance(servers, dict):
        raise ValueError(f'"{key}" is not a JSON object')
    old = servers.get(name)
    new = dict(entry)
    if isinstance(old, dict) and isinstance(old.get("env"), dict):
        new["env"] = old["env"]
    servers[name] = new
    return old is not None


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temp file beside ``path`` and move it over ``path``."""
    descriptor, temp_name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    temp = Path(temp_name)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            shutil.copymode(path, temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def install(
    client: Annotated[
        Client,
        typer.Argument(
            metavar="CLIENT",
            show_choices=False,
            help="claude-desktop, claude-code, cursor or vscode",
            show_default=False,
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="print the merged config and its path; write nothing"),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="the client's config file (default: where the client keeps it)",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str, typer.Option(help="name of the server entry", callback=utf8_text)
    ] = DEFAULT_NAME,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="FILE|URL",
            help="SQLite database file the installed server uses, in a folder that exists, or "
            "a PostgreSQL URL postgresql://… (passed as `serve --db`; default: the server's "
            "own default)",
            show_default=False,
            callback=utf8_text,
        ),
    ] = None,
) -> None:
    """Add (or update) an entry that runs this installation to an MCP client's config.

    Other entries and settings stay untouched; the old file is kept as FILE.bak."""
    if not name.strip():
        die("--name must not be empty")
    if db is not None:
        check_db(db)
    path = Path(os.path.abspath((config or default_config_path(client)).expanduser()))
    target = path.resolve() if path.is_symlink() else path  # keep a symlinked dotfile a link
    entry = make_entry(client, db)
    label = FORMATS[client].label
    if dry_run:
        old, new, replaced = updated_text(path, client, name, entry)
        sys.stdout.write(new.removeprefix("\ufeff"))
        what = "needs no change" if new == old else "would be written so"
        typer.echo(f"dry run: {label} config {path} {what} (nothing written)", err=True)
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        die(f"cannot write {path}: {error}", FAILED)
    backup = target.with_name(target.name + ".bak")
    with locked(target.parent):
        old, new, replaced = updated_text(path, client, name, entry)
        if new == old:
            # Written again, it would change nothing but the .bak, which holds the file as it
            # was before the entry was first put there, the one worth keeping.
            typer.echo(f"entry {name!r} in {label} config {path} is up to date; nothing written")
            return
        try:
            if old is not None:
                shutil.copy2(target, backup)
            write_atomically(target, new)
        except OSError as error:
            die(f"cannot write {path}: {error}", FAILED)
    action = "replaced" if replaced else "added"
    saved = f" (old file kept as {backup})" if old is not None else " (new file)"
    typer.echo(f"{action} entry {name!r} in {label} config {path}{saved}")


def updated_text(
    path: Path, client: Client, name: str, entry: dict[str, Any]
) -> tuple[str | None, str, bool]:
    """The config's text now (``None``: no file), its text with ``entry`` merged under
    ``name``, and whether that replaced an entry; exits 2 when the config cannot take it."""
    existing = read_config(path, client)
    merged, old = existing if existing is not None else ({}, None)
    try:
        replaced = merge(merged, client, name, entry)
    except ValueError as error:
        die(f"{path}: {error}; nothing was written")
    return old, Layout.of(old).render(merged), replaced
