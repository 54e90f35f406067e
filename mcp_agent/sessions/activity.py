"""When a session file was last active, as pi orders its session listings (its
``getSessionModifiedDate``): the time of its last message of the user or the assistant (the
message's own time, else its entry's), else the header's time, else the file's time of change.

The file is read from its end, a block at a time, only as far back as its last such message:
a listing orders a folder's files before it reads any whole. pi takes the newest of all the
messages' times, which is the last one's wherever times grow through the file, as both pi and
we write them.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp_agent.sessions.entries import sortable_time

# Bytes read from the end of a file at a time.
BLOCK = 1 << 16
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def last_activity(path: Path, changed: str) -> str:
    """The file's time of last activity (``changed``: its time of change, the last resort),
    with microseconds, as a session's ``modified`` time is written."""
    with path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        # The line being read backwards, its parts as read (the last part first): joined once
        # whole, so a line of many blocks is copied once, not once for every block.
        tail: list[bytes] = []
        while end > 0:
            start = max(0, end - BLOCK)
            handle.seek(start)
            parts = handle.read(end - start).split(b"\n")
            end = start
            if len(parts) == 1:
                tail.append(parts[0])
                continue
            tail.append(parts.pop())
            for line in (b"".join(reversed(tail)), *reversed(parts[1:])):
                found = _message_time(line)
                if found is not None:
                    return found
            tail = [parts[0]]
        return _header_time(b"".join(reversed(tail))) or changed


def _json(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:  # a torn or damaged line: pi skips it too
        return None


def _message_time(line: bytes) -> str | None:
    if b'"message"' not in line:
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
        try:
            moment = datetime.fromtimestamp(millis / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            return None
        return moment.strftime(_FORMAT) if millis > 0 else None
    return _iso(entry.get("timestamp"))


def _header_time(line: bytes) -> str | None:
    header = _json(line)
    return _iso(header.get("timestamp")) if isinstance(header, dict) else None


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
