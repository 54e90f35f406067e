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
