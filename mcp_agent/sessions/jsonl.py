"""The JSONL backend: one pi-compatible file per session, append-only.

Each append writes one line and is flushed and fsynced before it counts. Leaf moves are
written as lines of their own (pi's custom entries, ``file_json``), so on load the last line
gives the leaf (as pi does it). A last
line torn by a crash is left unread with a warning (pi, which takes no lock, may be writing
it), and our next append cuts it off if it stays; a bad line anywhere else means the file is
damaged, and loading raises an error naming the file and line. Files of pi versions 1 and 2
are migrated on load and rewritten as version 3, as pi does.

Our processes share a file through its lock (``file_lock``): each append first takes up
what the others wrote. pi takes no lock, so pi and we should not write one file at once.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import stat
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from mcp_agent.sessions.activity import Activity, last_activity
from mcp_agent.sessions.context import SessionContextBuildOptions
from mcp_agent.sessions.entries import (
    CURRENT_SESSION_VERSION,
    LeafEntry,
    SessionEntry,
    SessionHeader,
    entry_text,
    file_json,
    new_header,
    write_time,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.file_lock import (
    TEMP_SUFFIX,
    hold_temp_file,
    locked_file,
    remove_dead_temp_files,
    stamp_of,
)
from mcp_agent.sessions.folders import (
    LAYOUTS,
    Layout,
    check_session_id,
    detect_layout,
    find_session_file,
    new_session_path,
    session_files,
    session_id_of,
)
from mcp_agent.sessions.hits import HITS_LISTED, HitPage, search_tag
from mcp_agent.sessions.memory import InMemorySessionStorage
from mcp_agent.sessions.pi import (
    ParsedSession,
    SessionStream,
    file_lines,
    json_rows,
    parse_rows,
    pi_repeats_skipped,
)
from mcp_agent.sessions.repo import (
    BaseSessionRepo,
    SessionPage,
    SessionSummary,
    decode_cursor,
    encode_cursor,
    hits_in,
    summarize,
)
from mcp_agent.sessions.words import query_words, search_words, text_matches

log = logging.getLogger(__name__)

# Files whose listing row (and place) a repo keeps between listings.
MAX_LISTED = 10_000
# Sessions a repo keeps indexed in memory between opens: at most this many, and files of at
# most this many bytes in all (the index takes several times its file's size).
OPEN_SESSIONS = 256
OPEN_BYTES = 64 << 20
# How long an append waits for a torn last line to be finished (by pi, which takes no lock)
# before it cuts it off as a crash's: TORN_WAITS looks, TORN_WAIT seconds apart.
TORN_WAITS = 20
TORN_WAIT = 0.05
# The characters of the sessions' words a repo keeps for queries of its listings.
LISTED_CHARS = 32 << 20
# The listed sessions whose first hits a repo keeps, found as a listing read their files: those
# of the last few pages (a page shows a few dozen).
KEPT_HITS = 256
# And the characters of their entries' text it keeps at most: a hit's entry is kept whole, and
# one may be a tool's output of megabytes.
KEPT_HIT_CHARS = 16 << 20


def _fsync_directory(directory: Path) -> None:
    """Make a new or renamed file's directory entry durable too."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_atomically(path: Path, lines: Iterable[str]) -> tuple[int, int]:
    """Write a whole file so that a crash leaves either the old file or the new one (with the
    old one's permissions; a new one is private to this user, as sessions may hold secrets).
    Returns the stamp of what was written, taken before it is at ``path``: once it is, another
    process may append to it (nobody holds the new file's lock), and a stamp taken then would
    count that append as read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            # Locked until it has its name: a process killed before leaves it unlocked, for
            # the next repo to remove (remove_dead_temp_files).
            hold_temp_file(fd)
            with contextlib.suppress(FileNotFoundError):
                os.fchmod(handle.fileno(), stat.S_IMODE(path.stat().st_mode))
            for line in lines:
                handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
            written = os.fstat(handle.fileno())
            os.replace(temp, path)  # a rename keeps the file's mtime: the stamp stays true
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return written.st_mtime_ns, written.st_size


@contextlib.contextmanager
def _writing(path: Path, doing: str = "write") -> Iterator[None]:
    """A failed write of a session file (disk full, a folder made read-only, an I/O error),
    said as such: callers have already undone it, and an OSError would reach a client only
    as the SDK's bare "Error executing tool"."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            message = f"no room left to {doing} {path}; nothing was written ({reason})"
        else:
            message = f"cannot {doing} {path}: {reason}; nothing was changed"
        raise SessionError("storage", message) from None


def read_session_file(path: Path) -> tuple[ParsedSession, bool]:
    """The session stored in ``path``, and whether its last line was left unread (torn), read
    one line at a time as an import reads a file (``json_rows``), problems said as damage."""
    parsed, torn, _ = _read_locked(path)
    return parsed, torn


def load_session_file(path: Path) -> tuple[ParsedSession, tuple[int, int], bool]:
    """What the file at ``path`` holds, the stamp of what was read, and whether its last line
    was left unread (torn). A file of an older version is migrated and rewritten, as pi does,
    read again under the exclusive lock (another process may have changed it meanwhile).

    A torn line is not cut off here: pi, which takes no lock, may be writing it, and its line
    would then go to a file no longer at the path. Our next append cuts it if it stays."""
    parsed, torn, stamp = _read_locked(path)
    if parsed.migrated_from < CURRENT_SESSION_VERSION:
        parsed, torn, stamp = _read_locked(path, migrate=True)
    if torn:
        log.warning("%s: its last line is torn and left unread", path)
    return parsed, stamp, torn


def _read_locked(path: Path, migrate: bool = False) -> tuple[ParsedSession, bool, tuple[int, int]]:
    """Read under the file's lock (shared; exclusive to ``migrate`` it if it needs it), so
    never while another process of ours appends to it; with the stamp of what was read."""
    with _reading(path), locked_file(path, append=migrate) as handle:
        parsed, torn = _parse(handle, path)
        if migrate and parsed.migrated_from < CURRENT_SESSION_VERSION:
            return parsed, torn, _rewrite(path, parsed.header, parsed.entries)
        return parsed, torn, stamp_of(handle)


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise SessionError("not_found", f"session file {path} not found") from None
    except OSError as error:  # a folder named like a session file, a file we may not read
        raise SessionError("corrupt", f"cannot read {path}: {error.strerror or error}") from None


def _parse(handle: IO[bytes], path: Path) -> tuple[ParsedSession, bool]:
    torn: list[int] = []
    name = str(path)
    notes: list[str] = []
    rows = json_rows(file_lines(handle, name, "corrupt"), name, "corrupt", notes, torn)
    read = 0

    def lines() -> Iterator[tuple[int, dict[str, Any]]]:
        nonlocal read
        yield from pi_repeats_skipped(rows)
        # The reading's own notes: the parse adds its notes (orphans, a missing leaf) to the
        # same list only after the last row, and those are the parse's to say, not logged here.
        read = len(notes)

    parsed = parse_rows(lines(), name, "corrupt", notes=notes)
    said = notes[:read]
    # What was skipped or replaced (a torn last line, said last, is said where it is loaded).
    for note in said[:-1] if torn else said:
        log.warning("%s", note)
    return parsed, bool(torn)


def _rewrite(path: Path, header: SessionHeader, entries: Sequence[SessionEntry]) -> tuple[int, int]:
    """Write a file again as indexed (migrated, or without its torn line); the new file's
    stamp. The caller holds the old file's exclusive lock, so no process of ours appends to it
    meanwhile (and one waiting for it opens the new file: see ``locked_file``)."""
    with _writing(path):
        return write_file_atomically(path, [file_json(header), *map(file_json, entries)])


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _mtime_text(stamp: tuple[int, int]) -> str:
    """A file's time of change as a session's ``modified`` time."""
    moment = datetime.fromtimestamp(stamp[0] / 1e9, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class JsonlSessionStorage(InMemorySessionStorage):
    """A session in a pi JSONL file, indexed in memory (seed: JsonlSessionStorage).

    With ``header`` a new file is created (it must not exist); without, the file is loaded.
    """

    def __init__(
        self,
        path: str | Path,
        header: SessionHeader | None = None,
        entries: Sequence[SessionEntry] = (),
    ) -> None:
        self.path = Path(path)
        if header is not None:
            if self.path.exists():
                raise SessionError("conflict", f"session file {self.path} already exists")
            entries = list(entries)
            super().__init__(header, entries)  # checks the entries before anything is written
            with _writing(self.path):
                lines = [file_json(header), *map(file_json, entries)]
                self.stamp = write_file_atomically(self.path, lines)
            self.torn = False
            return
        parsed, self.stamp, self.torn = load_session_file(self.path)
        super().__init__(parsed.header, parsed.entries)
        self.modified = _mtime_text(self.stamp)  # not the time it was read

    @classmethod
    def import_stream(cls, path: str | Path, stream: SessionStream) -> JsonlSessionStorage:
        """A new file holding an imported session, written as the stream yields its entries
        to a temporary file in the same folder, which takes the file's name only once the
        whole stream was read (fsynced): a failed import leaves no file. The entries are
        indexed in memory as they come, as loading the file would."""
        path = Path(path)
        if path.exists():
            stream.drain()  # a problem in the file is reported first
            raise SessionError("conflict", f"session file {path} already exists")
        storage = cls.__new__(cls)
        storage.path = path
        InMemorySessionStorage.__init__(storage, stream.header)

        def lines() -> Iterator[str]:
            yield file_json(stream.header)
            for entry in stream:
                storage._index(entry)
                yield file_json(entry)

        with _writing(path):
            storage.stamp = write_file_atomically(path, lines())
        storage.modified = write_time()
        storage.torn = False
        return storage

    @classmethod
    def create(
        cls,
        path: str | Path,
        cwd: str | None = None,
        parent_session: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> JsonlSessionStorage:
        return cls(path, new_header(cwd=cwd, parent_session=parent_session, metadata=metadata))

    def refresh(self) -> None:
        """Index the file again if another program changed it since we read or wrote it."""
        with self.lock, _reading(self.path):
            if _stamp(self.path) != self.stamp:
                self._take(*load_session_file(self.path))

    def set_leaf_id(self, leaf_id: str | None) -> LeafEntry | None:
        with self.lock:
            # The leaf as the file has it now: a move to where this index last saw it, after
            # another process moved it on, wrote nothing.
            self.refresh()
            return super().set_leaf_id(leaf_id)

    def _take(self, parsed: ParsedSession, stamp: tuple[int, int], torn: bool) -> None:
        if parsed.header.id != self._header.id:
            raise SessionError(
                "corrupt", f"{self.path} now holds another session ({parsed.header.id})"
            )
        self._load(parsed.header, parsed.entries)
        self.stamp = stamp
        self.torn = torn
        self.modified = _mtime_text(stamp)

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        """Append under the file's exclusive lock, having first taken up what another process
        wrote since: an entry built on the leaf as we last saw it then goes on the leaf as it
        is (as the SQL stores do), so two servers on one file keep one conversation."""
        with self.lock, _writing(self.path):
            seen = self._leaf_id
            for _ in range(3):
                with self._locked_for_append() as handle:
                    if not self._caught_up(handle):
                        continue  # rewritten: the lock is on a file no longer at the path
                    if entry.parent_id == seen and self._leaf_id != seen:
                        entry = entry.model_copy(update={"parent_id": self._leaf_id})
                    self._check(entry)
                    self._append_line(handle, entry)
                    self.stamp = stamp_of(handle)
                self._index(entry)
                self.modified = write_time()
                return entry
        raise SessionError("busy", f"{self.path} kept being rewritten by another process")

    def _caught_up(self, handle: IO[bytes]) -> bool:
        """Index what the locked file holds now; False when it had to be rewritten. A torn
        last line is waited for a while first: pi, which takes no lock, may be writing it. One
        that stays is a crash's, and is cut off: the next line must not follow it."""
        for _ in range(TORN_WAITS):
            if stamp_of(handle) != self.stamp:
                handle.seek(0)
                parsed, torn = _parse(handle, self.path)
                if parsed.migrated_from < CURRENT_SESSION_VERSION:  # an older pi wrote it
                    self._take(parsed, _rewrite(self.path, parsed.header, parsed.entries), torn)
                    return False
                self._take(parsed, stamp_of(handle), torn)
            if not self.torn:
                return True
            time.sleep(TORN_WAIT)
        log.warning("%s: cutting off a torn last line", self.path)
        self.stamp = _rewrite(self.path, self._header, self._entries)
        self.torn = False
        return False

    def _append_line(self, handle: IO[bytes], entry: SessionEntry) -> None:
        fd = handle.fileno()
        start = os.fstat(fd).st_size
        line = file_json(entry).encode("utf-8") + b"\n"
        if start and os.pread(fd, 1, start - 1) != b"\n":
            line = b"\n" + line  # a file pi or an editor left without one
        try:
            # Written past the handle's buffer: a write the disk cut short left the rest of
            # the line in that buffer, which closing the handle wrote after the cut below
            # (the room the cut freed let it in), a line's tail that made the file unreadable.
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            # A failed append (disk full, I/O error) must not leave part of a line behind:
            # the next append would follow it and the file would no longer load.
            try:
                os.ftruncate(fd, start)
            except OSError as error:
                log.warning("%s: could not cut off a failed append: %s", self.path, error)
            raise

    @contextlib.contextmanager
    def _locked_for_append(self) -> Iterator[IO[bytes]]:
        """The file, opened and locked for one append, as pi appends (and closed after it): a
        handle kept open held a descriptor for every session a server ever appended to, until
        it ran out of them. Never created here: a session deleted meanwhile (by a tool on
        another worker thread, or another program) must not come back as a file of this one
        line, without its header."""
        with contextlib.ExitStack() as stack:
            try:
                handle = stack.enter_context(locked_file(self.path, append=True))
            except FileNotFoundError:
                session_id = self.get_metadata().id
                raise SessionError("not_found", f"session {session_id} was deleted") from None
            yield handle


class JsonlSessionRepo(BaseSessionRepo):
    """One file per session in ``directory``: ``<id>.jsonl`` (``layout="flat"``), or pi's
    ``<cwd folder>/<time>_<id>.jsonl`` (``layout="pi"``, so that pi and we share
    ``~/.pi/agent/sessions``); see :mod:`mcp_agent.sessions.folders`. Files of both layouts
    are read; the layout decides where new ones go (by default: what the folder holds)."""

    def __init__(
        self,
        directory: str | Path,
        context_build_options: SessionContextBuildOptions | None = None,
        layout: Layout | None = None,
    ) -> None:
        super().__init__(context_build_options)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if layout is not None and layout not in LAYOUTS:
            raise SessionError("invalid_argument", f"layout must be flat or pi, not {layout!r}")
        self.layout: Layout = layout or detect_layout(self.directory)
        if removed := remove_dead_temp_files(self.directory):
            log.warning(
                "%s: removed %d temporary file(s) left by a process stopped while it wrote",
                self.directory,
                removed,
            )
        # Listing reads files; keep what it learned until the file changes (the newest
        # MAX_LISTED files: beyond them a listing reads again rather than holding all).
        self._listing: dict[
            Path, tuple[tuple[int, int], SessionSummary, builtins.list[str] | None]
        ] = {}
        self._listed_chars = 0
        # Each file's time of last activity, which orders listings, for the same files, and
        # what its reading learned (a file that grew is read on from there).
        self._activity: dict[Path, tuple[tuple[int, int], str, Activity | None]] = {}
        # Where each session's file was found, so an open need not search the folders.
        self._paths: dict[str, Path] = {}
        # Sessions opened twice share one index (an append takes up what another index of
        # the file wrote, but twice the memory): the ones used last, and any still held.
        self._open: OrderedDict[str, JsonlSessionStorage] = OrderedDict()
        self._held: weakref.WeakValueDictionary[str, JsonlSessionStorage] = (
            weakref.WeakValueDictionary()
        )
        # The server opens sessions on several worker threads at once.
        self._lock = threading.RLock()
        # The files the listing that began last had to leave out, and why (bounded as the
        # folder is): a copy of every session says which it could not take.
        self.skipped: dict[Path, str] = {}
        # The first hits of the sessions the listings last found, by file, its stamp and the
        # search's words (``search_sessions``).
        # (The page, and the characters of its entries' text.)
        self._hits: OrderedDict[
            tuple[Path, tuple[int, int], tuple[str, ...]], tuple[HitPage, int]
        ] = OrderedDict()
        self._hit_chars = 0

    def path_for(self, session_id: str) -> Path:
        """The file of a session: where it is, or where a flat one would be."""
        with self._lock:
            check_session_id(session_id)
            known = self._paths.get(session_id)
            if known is not None and known.exists():
                return known
            found = find_session_file(self.directory, session_id)
            if found is None:
                self._paths.pop(session_id, None)
                return self.directory / f"{session_id}.jsonl"
            self._remember(session_id, found)
            return found

    def _remember(self, session_id: str, path: Path) -> None:
        if session_id not in self._paths and len(self._paths) >= MAX_LISTED:
            del self._paths[next(iter(self._paths))]
        self._paths[session_id] = path

    def _new_path(self, header: SessionHeader) -> Path:
        path = new_session_path(self.directory, self.layout, header)
        self._remember(header.id, path)
        return path

    def _create_storage(
        self, header: SessionHeader, entries: builtins.list[SessionEntry]
    ) -> JsonlSessionStorage:
        with self._lock:
            if self.layout == "pi" and header.parent_session:
                # pi names the parent by its file (forkFrom, createBranchedSession), whole:
                # a folder given relative to here means nothing where pi runs.
                parent = find_session_file(self.directory, header.parent_session)
                if parent is not None:
                    named = str(parent.absolute())
                    header = header.model_copy(update={"parent_session": named})
            storage = JsonlSessionStorage(self._new_path(header), header, entries)
            self._keep_open(storage)
            return storage

    def _import_storage(self, stream: SessionStream) -> JsonlSessionStorage:
        try:
            with self._lock:
                path = self._new_path(stream.header)
        except SessionError:
            stream.drain()  # a problem in the file is reported first
            raise
        storage = JsonlSessionStorage.import_stream(path, stream)
        with self._lock:
            self._keep_open(storage)
        return storage

    def _open_storage(self, session_id: str) -> JsonlSessionStorage:
        # A file is read without the repo's lock (under its own): opening a big session held
        # up every other open, append and listing meanwhile.
        with self._lock:
            path = self.path_for(session_id)
            storage = self._kept(session_id, path)
            if not path.exists():
                self._forget(session_id)
                raise SessionError("not_found", f"session {session_id} not found")
        if storage is not None:
            # Taken up in place: a run holding this storage must see it too.
            try:
                storage.refresh()
            except SessionError:
                with self._lock:
                    self._forget(session_id)
                raise
        else:
            read = JsonlSessionStorage(path)
            if read.get_metadata().id != session_id:
                raise SessionError(
                    "corrupt", f"{path} is named for session {session_id} but holds another"
                )
            with self._lock:  # one index per file: the one another thread kept meanwhile
                storage = self._kept(session_id, path) or read
                if not path.exists():  # deleted meanwhile
                    raise SessionError("not_found", f"session {session_id} not found")
        with self._lock:
            self._keep_open(storage)
        return storage

    def _kept(self, session_id: str, path: Path) -> JsonlSessionStorage | None:
        storage = self._open.get(session_id) or self._held.get(session_id)
        return storage if storage is not None and storage.path == path else None

    def _keep_open(self, storage: JsonlSessionStorage) -> None:
        """Keep the sessions used last, as many and as large as the bounds let; one let go
        that a caller still holds is found again through ``_held`` while it is held."""
        session_id = storage.get_metadata().id
        self._held[session_id] = storage
        self._open[session_id] = storage
        self._open.move_to_end(session_id)
        total = sum(kept.stamp[1] for kept in self._open.values())
        while len(self._open) > 1 and (len(self._open) > OPEN_SESSIONS or total > OPEN_BYTES):
            _, dropped = self._open.popitem(last=False)
            total -= dropped.stamp[1]

    def _forget(self, session_id: str) -> None:
        self._open.pop(session_id, None)
        self._held.pop(session_id, None)

    def exists(self, session_id: str) -> bool:
        try:
            return self.path_for(session_id).exists()
        except SessionError:
            return False

    def summary(self, session_id: str) -> SessionSummary:
        storage = self._open_storage(session_id)
        found = summarize(storage)
        found.modified = self._modified(storage.path, storage.stamp)
        return found

    def _modified(self, path: Path, key: tuple[int, int]) -> str:
        """A file's time of last activity (``activity``), as pi orders its listings; kept
        until the file changes."""
        with self._lock:
            kept = self._activity.get(path)
        if kept is not None and kept[0] == key:
            return kept[1]
        read: Activity | None = None
        try:  # without the lock: the other threads' opens and appends do not wait for a read
            modified, read = last_activity(path, _mtime_text(key), kept[2] if kept else None)
        except OSError:  # said where the listing reads it (it is left out, named)
            modified = _mtime_text(key)
        with self._lock:
            self._activity.pop(path, None)
            if len(self._activity) >= MAX_LISTED:
                del self._activity[next(iter(self._activity))]
            self._activity[path] = (key, modified, read)
        return modified

    def _scan(
        self,
        path: Path,
        session_id: str,
        key: tuple[int, int],
        modified: str,
        words: builtins.list[str],
    ) -> tuple[SessionSummary, builtins.list[str]] | str:
        """The file's listing row and texts, or why it cannot be listed."""
        with self._lock:
            cached = self._listing.get(path)
        if cached is not None and cached[0] == key and (cached[2] is not None or not words):
            return cached[1], cached[2] or []
        why: str | None = None
        try:  # without the lock, as in _modified: a search may read gigabytes
            parsed, _torn = read_session_file(path)
        except SessionError as error:
            why = error.message
        else:
            if parsed.header.id != session_id:
                why = f"{path} is named for session {session_id} but holds another"
        if why is not None:
            log.warning("skipping session file: %s", why)
            with self._lock:
                self.skipped[path] = why
            return why
        storage = InMemorySessionStorage(parsed.header, parsed.entries)
        texts = [storage.get_session_name() or ""]
        texts.extend(entry_text(entry) for entry in parsed.entries)
        summary = summarize(storage)
        summary.modified = modified
        # A session the search finds: its first hits, while its entries are at hand (found
        # from the file again, a listing read each file it showed twice).
        hits = None
        if words and text_matches(words, texts):
            tag = search_tag(session_id, words)
            hits = hits_in(storage, words, HITS_LISTED, None, tag)
        with self._lock:
            self._keep_listed(path, key, summary, texts)
            if hits is not None:
                self._keep_hits((path, key, tuple(words)), hits)
        return summary, texts

    def _keep_listed(
        self, path: Path, key: tuple[int, int], summary: SessionSummary, texts: builtins.list[str]
    ) -> None:
        """Keep a file's listing row; its words too while all kept are within LISTED_CHARS (a
        query reads the others' files again: a big pi folder's every tool output is gigabytes)."""
        self._drop_listed(path)
        if len(self._listing) >= MAX_LISTED:
            self._drop_listed(next(iter(self._listing)))
        size = sum(map(len, texts))
        kept = texts if self._listed_chars + size <= LISTED_CHARS else None
        self._listing[path] = (key, summary, kept)
        self._listed_chars += size if kept is not None else 0

    def _drop_listed(self, path: Path) -> None:
        dropped = self._listing.pop(path, None)
        if dropped is not None and dropped[2] is not None:
            self._listed_chars -= sum(map(len, dropped[2]))

    def list(
        self, query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """Newest first across both layouts, by the time of each session's last message, as
        pi lists them (``activity``). Files are ordered by it before any is read whole, so a
        page reads only the files it shows (and, with a query, the ones that did not match)."""
        words = query_words(query)
        if limit < 1:
            raise SessionError("invalid_argument", "limit must be at least 1")
        after = decode_cursor(cursor) if cursor is not None else None
        if cursor is None:
            with self._lock:
                self.skipped.clear()
        # The lock is held for the kept rows and times only, never for a file's read: a search
        # that reads every file (186 MB: 23 s) held up every open and append meanwhile.
        candidates: builtins.list[tuple[str, str, Path, tuple[int, int], str]] = []
        for path in session_files(self.directory):
            session_id = session_id_of(path)
            try:
                key = _stamp(path)
            except FileNotFoundError:
                continue
            assert session_id is not None  # session_files yields named files only
            with self._lock:
                self._remember(session_id, path)
            modified = self._modified(path, key)
            # Sessions active within one millisecond: the one written last first.
            with self._lock:
                place = f"{modified} {self._changed(session_id, key)}"
            if after is None or (place, session_id) < after:
                candidates.append((place, session_id, path, key, modified))
        candidates.sort(reverse=True)
        items: builtins.list[SessionSummary] = []
        left_out: builtins.list[tuple[int, str]] = []
        last_place = ""
        for place, session_id, path, key, modified in candidates:
            scanned = self._scan(path, session_id, key, modified, words)
            if isinstance(scanned, str):
                left_out.append((len(items), scanned))
                continue
            if words and not text_matches(words, scanned[1]):
                continue
            if len(items) == limit:
                return SessionPage(items, encode_cursor(last_place, items[-1].id), left_out)
            items.append(scanned[0])
            last_place = place
        return SessionPage(items, None, left_out)

    def _keep_hits(
        self, kept: tuple[Path, tuple[int, int], tuple[str, ...]], hits: HitPage
    ) -> None:
        chars = sum(len(entry_text(hit.entry)) for hit in hits.hits)
        if chars > KEPT_HIT_CHARS:
            return
        old = self._hits.pop(kept, None)
        if old is not None:
            self._hit_chars -= old[1]
        self._hits[kept] = (hits, chars)
        self._hit_chars += chars
        while len(self._hits) > KEPT_HITS or self._hit_chars > KEPT_HIT_CHARS:
            self._hit_chars -= self._hits.popitem(last=False)[1][1]

    def search_sessions(
        self,
        session_ids: Sequence[str],
        query: str,
        limit: int = HITS_LISTED,
        listed: Mapping[str, SessionSummary] | None = None,
    ) -> dict[str, HitPage]:
        """As every repo's, but the first hits a listing found as it read a file are taken
        as they are while the file is as it was."""
        words = search_words(query)
        found: dict[str, HitPage] = {}
        rest: builtins.list[str] = []
        for session_id in session_ids:
            try:
                path = self.path_for(session_id)
                kept_as = (path, _stamp(path), tuple(words))
            except (SessionError, OSError):
                rest.append(session_id)
                continue
            with self._lock:
                kept = self._hits.get(kept_as) if limit == HITS_LISTED else None
            hits = kept[0] if kept is not None else None
            if hits is None:
                rest.append(session_id)
            else:
                found[session_id] = hits
        found.update(super().search_sessions(rest, query, limit))
        return found

    def _changed(self, session_id: str, key: tuple[int, int]) -> str:
        """When a file changed: the precise time if we wrote it last, else its mtime."""
        opened = self._open.get(session_id)
        if opened is not None and opened.stamp == key and opened.modified:
            return opened.modified
        return _mtime_text(key)

    def delete(self, session_id: str) -> None:
        with self._lock:
            path = self.path_for(session_id)
            storage = self._open.get(session_id) or self._held.get(session_id)
            self._forget(session_id)
            # With the session's lock: an append under way on another worker thread ends
            # first, rather than lose its file under it.
            with storage.lock if storage is not None else contextlib.nullcontext():
                if storage is not None:
                    storage.close()
                with _writing(path, "delete"):
                    try:
                        # Under the file's lock: another process's rewrite under way (a torn
                        # line cut, a migration) ends first, else its rename would put the
                        # file back; one that waits finds no file. Shared is enough to keep
                        # out the writers, and needs no right to write the file.
                        with locked_file(path):
                            path.unlink()
                    except FileNotFoundError:
                        raise SessionError("not_found", f"session {session_id} not found") from None
            self._paths.pop(session_id, None)
            self._drop_listed(path)
            self._activity.pop(path, None)

    def close(self) -> None:
        with self._lock:
            for storage in self._open.values():
                storage.close()
            self._open.clear()
            self._held.clear()
