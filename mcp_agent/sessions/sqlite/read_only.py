"""Reading a session database this process may not write: a read-only file, or one in a
folder that cannot be written (a read-only mount, a backup, another user's folder).

SQLite in WAL mode reads through the ``-shm`` file beside the database, and a plain
connection creates it (and ``-wal``) when they are not there: in a folder that cannot be
written, it cannot open the database at all. How it is opened instead:

- a ``-wal`` and a ``-shm`` there (another process may be writing, or one stopped without
  cleaning up): ``mode=ro``, which reads what the ``-wal`` holds as well (as SQLite does for
  read-only files since 3.22), and creates nothing, as both are there;
- no ``-wal`` with anything in it, and not both files: ``immutable=1``, which reads the file
  alone and creates nothing. Nothing has the database open (a connection keeps both files
  while it is open), so the file holds every committed write. (``mode=ro`` would create the
  one missing where the folder can be written, and leave it there);
- a ``-wal`` with writes in it but no ``-shm``: SQLite reads the ``-wal`` only through a
  ``-shm``, which it cannot create in a folder that cannot be written, and ``immutable=1``
  would leave out its writes without a word, so the two files are copied to a private folder
  and read there (``PrivateCopy``).

A search also reads from a private copy when entries were appended since the file was last
indexed (``SqliteDatabase.index_pending_text``): they are indexed in the copy, never in the
file. Either copy is deleted when the database is closed.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import quote

from mcp_agent.sessions.errors import SessionError

# Room left free on the disk of the private copy, beyond the copy itself.
COPY_SPARE_BYTES = 64 * 1024 * 1024


def side_file(path: Path, suffix: str) -> Path:
    return path.with_name(f"{path.name}-{suffix}")


def read_only_reason(path: Path) -> str | None:
    """Why this process cannot write the database file at ``path``, or None when it can (or
    there is no file yet: creating one is a write like any other, and fails as one)."""
    try:
        if not path.is_file():
            return None
        folder = path.parent
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return f"the file system holding {folder} is mounted read-only"
        if not os.access(path, os.W_OK):
            return "this user may not write the file"
        if os.access(folder, os.W_OK):
            return None
        # SQLite needs the folder only to create and delete its -wal and -shm files.
        sides = [side_file(path, "wal"), side_file(path, "shm")]
        if all(side.exists() and os.access(side, os.W_OK) for side in sides):
            return None
    except OSError:
        return None  # let the open say what is wrong
    return (
        f"this user may not write in the folder {folder}, where SQLite keeps the -wal and"
        " -shm files of a database it writes"
    )


def file_uri(path: Path, query: str) -> str:
    # A file: URI, so that the query parameters are read; ?, # and % in the path are quoted.
    return f"file:{quote(str(path.absolute()))}?{query}"


def _has_writes(wal: Path) -> bool:
    try:
        return wal.stat().st_size > 0
    except FileNotFoundError:
        return False


def read_only_uri(path: Path) -> str | None:
    """How to open the read-only database at ``path`` in place (see the module doc), or None
    when it can only be read from a private copy."""
    wal, shm = side_file(path, "wal"), side_file(path, "shm")
    if wal.exists() and shm.exists():
        return file_uri(path, "mode=ro")
    if not _has_writes(wal):
        return file_uri(path, "immutable=1")
    return None


class PrivateCopy:
    """A copy of a read-only database in a temporary folder of this process's own, deleted by
    ``close``. ``from_files``: the database and its ``-wal`` as they are (SQLite brings the
    writes of the ``-wal`` into the copy when it first opens it); ``from_connection``: a
    consistent snapshot of what a connection reads, through SQLite's backup."""

    def __init__(self, source: Path, needed: int) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mcp-agent-read-only-"))
        self.path = self.folder / source.name
        free = shutil.disk_usage(self.folder).free
        if free < needed + COPY_SPARE_BYTES:
            self.close()
            raise SessionError(
                "storage",
                f"the session database {source} is read-only, and reading it needs a private"
                f" copy of {needed // 1024 // 1024 + 1} MB, but {self.folder.parent} has"
                f" {free // 1024 // 1024} MB free; set TMPDIR to a folder with room",
            )

    @classmethod
    def from_files(cls, source: Path) -> PrivateCopy:
        wal = side_file(source, "wal")
        copy = cls(source, source.stat().st_size + wal.stat().st_size)
        try:
            shutil.copyfile(source, copy.path)
            shutil.copyfile(wal, side_file(copy.path, "wal"))
            conn = sqlite3.connect(copy.path)
            try:  # bring the -wal's writes in now, before any reader opens the copy
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
        except BaseException:
            copy.close()
            raise
        return copy

    @classmethod
    def from_connection(cls, source: Path, conn: sqlite3.Connection) -> PrivateCopy:
        pages, size = (
            conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "page_size")
        )
        copy = cls(source, pages * size)
        try:
            target = sqlite3.connect(copy.path)
            try:
                conn.backup(target)
            finally:
                target.close()
        except BaseException:
            copy.close()
            raise
        return copy

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
