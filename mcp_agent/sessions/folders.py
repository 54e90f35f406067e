"""Where JSONL session files live: our flat folder or pi's folders, and their names.

pi (``~/.pi/agent/sessions``) keeps a folder per working directory, named from the path
(``/home/me/app`` → ``--home-me-app--``), and names each file after the header's time and
the session id: ``2026-01-15T08-30-00-000Z_<id>.jsonl``. Our flat layout is ``<id>.jsonl`` in
one folder. Both are read; a repo writes new files in one of them.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from mcp_agent.sessions.entries import SessionHeader, iso_now
from mcp_agent.sessions.errors import SessionError

Layout = Literal["flat", "pi"]
LAYOUTS: tuple[Layout, ...] = ("flat", "pi")

# A listing looks at no more files than this (pi users collect sessions for years); beyond
# it the listing is refused, saying so, rather than reading without end.
MAX_SESSION_FILES = 100_000

# The longest file or folder name most file systems take.
MAX_NAME_BYTES = 255

_PI_NAME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z)_(.+)\.jsonl")
_PI_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_PI_FOLDER = re.compile(r"--.*--")


def cwd_folder(cwd: str) -> str:
    """pi's folder name for a working directory (``getDefaultSessionDir``)."""
    return "--" + re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", cwd)) + "--"


def pi_file_name(header: SessionHeader) -> str:
    """pi's file name for a session: the header's time with ``:`` and ``.`` made ``-``, then
    the id. A header time pi would not have written (an imported file's) gives way to now."""
    moment = header.timestamp if _PI_TIME.fullmatch(header.timestamp) else iso_now()
    return f"{re.sub(r'[:.]', '-', moment)}_{header.id}.jsonl"


def session_id_of(path: Path) -> str | None:
    """The session id a file's name gives (pi's ``<time>_<id>.jsonl`` or ``<id>.jsonl``)."""
    if path.suffix != ".jsonl" or path.name.startswith("."):
        return None
    named = _PI_NAME.fullmatch(path.name)
    return named.group(2) if named else path.stem


def is_file_id(session_id: str) -> bool:
    """An id that can name a file in the folder and no other place."""
    return not (
        not session_id
        or "/" in session_id
        or "\\" in session_id
        or "\0" in session_id
        or session_id.startswith(".")
    )


def check_session_id(session_id: str) -> str:
    if not is_file_id(session_id):
        raise SessionError("not_found", f"session {session_id!r} not found")
    return session_id


def detect_layout(directory: Path) -> Layout:
    """pi's layout for pi's sessions folder (``…/.pi/agent/sessions``) or a folder holding
    pi's per-directory folders; our flat one otherwise."""
    if directory.parts[-3:] == (".pi", "agent", "sessions"):
        return "pi"
    try:
        return "pi" if any(_PI_FOLDER.fullmatch(p.name) for p in folders(directory)) else "flat"
    except OSError:
        return "flat"


def folders(directory: Path) -> Iterator[Path]:
    """The folders inside ``directory`` that may hold sessions (pi's per-directory ones)."""
    for child in directory.iterdir():
        if not child.name.startswith(".") and child.is_dir():
            yield child


def session_files(directory: Path) -> Iterator[Path]:
    """Every session file in ``directory`` and one level of folders below it, at most
    :data:`MAX_SESSION_FILES`."""
    count = 0

    def files(folder: Path) -> Iterator[Path]:
        nonlocal count
        try:
            children = sorted(folder.glob("*.jsonl"))
        except OSError:
            return
        for child in children:
            if session_id_of(child) is None:
                continue
            count += 1
            if count > MAX_SESSION_FILES:
                raise SessionError(
                    "storage",
                    f"{directory} holds more than {MAX_SESSION_FILES} session files; "
                    "move old ones elsewhere to list it",
                )
            yield child

    yield from files(directory)
    for folder in sorted(folders(directory)):
        yield from files(folder)


def find_session_file(directory: Path, session_id: str) -> Path | None:
    """The file of ``session_id`` in either layout, or None."""
    if not is_file_id(session_id):
        return None
    flat = directory / f"{session_id}.jsonl"
    if flat.is_file():
        return flat
    pattern = f"*_{glob.escape(session_id)}.jsonl"
    for candidate in (*directory.glob(pattern), *directory.glob(f"*/{pattern}")):
        if candidate.is_file() and session_id_of(candidate) == session_id:
            return candidate
    return None


def new_session_path(directory: Path, layout: Layout, header: SessionHeader) -> Path:
    """Where a new session's file goes in ``layout``."""
    check_session_id(header.id)
    if layout == "pi":
        folder = cwd_folder(header.cwd)
        if "\0" in folder or len(folder.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise SessionError(
                "invalid_argument",
                f"cwd {header.cwd[:80]!r} makes no folder name in pi's layout (a NUL, or longer "
                f"than {MAX_NAME_BYTES} bytes as pi spells it): give a shorter working directory",
            )
        return directory / folder / pi_file_name(header)
    return directory / f"{header.id}.jsonl"
