"""One entry read in pieces (``session_get`` with ``offset``): its JSON text, as its resource
gives it, a run of characters at a time, each piece within what an answer's text holds.

An entry past the answer bound (a tool's output of megabytes) was whole only in a structured
content, a resource or the exported file: a model whose host shows it the text block alone, or
cuts it, could never read it. Read in pieces, each answer says how much is left and the exact
call for the next piece."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from mcp_agent.server.paging import ANSWER_BYTES, json_size
from mcp_agent.server.schemas import EntryPiece
from mcp_agent.sessions import Session
from mcp_agent.sessions.kept import Kept
from mcp_agent.sessions.storage import stored_pages

# What a piece's text may take in the answer, as a JSON string (its escapes counted): a page's
# room, so that the answer with the session's summary fits the text block whole.
PIECE_BYTES = ANSWER_BYTES
# The most characters a piece may be asked for: as many as the room holds at one byte each.
MAX_PIECE_CHARS = PIECE_BYTES

# The most an offset may be: past any entry's length (SQLite holds a value of a billion bytes at
# most, and a file's line is read into memory whole).
MAX_OFFSET = 4_000_000_000

# The texts of the entries read in pieces last, so that reading one piece after another does
# not read (and, from a file, parse) the whole entry once a piece. An entry never changes.
PIECE_TEXT_CHARS = 32_000_000
kept_texts: Kept[str, str] = Kept(PIECE_TEXT_CHARS, PIECE_TEXT_CHARS, 2, len)


def piece_call(session_id: str, entry_id: str, offset: int) -> str:
    """The tool call that answers with the piece of an entry from ``offset`` on."""
    return f"session_get with session_id {session_id!r}, entry_id {entry_id!r} and offset {offset}"


def entry_json(session: Session, entry_id: str) -> str:
    """The entry's JSON text (compact, as stored: what its resource gives), or a ToolError."""

    def read() -> str:
        storage = stored_pages(session.storage)
        if storage is not None:
            found = storage.stored_json([entry_id]).get(entry_id)
            if found is not None:
                return found
        else:
            entry = session.get_entry(entry_id)
            if entry is not None:  # as its resource gives it (``session_reads.entry_text``)
                return json.dumps(entry.to_json_dict(), ensure_ascii=False, separators=(",", ":"))
        # As an entry not found by the other reads of session_get is said: with what to do.
        raise ToolError(
            f"not_found: entry {entry_id!r} not found in session {session.id} (list entries"
            " with session_get)"
        )

    return kept_texts.get_or_work(session.storage, entry_id, read)


def fitting(text: str, offset: int, most: int) -> str:
    """The longest run of ``text`` from ``offset``, at most ``most`` characters, whose JSON
    string takes at most ``PIECE_BYTES`` (one character at least)."""
    count = min(most, len(text) - offset)
    while count > 1:
        size = json_size(text[offset : offset + count])
        if size <= PIECE_BYTES:
            break
        # Shrunk in proportion (quotes and escapes spread evenly), then by one at least.
        count = max(1, min(count - 1, count * PIECE_BYTES // size))
    return text[offset : offset + count]


def entry_piece(session: Session, entry_id: str, offset: int, length: int | None) -> EntryPiece:
    """The piece of the entry ``entry_id`` from the character ``offset`` on: ``length``
    characters at most (None: as many as fit), or a ToolError saying what offsets it has."""
    text = entry_json(session, entry_id)
    if offset >= len(text):
        raise ToolError(
            f"offset {offset:,} is past the end of entry {entry_id!r}, whose JSON text has"
            f" {len(text):,} characters: give 0 to {len(text) - 1:,} (0: its start)"
        )
    piece = fitting(text, offset, length or MAX_PIECE_CHARS)
    end = offset + len(piece)
    left = len(text) - end
    return EntryPiece(
        entry_id=entry_id,
        offset=offset,
        chars=len(piece),
        total_chars=len(text),
        left=left,
        next_offset=end if left else None,
        next=piece_call(session.id, entry_id, end) if left else None,
        text=piece,
    )


def check_piece_arguments(**arguments: Any) -> None:
    """A ToolError naming the ``arguments`` given (not None): a read in pieces takes none."""
    given = [name for name, value in arguments.items() if value is not None]
    if given:
        raise ToolError(
            f"offset reads one entry's text in pieces (entry_id and offset, length if you"
            f" like): leave out {' and '.join(given)}"
        )
