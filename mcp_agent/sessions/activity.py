"""When a session file was last active, as pi orders its session listings (its
``getSessionModifiedDate``): the newest time of all the messages of the user or the assistant
anywhere in the file (each message's own time, else its entry's), else the header's time, else
the file's time of change. The newest, not the last in the file: a message appended with an
earlier time (a branch, a clock set back) leaves the session where its newest message put it.

The file is read forwards, a line at a time; what its whole lines said is kept
(``Activity``), so a file that only grew since (an append) is read on from where the last
reading stopped, and a listing after an append reads only the new lines.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from mcp_agent.sessions.entries import sortable_time

# The last bytes read, kept to tell a file that only grew from one written anew.
MARK = 64
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Activity:
    """What the whole lines of a file said, up to ``scanned`` bytes (ending in ``mark``)."""

    inode: int
    scanned: int
    mark: bytes
    header_read: bool = False
    header: str | None = None  # the header's time, as sortable text
    newest: int = 0  # the newest message's time in microseconds since 1970; 0 if none


def last_activity(
    path: Path, changed: str, previous: Activity | None = None
) -> tuple[str, Activity]:
    """The file's time of last activity (``changed``: its time of change, the last resort),
    with microseconds, as a session's ``modified`` time is written; and what was read, to
    pass as ``previous`` when the file has changed."""
    with path.open("rb") as handle:
        state = _resumable(handle, previous) or Activity(os.fstat(handle.fileno()).st_ino, 0, b"")
        handle.seek(state.scanned)
        scanned = state.scanned
        unended = b""
        for line in handle:
            if not line.endswith(b"\n"):  # a last line with no end: torn, or being written
                unended = line
                break
            scanned += len(line)
            state = _take(state, line)
        state = replace(state, scanned=scanned, mark=_mark(handle, scanned))
    found = _take(state, unended) if unended else state
    if found.newest > 0:
        return (_EPOCH + timedelta(microseconds=found.newest)).strftime(_FORMAT), state
    return found.header or changed, state


def _resumable(handle: IO[bytes], previous: Activity | None) -> Activity | None:
    """``previous`` if it read this very file, which has at most grown since."""
    if previous is None or previous.inode != os.fstat(handle.fileno()).st_ino:
        return None
    return previous if _mark(handle, previous.scanned) == previous.mark else None


def _mark(handle: IO[bytes], end: int) -> bytes:
    start = max(0, end - MARK)
    handle.seek(start)
    return handle.read(end - start)


def _take(state: Activity, line: bytes) -> Activity:
    """``state`` with one more line read: pi's header is its first line that parses."""
    if not state.header_read:
        header = _json(line)
        if header is None:
            return state
        header_time = _iso(header.get("timestamp")) if isinstance(header, dict) else None
        return replace(state, header_read=True, header=header_time)
    moment = _message_time(line)
    if moment is None or moment <= state.newest:
        return state
    return replace(state, newest=moment)


def _json(line: bytes) -> Any:
    if not line.strip():
        return None
    try:
        return json.loads(line)
    except ValueError:  # a torn or damaged line: pi skips it too
        return None


def _message_time(line: bytes) -> int | None:
    """A message line's time in microseconds, if it is a message of the user or the
    assistant. Only lines that name such a role are parsed: tool output, the bulk of a
    file, is passed over unread."""
    if b'"message"' not in line or (b'"user"' not in line and b'"assistant"' not in line):
        return None
    entry = _json(line)
    if not isinstance(entry, dict) or entry.get("type") != "message":
        return None
    message = entry.get("message")
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        return None
    if "content" not in message:
        return None
    millis = message.get("timestamp")
    if isinstance(millis, int | float) and not isinstance(millis, bool):
        if not math.isfinite(millis):  # Infinity, which pi's JSON.parse refuses
            return None
        micros = round(millis * 1000)
        return micros if 0 < micros <= _LATEST else None
    text = _iso(entry.get("timestamp"))
    if text is None:
        return None
    moment = datetime.strptime(text, _FORMAT).replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _iso(timestamp: object) -> str | None:
    """An ISO time as sortable text, or None where it is none."""
    if not isinstance(timestamp, str):
        return None
    text = sortable_time(timestamp)
    try:
        datetime.strptime(text, _FORMAT)
    except ValueError:
        return None
    return text
