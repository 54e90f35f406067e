"""A session file locked against this program's other processes while one reads or writes it.

Two servers on one folder are common (two IDE windows, each starting its own over stdio on
``~/.pi/agent/sessions``). Without a lock, a reader in one could see the other's line half
written, take it for a crash's torn line and cut it off, losing an acknowledged entry; and
each would append from its own stale leaf. pi takes no lock, so this keeps apart only the
programs that take it.

``flock`` locks a file, not its name: a rewrite (a migration, a torn line cut off) puts a new
file at the name, so a lock won on a file no longer there is let go and taken on the new one.
Waiting is bounded: a process that holds a lock longer than ``LOCK_WAIT_SECONDS`` is refused
as ``busy``. Callers run on worker threads (the lock may be waited for).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from mcp_agent.sessions.errors import SessionError

if sys.platform != "win32":
    import fcntl

# Another process holds a session file's lock only for one append or one read of the file.
LOCK_WAIT_SECONDS = 30.0


def _lock(fd: int, exclusive: bool, path: Path, deadline: float) -> None:
    if sys.platform == "win32":  # no flock: one program at a time, as the README says
        return
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    pause = 0.002
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SessionError(
                    "busy",
                    f"{path} stayed locked by another process for {LOCK_WAIT_SECONDS:g} s; "
                    "try again",
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def _still_at(fd: int, path: Path) -> bool:
    """Whether the file ``fd`` has open is the one at ``path`` (not one a rewrite replaced)."""
    opened = os.fstat(fd)
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


@contextlib.contextmanager
def locked_file(path: Path, *, append: bool = False) -> Iterator[IO[bytes]]:
    """``path`` opened and locked: shared to read it, exclusive to append to it (the file is
    never created here). Raises FileNotFoundError when there is no file at ``path``."""
    flags = os.O_RDWR | os.O_APPEND if append else os.O_RDONLY
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        fd = os.open(path, flags)
        try:
            _lock(fd, append, path, deadline)
            if _still_at(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # replaced (or deleted) while we waited: open what is there now
    with os.fdopen(fd, "r+b" if append else "rb") as handle:  # closing lets the lock go
        yield handle


def stamp_of(handle: IO[bytes]) -> tuple[int, int]:
    """An open file's time of change and size: what says another program changed it."""
    found = os.fstat(handle.fileno())
    return found.st_mtime_ns, found.st_size


# A file written whole is first written to a temporary file beside it (``write_file_atomically``
# in sessions.jsonl: ``<name>`` + mkstemp's 8 characters + ``.tmp``), which its writer holds
# locked until it has the file's name.
TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(r".+\.jsonl[0-9a-z_]{8}\.tmp")
# A temporary file younger than this is left alone even when unlocked: its writer may be
# between creating it and locking it.
TEMP_GRACE_SECONDS = 10.0


def hold_temp_file(fd: int) -> None:
    """Lock a temporary file being written, so that no sweep (below) takes it for one left
    by a process that stopped mid-write."""
    if sys.platform != "win32":
        fcntl.flock(fd, fcntl.LOCK_EX)


def remove_dead_temp_files(directory: Path) -> int:
    """Remove the temporary files a writer killed mid-write (an import, a fork, a rewrite)
    left in ``directory`` and the folders in it: nothing else ever would, and each may be as
    large as a session. One whose writer lives is locked, and kept. Returns how many went."""
    if sys.platform == "win32":
        return 0
    from mcp_agent.sessions.folders import folders

    removed = 0
    try:
        places = [directory, *folders(directory)]
    except OSError:  # said where the folder is read
        return 0
    for place in places:
        try:
            found = [
                path for path in place.glob("*" + TEMP_SUFFIX) if _TEMP_NAME.fullmatch(path.name)
            ]
        except OSError:
            continue
        removed += sum(_remove_if_dead(path) for path in found)
    return removed


def _remove_if_dead(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if time.time() - os.fstat(fd).st_mtime < TEMP_GRACE_SECONDS:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _still_at(fd, path):  # its writer finished: it is a session file now
            return False
        path.unlink()
        return True
    except OSError:  # locked by its live writer (BlockingIOError), or gone meanwhile
        return False
    finally:
        os.close(fd)
