"""pi session files: reading JSONL lines, migrating versions 1 and 2, writing version 3.

The migrations follow pi's own ``migrateV1ToV2`` and ``migrateV2ToV3``:
- v1 entries have no ids: each gets a fresh 8-hex id and the previous entry as parent (the
  entries form a line); a compaction's ``firstKeptEntryIndex`` (an index into the file's
  entries, header included) becomes ``firstKeptEntryId`` when it names an earlier entry.
- v2 used the message role ``hookMessage`` where v3 says ``custom``.

A file is read as a :class:`SessionStream`: one line at a time, each entry migrated, parsed
and checked as it comes, so that importing a file of any size keeps no entry in memory: the
checks that need every entry run in a temporary database (``tree_check``), and the backends
store each entry as it arrives, all or nothing.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

from mcp_agent.sessions.entries import (
    CURRENT_SESSION_VERSION,
    ENTRY_ID_CHARS,
    TIME_CHARS,
    LeafEntry,
    SessionEntry,
    SessionHeader,
    clip_long,
    entry_to_json,
    file_json,
    file_line,
    iso_now,
    new_entry_id,
    new_session_id,
    parse_entry,
    parse_header,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.storage import (
    SessionStorage,
    StoredPages,
    leaf_after,
    moved_leaf,
    stored_pages,
)
from mcp_agent.sessions.tree_check import TreeCheck
from mcp_agent.wire import (
    SURROGATE_ESCAPE,
    cut_off_json,
    loads_json,
    lone_surrogate,
    utf8_only,
)

log = logging.getLogger(__name__)

# Makes a fresh entry id, given a test for the ids already taken.
NewId = Callable[[Callable[[str], bool]], str]
Rows = Iterator[tuple[int, dict[str, Any]]]


@dataclass
class ParsedSession:
    header: SessionHeader
    entries: list[SessionEntry]
    leaf_id: str | None
    migrated_from: int  # the file's version before migration


# --- migrations -------------------------------------------------------------------------------


def _version_to_migrate(header: Mapping[str, Any] | None) -> int | None:
    """The version of a file that needs migrating (1 or 2), or None for a current one. The
    header's version is compared as pi's JavaScript compares it: missing or null is 1, "1" and
    1.0 are 1, true is 1; what is not a number (NaN) is below no version, so not migrated."""
    version = _js_number(header.get("version") if header is not None else None)
    if version is None or version >= CURRENT_SESSION_VERSION:
        return None
    return 1 if version < 2 else 2


def _js_number(value: Any) -> float | None:
    """``value ?? 1`` as JavaScript's ``<`` sees it; None for NaN."""
    if value is None:
        return 1.0
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, list):  # as its text: [] is "", [2] is "2", [1, 2] is "1,2"
        if not value:
            return 0.0
        if len(value) > 1 or isinstance(value[0], bool | dict):
            return None
        return 0.0 if value[0] is None else _js_number(value[0])
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0.0
        try:
            number = float(text)
        except ValueError:
            return None
        return None if math.isnan(number) else number
    return None


def migrate_rows(rows: list[dict[str, Any]], new_id: NewId = new_entry_id) -> int:
    """Bring pi JSON objects (header first) to version 3 in place; returns the old version."""
    header = next((row for row in rows if row.get("type") == "session"), None)
    version = _version_to_migrate(header)
    if version is None:
        found = header.get("version", 1) if header is not None else 1
        return found if isinstance(found, int) else CURRENT_SESSION_VERSION
    if version < 2:
        taken: set[str] = set()
        previous: str | None = None

        def resolve(index: int) -> str | None:
            # pi indexes the parsed entries with the header at 0; a later entry has no id yet.
            if index < len(rows):
                target = rows[index]
                if target.get("type") != "session" and "id" in target:
                    return str(target["id"])
            return None

        for row in rows:
            previous = _migrate_v1_row(row, previous, new_id, taken.__contains__, resolve)
            if row.get("type") != "session":
                taken.add(row["id"])
    for row in rows:
        _migrate_v2_row(row)
    return version


def _migrate_v1_row(
    row: dict[str, Any],
    previous: str | None,
    new_id: NewId,
    taken: Callable[[str], bool],
    resolve: Callable[[int], str | None],
) -> str | None:
    """v1 → v2 for one row: a fresh id, the previous row as parent, and a compaction's
    ``firstKeptEntryIndex`` as an id (``resolve`` maps an index to the id of the row there).
    Returns the parent of the next row."""
    if row.get("type") == "session":
        row["version"] = 2
        return previous
    row["id"] = new_id(taken)
    row["parentId"] = previous
    index = row.get("firstKeptEntryIndex")
    if (
        row.get("type") == "compaction"
        and isinstance(index, int | float)
        and not isinstance(index, bool)
    ):
        # As pi: a number is taken away, and names an entry when it is a whole index.
        del row["firstKeptEntryIndex"]
        if index >= 0 and float(index).is_integer():
            target = resolve(int(index))
            if target is not None:
                row["firstKeptEntryId"] = target
    return str(row["id"])


def _migrate_v2_row(row: dict[str, Any]) -> None:
    if row.get("type") == "session":
        row["version"] = CURRENT_SESSION_VERSION
    elif row.get("type") == "message":
        message = row.get("message")
        if isinstance(message, dict) and message.get("role") == "hookMessage":
            message["role"] = "custom"


# --- lines and rows ---------------------------------------------------------------------------


# (line number, line, whether a line break ended it)
Lines = Iterator[tuple[int, str, bool]]


# A byte order mark before the header: pi's reader trims it away with the file's whitespace.
BOM = "\ufeff"


def is_jsonl_text(text: str) -> bool:
    """Whether ``text`` is a session file's text rather than a path: a JSON object after any
    whitespace and a byte order mark (pi's reader trims both away)."""
    return text.lstrip().removeprefix(BOM).lstrip().startswith("{")


def _text_lines(text: str) -> Lines:
    """The pieces of ``text`` between newlines, split as it is read (a ``\r`` before a newline
    is JSON whitespace, as pi reads it; a byte order mark at the start is left out)."""
    start = 1 if text.startswith(BOM) else 0
    number = 0
    while True:
        number += 1
        end = text.find("\n", start)
        if end < 0:
            yield number, text[start:], False
            return
        yield number, text[start:end], True
        start = end + 1


def _decode_error(error: UnicodeDecodeError, offset: int, line: int) -> str:
    """Why a line of a file that is not UTF-8 text cannot be read (often it is no session
    file at all: an image, an archive): the line, the bytes at fault and where in the file
    they are, counted from its start."""
    bad = error.object[error.start : min(error.end, error.start + 4)]
    what = " ".join(f"0x{byte:02x}" for byte in bad)
    return (
        f"line {line} is not UTF-8 text (byte {what} at offset {offset + error.start:,} of the"
        " file); a pi session file is JSON lines in UTF-8"
    )


# How Python's UTF-8 decoder words a text that ends inside a character.
_CUT_CHARACTER = "unexpected end of data"


def file_lines(handle: IO[bytes], name: str, code: str = "invalid_import") -> Lines:
    """The lines of a UTF-8 file, read one line at a time. Lines end at ``\\n``, as pi splits
    them (a ``\\r`` before it is JSON whitespace); a byte order mark at the start is left out. A
    byte that is not UTF-8 makes the whole file unreadable, wherever it is, but for a last
    line cut inside a character: a crash cuts at a byte, and that line is read up to the cut
    (for ``json_rows`` to judge as torn), and a line that a crash cut inside a character and
    a later write continued (``continued_tear``)."""
    number = 0
    offset = 0
    while True:
        try:
            raw = handle.readline()
        except OSError as error:
            raise SessionError(code, f"cannot read {name}: {error}") from None
        if not raw:
            return
        try:
            text = raw.decode("utf-8")  # with its line break, as decoding the whole file sees it
        except UnicodeDecodeError as error:
            if not raw.endswith(b"\n") and error.end == len(raw) and error.reason == _CUT_CHARACTER:
                text = raw[: error.start].decode("utf-8")
            else:
                # A write cut inside a character that a later write went on after: its bytes
                # kept as lone surrogates, in the part of the line that is skipped.
                text = raw.decode("utf-8", "surrogateescape")
                if continued_tear(text.rstrip("\n")) is None:
                    detail = _decode_error(error, offset, number + 1)
                    raise SessionError(code, f"cannot read {name}: {detail}") from None
        if offset == 0:
            text = text.removeprefix(BOM)
        offset += len(raw)
        ended = text.endswith("\n")
        number += 1
        yield number, text[:-1] if ended else text, ended


def _torn(line: str, error: ValueError) -> bool:
    """Whether a last line without its line break, which failed to parse with ``error``, is a
    write torn by a crash: the start of a JSON text (``cut_off_json``), or nothing, followed
    by the NUL bytes a file system reads back where a crash lost a file's last blocks."""
    start = line.rstrip("\x00")
    if start == line:
        return cut_off_json(line, error)
    if not start.strip():
        return True
    try:
        loads_json(start, finite=False, lone_surrogates=True)
    except ValueError as cut:
        return cut_off_json(start, cut)
    return False  # a whole line before the zeros: not the shape of a torn write


# How each line pi writes begins: JSON.stringify of an entry, whose first key is its type.
_ENTRY_START = '{"type":"'
# The starts of entries tried in a line that does not parse, from its end, may parse this many
# times the line's length in all (objects nested in objects are parsed again: a damaged line of
# deeply nested entries' starts would cost its length squared): a line that costs more is damage.
CONTINUED_WORK = 4
# Bytes that were not UTF-8, as ``file_lines`` keeps them in a continued tear's line.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_DECODER = json.JSONDecoder()


def continued_tear(line: str) -> dict[str, Any] | None:
    """The whole entry that ``line`` ends with when the line is a write a crash cut off that
    a later write went on after, on the same line: pi, resuming a file whose last line was
    torn, appends its next line right after the cut. pi skips such a line (JSON.parse fails),
    the entry after the cut with it; so do we, saying so. None for any other line that does
    not parse. The part before the entry is the start of a JSON text (or a whole object: a
    write cut just before its line break)."""
    end = len(line.rstrip())
    start = end
    budget = CONTINUED_WORK * len(line)
    while True:
        start = line.rfind(_ENTRY_START, 0, start)
        if start <= 0:
            return None
        try:
            finish = _DECODER.raw_decode(line, start)[1]
        except json.JSONDecodeError as error:
            finish = error.pos
        except RecursionError:  # nested deeper than Python's decoder goes: damage
            return None
        budget -= finish - start
        if finish == end or budget < 0:
            break
    if finish != end or budget < 0:
        return None
    tail = line[start:]
    try:
        entry = loads_json(tail, finite=False, lone_surrogates=True)
    except ValueError:
        return None
    # An entry's keys (not a content block's: a tool call has an id, but no parent).
    if not isinstance(entry, dict) or not {"id", "parentId"} <= entry.keys():
        return None
    if _NOT_UTF8.search(tail):
        return None
    head = line[:start]
    try:
        whole = loads_json(head, finite=False, lone_surrogates=True)
    except ValueError as error:
        return entry if _torn(head, error) else None
    return entry if isinstance(whole, dict) else None


def json_rows(
    lines: Lines, source: str, code: str, notes: list[str], torn: list[int] | None = None
) -> Rows:
    """(line number, object) for each non-blank line, as an import and a folder store read
    them.

    A last line with no line break after it that is the start of a JSON text cut off
    (``cut_off_json``) is a write torn by a crash: it is skipped, ``notes`` says so and
    ``torn`` gets its number. Any other
    line that does not parse is damage and raises SessionError(``code``), naming the file and
    line, once the rest has been read (a file that cannot be read at all says so first).
    """
    held: tuple[int, ValueError] | None = None  # a line that did not parse: torn, if last
    replaced = False  # a lone surrogate became U+FFFD (said once)
    for number, line, ended in lines:
        if not line.strip():
            continue
        if held is not None:
            for _ in lines:
                pass
            raise SessionError(code, f"{source}:{held[0]}: line is not valid JSON ({held[1]})")
        try:
            # Numbers too large for a float become null, as pi's JSON.parse and stringify do.
            data = loads_json(line, finite=False, lone_surrogates=True)
        except ValueError as error:
            if not ended and _torn(line, error):
                held = (number, error)
                continue
            lost = continued_tear(line)
            if lost is None:
                for _ in lines:
                    pass
                raise SessionError(
                    code, f"{source}:{number}: line is not valid JSON ({error})"
                ) from None
            message = (
                f"{source}:{number}: skipped a line that a crash cut off and a later write"
                f" continued, as pi skips it: the entry written after the cut"
                f" ({clip_long(str(lost['id']), 100)!r}) is lost with it"
            )
            log.info(message)
            notes.append(message)
            continue
        if not isinstance(data, dict):
            for _ in lines:
                pass
            raise SessionError(code, f"{source}:{number}: line is not a JSON object")
        if SURROGATE_ESCAPE.search(line) and (lone := lone_surrogate(data)) is not None:
            # Half a UTF-16 pair (a text cut inside an emoji): pi's JavaScript holds it, but no
            # UTF-8 can, so it becomes U+FFFD, as in a run; said once a file.
            data = utf8_only(data)
            if not replaced:
                replaced = True
                notes.append(
                    f"{source}:{number}: the unpaired surrogate escape \\u{ord(lone):04x} (half"
                    " a UTF-16 pair, which no UTF-8 text holds) became U+FFFD, here and in any"
                    " later line"
                )
        yield number, data
    if held is not None:
        message = (
            f"{source}:{held[0]}: skipped the last line, cut off without its line break (a "
            f"write torn by a crash; {held[1]})"
        )
        log.info(message)
        notes.append(message)
        if torn is not None:
            torn.append(held[0])


# --- the stream -------------------------------------------------------------------------------

# Problems found while reading, in the order a whole-file reader reports them. A file's JSON
# comes first (``json_rows`` raises that itself), then the header, then the first entry that
# does not parse, then (known only at the end, see TreeCheck) the first duplicate id, the first
# parent that does not exist and the first cycle.
_ENTRY = 1


class SessionStream:
    """A pi session file (any version) as its checked version-3 header, then its entries.

    The header is read at once. Iterating yields each entry migrated, parsed and checked; any
    problem raises SessionError(``code``) naming the file and line, at the latest after the
    last entry: what a consumer was given counts only once the iteration has ended without
    an error. Problems are reported as a reader of the whole file reports them (the first of
    the most basic kind): after one is found, the rest of the file is still read for worse.

    What is kept in memory does not grow with the file: each entry's id, line and parent go to
    a :class:`TreeCheck` (a temporary database) for the checks that need every entry (unique
    ids, parents, cycles), made once the last entry was read. Version 1 files, whose entries
    get ids by position, also keep those ids in memory.
    """

    def __init__(
        self,
        rows: Rows,
        source: str,
        code: str = "invalid_import",
        new_id: NewId = new_entry_id,
        notes: list[str] | None = None,
    ) -> None:
        self.source = source
        # What was read but not kept (a torn last line), for the importer to pass on.
        self.notes: list[str] = notes if notes is not None else []
        self.code = code
        self._rows = rows
        self._new_id = new_id
        first = next(rows, None)
        if first is None:
            if self.notes:  # its one line torn (a crash, or a write under way): not empty
                raise SessionError(
                    code, f"{self.notes[-1]}; nothing else is in the file: no session header"
                )
            raise SessionError(code, f"{source}: empty file, no session header")
        line, row = first
        if row.get("type") != "session":
            self._fail(f"{source}:{line}: first line is not a session header")
        found = row.get("version", 1)
        self._migrating = _version_to_migrate(row)
        self.migrated_from = (
            self._migrating
            if self._migrating is not None
            else found
            if isinstance(found, int)
            else CURRENT_SESSION_VERSION
        )
        if self._migrating is not None:
            _migrate_v2_row(row)
        elif not isinstance(found, int) or isinstance(found, bool):
            # 3.0, "3", or not a number at all: pi migrates none of them, as a current file.
            row["version"] = CURRENT_SESSION_VERSION
        try:
            self.header = parse_header(row, f"{source}:{line}")
        except SessionError as error:
            self._fail(error.message)
        if code == "invalid_import" and (problem := long_time(self.header.timestamp)):
            self._fail(f"{source}:{line}: {problem}")
        self.leaf_id: str | None = None  # known once the entries are read
        # Set by an importer that takes a copy when the header's id is taken: a store that
        # finds it taken as it inserts the session (another process imported the same file
        # since the id was found free) gives the copy a new id there (``retake_id``).
        self.copy_if_taken = False
        self.count = 0
        self._tree = TreeCheck()
        self._v1_ids: set[str] = set()  # version 1 only: the ids given so far, in order
        self._v1_order: list[str] = []
        self._problem: tuple[int, str] | None = None  # (rank, message)
        self._last: tuple[int, SessionEntry] | None = None  # the last entry and its line
        self._previous: str | None = None  # v1: the parent of the next entry
        self._entries = self._read()

    def retake_id(self, taken: SessionError) -> SessionHeader:
        """The header under a new id, when its id turned out to be taken (``taken``, a
        conflict) and a copy was asked for; else ``taken`` is raised."""
        if taken.code != "conflict" or not self.copy_if_taken:
            raise taken
        self.header = self.header.model_copy(update={"id": new_session_id()})
        return self.header

    def _fail(self, message: str) -> NoReturn:
        for _ in self._rows:
            pass
        raise SessionError(self.code, message)

    def _note(self, rank: int, message: str) -> None:
        if self._problem is None or rank < self._problem[0]:
            self._problem = (rank, message)

    def __iter__(self) -> Iterator[SessionEntry]:
        """The entries not read yet (a stream is read once: every iteration goes on from
        where the last one stopped)."""
        return self._entries

    def drain(self) -> None:
        """Read the rest, raising as iterating does: for refusals that a problem in the file
        must be reported before (a conflict, a count too large to store)."""
        for _ in self._entries:
            pass

    def _read(self) -> Iterator[SessionEntry]:
        for line, row in self._rows:
            if self._problem is not None and self._problem[0] <= _ENTRY:
                continue  # only the JSON of the rest can still matter
            entry = self._parse(line, row)
            if entry is None or self._problem is not None:
                continue
            self._tree.add(line, entry.id, entry.parent_id)
            self.count += 1
            self.leaf_id = entry.target_id if isinstance(entry, LeafEntry) else entry.id
            self._last = (line, entry)
            yield entry
        self._finish()

    def _parse(self, line: int, row: dict[str, Any]) -> SessionEntry | None:
        if self._migrating is not None:
            if self._migrating < 2:
                position = len(self._v1_order) + 1  # this row's index, the header at 0

                def resolve(index: int) -> str | None:
                    # A later row has no id yet. (pi takes the id a v1 row should not have,
                    # which the migration then replaces: an id naming no entry, which builds
                    # the same context as none. Reading ahead is what streaming cannot do.)
                    if index == position:
                        return str(row["id"])
                    return self._v1_order[index - 1] if 1 <= index < position else None

                self._previous = _migrate_v1_row(
                    row, self._previous, self._new_id, self._v1_ids.__contains__, resolve
                )
                if row.get("type") != "session":
                    self._v1_ids.add(str(row["id"]))
                    self._v1_order.append(str(row["id"]))
            _migrate_v2_row(row)
        where = f"{self.source}:{line}"
        try:
            entry = parse_entry(row, where)
        except SessionError as error:
            self._note(_ENTRY, error.message)
            return None
        # An import only: a file the JSONL backend keeps (pi's own folder) is read as it is.
        importing = self.code == "invalid_import"
        for name, value in (("id", entry.id), ("parentId", entry.parent_id)):
            if importing and value is not None and len(value) > ENTRY_ID_CHARS:
                self._note(
                    _ENTRY,
                    f"{where}: {name} of {len(value):,} characters, more than the"
                    f" {ENTRY_ID_CHARS:,} an entry id may have",
                )
                return None
        if importing and (problem := long_time(entry.timestamp)) is not None:
            self._note(_ENTRY, f"{where}: {problem}")
            return None
        return entry

    def _finish(self) -> None:
        try:
            if self._problem is not None:
                raise SessionError(self.code, self._problem[1])
            problem = self._tree.first_problem()
            orphans, count = self._tree.missing_parents, self._tree.missing_count
            if problem is None and self._last is not None:
                self._check_leaf(*self._last)
        finally:
            self._tree.close()
        if count:
            self.notes.append(_missing_parents_note(self.source, orphans, count))
        if problem is None:
            return
        line, kind, entry_id, other = problem
        where = f"{self.source}:{line}"
        if kind == "duplicate":
            message = f"{where}: duplicate entry id {entry_id} (also {self.source}:{other})"
        else:
            message = f"{where}: parentId chain of {entry_id} has a cycle"
        raise SessionError(self.code, message)

    def _check_leaf(self, line: int, last: SessionEntry) -> None:
        """A final leaf line whose target is no entry leaves the leaf where pi resumes the
        file (``moved_leaf``), saying so."""
        if not isinstance(last, LeafEntry) or self.leaf_id is None:
            return
        if self._tree.holds(self.leaf_id):
            return
        self.leaf_id = moved_leaf(last, self._tree.holds)
        where = "before the first entry" if self.leaf_id is None else f"at {self.leaf_id}"
        self.notes.append(
            f"{self.source}:{line}: leaf targetId {last.target_id} points to no entry: the"
            f" session resumes {where} (as pi shows it)"
        )


def long_time(timestamp: str) -> str | None:
    """What is wrong with an imported ``timestamp`` longer than ``TIME_CHARS``; None if not."""
    if len(timestamp) <= TIME_CHARS:
        return None
    return (
        f"timestamp of {len(timestamp):,} characters, more than the {TIME_CHARS:,} a time may"
        " have (pi writes ISO times such as 2026-01-15T08:30:00.000Z)"
    )


def _missing_parents_note(source: str, named: list[tuple[int, str]], count: int) -> str:
    """What an import says of the ``count`` entries whose parent is not in the file, the
    first of them ``named`` (line, parentId): how many, where, and what became of them."""
    shown = ", ".join(f"line {line}: {clip_long(parent, 100)!r}" for line, parent in named)
    more = f" and {count - len(named):,} more" if count > len(named) else ""
    which = "1 entry's parentId points" if count == 1 else f"{count:,} entries' parentIds point"
    kept = "it is kept as a root" if count == 1 else "each is kept as a root"
    return (
        f"{source}: {which} to no entry in the file ({shown}{more}): {kept}, as pi shows it"
        " (the context of a branch through it starts there)"
    )


def pi_repeats_skipped(rows: Rows) -> Rows:
    """The rows without pi's repeats, read once as pi reads them: pi (0.73) continuing a file
    that has no assistant message yet (one we created, named, or gave only a prompt) writes
    the header and every entry again, in order, before its own lines. Only that is skipped:
    the header again, then the ids of the file so far in their order; anything else goes on
    to the parser (a repeated id out of that order is refused there). Once an assistant
    message has been read pi repeats nothing more, so the ids are no longer kept."""
    header: dict[str, Any] | None = None
    order: list[str] | None = []  # the entry ids in file order, until an assistant message
    replaying = -1  # while pi's repeat goes on: the index in ``order`` it has reached
    for number, row in rows:
        if header is None:
            header = row
            yield number, row
            continue
        if order is None:
            yield number, row
            continue
        if row.get("type") == "session" and row == header:
            replaying = 0
            continue
        if replaying >= 0:
            if replaying < len(order) and row.get("id") == order[replaying]:
                replaying += 1
                continue
            replaying = -1
        entry_id = row.get("id")
        if isinstance(entry_id, str):
            order.append(entry_id)
        message = row.get("message")
        if row.get("type") == "message" and isinstance(message, dict):
            if message.get("role") == "assistant":
                order = None
        yield number, row


@contextmanager
def open_session_stream(
    source: str | Path, new_id: NewId = new_entry_id
) -> Iterator[SessionStream]:
    """A pi session file, or its text, as a :class:`SessionStream` (errors:
    SessionError("invalid_import")). A string is JSONL text unless it is one non-blank line
    that does not start with ``{``; a file is read one line at a time."""
    code = "invalid_import"
    if isinstance(source, str):
        one_line = bool(source.strip()) and "\n" not in source.strip()
        if not one_line or is_jsonl_text(source):
            notes: list[str] = []
            rows = json_rows(_text_lines(source), "<jsonl>", code, notes)
            yield SessionStream(pi_repeats_skipped(rows), "<jsonl>", code, new_id, notes)
            return
    path = Path(source)
    try:
        handle = path.open("rb")
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise SessionError(code, f"cannot read {path}: {error}") from None
    with handle:
        name = str(path)
        notes = []
        rows = json_rows(file_lines(handle, name), name, code, notes)
        yield SessionStream(pi_repeats_skipped(rows), name, code, new_id, notes)


def parse_session_text(
    text: str, source: str = "<session>", new_id: NewId = new_entry_id
) -> ParsedSession:
    """A pi session file (any version) as a checked version-3 header, entries and leaf.

    Every problem raises SessionError("invalid_import") naming the file and line: no header,
    an entry that does not parse, duplicate ids, a parent that does not exist, a cycle.
    """
    code = "invalid_import"
    notes: list[str] = []
    rows = pi_repeats_skipped(json_rows(_text_lines(text), source, code, notes))
    return _collect(SessionStream(rows, source, code, new_id, notes))


def parse_rows(
    numbered: Iterable[tuple[int, dict[str, Any]]],
    source: str,
    code: str,
    new_id: NewId = new_entry_id,
    notes: list[str] | None = None,
) -> ParsedSession:
    """Migrate, parse and check (line number, object) rows, header first; problems raise
    SessionError(``code``) naming the file and line (``notes``: what reading the rows
    skipped, which a file with no header is said by)."""
    return _collect(SessionStream(iter(numbered), source, code, new_id, notes))


def _collect(stream: SessionStream) -> ParsedSession:
    entries = list(stream)
    return ParsedSession(stream.header, entries, stream.leaf_id, stream.migrated_from)


def export_lines(
    header: SessionHeader, entries: Iterable[SessionEntry], leaf_id: str | None
) -> list[str]:
    """Version-3 JSONL lines; a final leaf move is added only when the log would not
    otherwise resume on ``leaf_id``."""
    count, load = entries_loader(header, list(entries), leaf_id)
    return load(0, count)


def entries_loader(
    header: SessionHeader, entries: Sequence[SessionEntry], leaf_id: str | None
) -> tuple[int, ExportLoader]:
    """``export_lines`` of ``entries``, a range at a time: its line count, and how to write
    the lines of a range only (a page of a session held in memory cost the whole session)."""
    move = leaf_after(list(entries[-1:])) != leaf_id
    count = 1 + len(entries) + move

    def load(start: int, end: int) -> list[str]:
        if start >= end:
            return []
        lines = [entry_to_json(header)] if start == 0 else []
        lines += map(file_json, entries[max(start, 1) - 1 : min(end, count - move) - 1])
        if move and end >= count:
            taken = {entry.id for entry in entries}
            lines.append(_leaf_move(leaf_id, taken.__contains__))
        return lines

    return count, load


def _leaf_move(leaf_id: str | None, taken: Callable[[str], bool]) -> str:
    """The last line of a file whose log would not resume on ``leaf_id``: a move to it."""
    move = LeafEntry(
        id=new_entry_id(taken), parent_id=leaf_id, timestamp=iso_now(), target_id=leaf_id
    )
    return file_json(move)


def export_text(header: SessionHeader, entries: Iterable[SessionEntry], leaf_id: str | None) -> str:
    return "".join(line + "\n" for line in export_lines(header, entries, leaf_id))


# Lines of an exported file read at once (about 1 MB of long messages).
EXPORT_CHUNK_LINES = 1000
# Lines ``start .. end - 1`` of an exported file, without their newlines.
ExportLoader = Callable[[int, int], list[str]]


def export_loader(storage: SessionStorage) -> tuple[int, ExportLoader]:
    """The session's version-3 file as ``export_lines`` makes it: its line count, and how to
    load a range of its lines. A storage that keeps each entry's JSON (SQLite, PostgreSQL)
    serves the lines as stored, a range per read, parsing only the last entry; any other
    parses every entry."""
    pages = stored_pages(storage)
    if pages is None:
        return entries_loader(storage.get_metadata(), storage.get_entries(), storage.get_leaf_id())
    header, total, extra = _stored_ends(pages)

    def load(start: int, end: int) -> list[str]:
        lines = [header] if start == 0 else []
        lines += map(file_line, pages.stored_range(max(start, 1) - 1, min(end, total + 1) - 1))
        if end > total + 1:
            lines += extra
        return lines

    return 1 + total + len(extra), load


def _stored_ends(pages: StoredPages) -> tuple[str, int, list[str]]:
    """What an exported file holds besides the stored entries: its header line, how many
    entries it holds, and the leaf move it ends with if the log would not resume on the leaf
    (as ``export_lines``)."""
    header = entry_to_json(pages.get_metadata())
    # The count and the leaf of one moment: with the leaf read before an append the count
    # includes, the file would end moving the leaf back below the newest entry.
    total, leaf_id = pages.log_end()
    tail = pages.stored_range(total - 1, total) if total else []
    last = [parse_entry(json.loads(tail[0]))] if tail else []
    if leaf_after(last) == leaf_id:
        return header, total, []
    return header, total, [_leaf_move(leaf_id, lambda id_: bool(pages.stored_json([id_])))]


def export_chunks(storage: SessionStorage, lines: int = EXPORT_CHUNK_LINES) -> Iterator[str]:
    """The session's version-3 file as text, about ``lines`` lines at a time: a file of any
    size written out holding one piece of it in memory, not the whole."""
    lines = max(1, lines)
    pages = stored_pages(storage)
    if pages is None:
        count, load = export_loader(storage)
        for start in range(0, count, lines):
            yield "".join(line + "\n" for line in load(start, min(count, start + lines)))
        return
    header, total, extra = _stored_ends(pages)
    yield header + "\n"
    for part in pages.stored_log(total, lines):
        yield "".join(file_line(line) + "\n" for line in part)
    if extra:
        yield extra[0] + "\n"
