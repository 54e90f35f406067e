"""pi session files: reading JSONL lines, migrating versions 1 and 2, writing version 3.

The migrations follow pi's own ``migrateV1ToV2`` and ``migrateV2ToV3``:
- v1 entries have no ids: each gets a fresh 8-hex id and the previous entry as parent (the
  entries form a line); a compaction's ``firstKeptEntryIndex`` (an index into the file's
  entries, header included) becomes ``firstKeptEntryId`` when it names an earlier entry.
- v2 used the message role ``hookMessage`` where v3 says ``custom``.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_agent.sessions.entries import (
    CURRENT_SESSION_VERSION,
    LeafEntry,
    SessionEntry,
    SessionHeader,
    entry_to_json,
    iso_now,
    new_entry_id,
    parse_entry,
    parse_header,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.storage import leaf_after, validate_tree

log = logging.getLogger(__name__)


@dataclass
class ParsedSession:
    header: SessionHeader
    entries: list[SessionEntry]
    leaf_id: str | None
    migrated_from: int  # the file's version before migration


def read_json_lines(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line.

    A last line that does not parse is a write torn by a crash: it is skipped with a warning.
    A bad line anywhere else is corruption and raises, naming the file and line.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as error:
            if index == last:
                message = f"{source}:{index + 1}: skipping a torn last line ({error})"
                warnings.warn(message, stacklevel=3)
                log.warning(message)
                continue
            raise SessionError(
                "corrupt", f"{source}:{index + 1}: line is not valid JSON ({error})"
            ) from None
        if not isinstance(data, dict):
            raise SessionError("corrupt", f"{source}:{index + 1}: line is not a JSON object")
        rows.append((index + 1, data))
    return rows


def migrate_rows(
    rows: list[dict[str, Any]], new_id: Callable[[Callable[[str], bool]], str] = new_entry_id
) -> int:
    """Bring pi JSON objects (header first) to version 3 in place; returns the old version."""
    header = next((row for row in rows if row.get("type") == "session"), None)
    version = header.get("version", 1) if header is not None else 1
    if not isinstance(version, int) or version >= CURRENT_SESSION_VERSION:
        return version if isinstance(version, int) else CURRENT_SESSION_VERSION
    if version < 2:
        _migrate_v1_to_v2(rows, new_id)
    _migrate_v2_to_v3(rows)
    return version


def _migrate_v1_to_v2(
    rows: list[dict[str, Any]], new_id: Callable[[Callable[[str], bool]], str]
) -> None:
    taken: set[str] = set()
    previous: str | None = None
    for row in rows:
        if row.get("type") == "session":
            row["version"] = 2
            continue
        row["id"] = new_id(taken.__contains__)
        taken.add(row["id"])
        row["parentId"] = previous
        previous = row["id"]
        if row.get("type") == "compaction" and "firstKeptEntryIndex" in row:
            index = row.pop("firstKeptEntryIndex")
            # pi indexes the parsed entries with the header at 0; a later entry has no id yet.
            if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(rows):
                target = rows[index]
                if target.get("type") != "session" and "id" in target:
                    row["firstKeptEntryId"] = target["id"]


def _migrate_v2_to_v3(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        if row.get("type") == "session":
            row["version"] = CURRENT_SESSION_VERSION
        elif row.get("type") == "message":
            message = row.get("message")
            if isinstance(message, dict) and message.get("role") == "hookMessage":
                message["role"] = "custom"


def parse_session_text(
    text: str,
    source: str = "<session>",
    new_id: Callable[[Callable[[str], bool]], str] = new_entry_id,
) -> ParsedSession:
    """A pi session file (any version) as a checked version-3 header, entries and leaf.

    Every problem raises SessionError("invalid_import") naming the file and line: no header,
    an entry that does not parse, duplicate ids, a parent that does not exist, a cycle.
    """
    try:
        numbered = read_json_lines(text, source)
    except SessionError as error:
        raise SessionError("invalid_import", error.message) from None
    return parse_rows(numbered, source, "invalid_import", new_id)


def parse_rows(
    numbered: list[tuple[int, dict[str, Any]]],
    source: str,
    code: str,
    new_id: Callable[[Callable[[str], bool]], str] = new_entry_id,
) -> ParsedSession:
    """Migrate, parse and check (line number, object) rows, header first; problems raise
    SessionError(``code``) naming the file and line."""
    if not numbered:
        raise SessionError(code, f"{source}: empty file, no session header")
    first_line, first = numbered[0]
    if first.get("type") != "session":
        raise SessionError(code, f"{source}:{first_line}: first line is not a session header")
    rows = [row for _, row in numbered]
    version = migrate_rows(rows, new_id)
    line_of = [line for line, _ in numbered[1:]]
    try:
        header = parse_header(rows[0], f"{source}:{first_line}")
        entries = [
            parse_entry(row, f"{source}:{line}")
            for line, row in zip(line_of, rows[1:], strict=True)
        ]
        validate_tree(entries, lambda i: f"{source}:{line_of[i]}")
    except SessionError as error:
        raise SessionError(code, error.message) from None
    return ParsedSession(header, entries, leaf_after(entries), version)


def read_session_source(source: str | Path) -> tuple[str, str]:
    """(text, name for messages) from JSONL text or a path to a file. A string is JSONL text
    unless it is one non-blank line that does not start with ``{``."""
    if isinstance(source, str):
        one_line = bool(source.strip()) and "\n" not in source.strip()
        if not one_line or source.lstrip().startswith("{"):
            return source, "<jsonl>"
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte, or not UTF-8
        raise SessionError("invalid_import", f"cannot read {path}: {error}") from None


def export_lines(
    header: SessionHeader, entries: Iterable[SessionEntry], leaf_id: str | None
) -> list[str]:
    """Version-3 JSONL lines; a final ``leaf`` line is added only when the log would not
    otherwise resume on ``leaf_id``."""
    lines = [entry_to_json(header)]
    taken: set[str] = set()
    last: list[SessionEntry] = []
    for entry in entries:
        lines.append(entry_to_json(entry))
        taken.add(entry.id)
        last = [entry]
    if leaf_after(last) != leaf_id:
        move = LeafEntry(
            id=new_entry_id(taken.__contains__),
            parent_id=leaf_id,
            timestamp=iso_now(),
            target_id=leaf_id,
        )
        lines.append(entry_to_json(move))
    return lines


def export_text(header: SessionHeader, entries: Iterable[SessionEntry], leaf_id: str | None) -> str:
    return "".join(line + "\n" for line in export_lines(header, entries, leaf_id))
