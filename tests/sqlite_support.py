"""Another process's hold on a SQLite database, for tests of what waits for it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def write_lock_held(db: Path) -> Iterator[None]:
    """The database's write lock held (as by a long transaction or a frozen program) until
    the block ends; nothing written."""
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def stored_texts(db: Path) -> list[str]:
    """The JSON text of every entry stored in ``db``."""
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT data FROM entries")]
