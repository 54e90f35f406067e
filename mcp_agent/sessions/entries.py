"""Session entries and the session header, in pi's session format version 3.

Every entry has ``type``, ``id`` (8 hex chars), ``parentId`` and an ISO ``timestamp``; the rest
depends on the type. An entry whose type we do not know parses as :class:`UnknownEntry`, which
keeps every field, so a file written by a newer program round-trips unchanged.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import ValidationError

from mcp_agent.messages import (
    AgentMessage,
    BashExecutionMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    Usage,
    UserContent,
    content_text,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.wire import (
    FROM_FILE,
    NAN_TIME,
    UNREAD_STAMP,
    WireModel,
    describe_validation_error,
)

CURRENT_SESSION_VERSION = 3


# What this program writes: a session's name and a label are one line of a listing or a tree
# (pi sets no bound, and a file from pi keeps whatever it has), a cwd is a path (PATH_MAX).
NAME_CHARS = 1_000
CWD_CHARS = 4_096
# An entry id (pi's are 8 characters): in every answer that names the entry, so a file's
# longer ones are refused on import rather than shown (an id cannot be cut).
ENTRY_ID_CHARS = 1_000
# A timestamp in an imported pi file (pi writes ISO times, 24 characters): it is in every
# answer that names its entry or session, and one of a megabyte made each a megabyte.
TIME_CHARS = 100
# A session's metadata (the caller's own JSON object, kept in the header) is read with every
# open of the session and shown whole in its resource: bounded, as its compact JSON text.
METADATA_CHARS = 64 * 1024


def check_length(value: str | None, what: str, most: int) -> None:
    """A SessionError when ``value`` is longer than ``most`` characters (nothing is written)."""
    if value is not None and len(value) > most:
        raise SessionError(
            "invalid_argument",
            f"{what} has {len(value):,} characters; at most {most:,} are allowed",
        )


def json_chars(value: Any) -> int:
    """The length of ``value`` as compact JSON text."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def check_metadata(metadata: Mapping[str, Any] | None) -> None:
    """A SessionError when ``metadata`` is longer than ``METADATA_CHARS`` as JSON text."""
    size = json_chars(metadata)
    if size > METADATA_CHARS:
        raise SessionError(
            "invalid_argument",
            f"metadata has {size:,} characters as JSON; at most {METADATA_CHARS:,} are allowed",
        )


def clip_long(text: str, most: int, whole: str = "") -> str:
    """``text``, or when longer than ``most`` characters its start and a marker saying how
    long it is (a value stored before the bound, or imported from a pi file) and, given
    ``whole``, where it is whole."""
    if len(text) <= most:
        return text
    where = f"; {whole}" if whole else ""
    return f"{text[:most]}… [cut: {len(text):,} characters in all{where}]"


def iso_now() -> str:
    """The current time as pi writes it: ``2026-01-15T08:30:00.000Z``."""
    second, micros = _now()
    return f"{second}.{micros // 1000:03d}Z"


# The second last formatted, with its text: every append formats the time twice (its entry's
# and its row's ``modified``), nearly always within the same second, and formatting it afresh
# (datetime's strftime, isoformat) cost about 10 µs each time, a tenth of an append's Python.
_formatted_second: tuple[int, str] = (-1, "")
# The clock those times are read from (a test sets it ahead, as another machine's).
wall_clock_ns = time.time_ns


def _now() -> tuple[str, int]:
    """Now in UTC: its second as text (``2026-01-15T08:30:00``) and the microseconds past it."""
    global _formatted_second
    second, micros = divmod(wall_clock_ns() // 1000, 1_000_000)
    formatted = _formatted_second  # one read: another thread may replace it meanwhile
    if formatted[0] != second:
        formatted = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _formatted_second = formatted
    return formatted[1], micros


def iso_time(epoch_seconds: float) -> str:
    """A time in seconds since the epoch as pi writes times: ``2026-01-15T08:30:00.000Z``."""
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Times shown lately, kept: a listing shows two of each session it lists, and the same
# sessions' again at the next listing (a session's creation time never changes).
SHOWN_TIMES = 4096


@functools.lru_cache(maxsize=SHOWN_TIMES)
def shown_time(timestamp: str) -> str:
    """A stored time as every answer and ``--json`` gives times, pi's form with milliseconds
    (``2026-01-15T08:30:00.123Z``): a listing's microseconds (``sortable_time``, which orders
    rows) are cut. Text that is no time is given as it is."""
    moment = _utc(timestamp)
    if moment is None:
        return timestamp
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sortable_time(timestamp: str) -> str:
    """An ISO timestamp with microseconds, so that times of both precisions sort as text."""
    moment = _utc(timestamp)
    if moment is None:
        return timestamp
    # isoformat, not strftime: glibc's %Y writes year 999 as "999", which neither sorts
    # among four-digit years nor reads back as a time.
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _utc(timestamp: str) -> datetime | None:
    """An ISO timestamp as a time in UTC; None if it is none. One without an offset is read
    as pi's JavaScript reads it (``new Date``): a date alone in UTC, a date and time in the
    machine's zone."""
    try:
        moment = datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        if len(timestamp) <= _DATE_CHARS:
            return moment.replace(tzinfo=UTC)
        try:
            early = moment.astimezone(UTC)  # a naive time is the machine's local time
            if early.astimezone().replace(tzinfo=None) != moment:
                # Not a local time: in a gap the clocks skipped (02:30 as they go forward),
                # which JavaScript reads with the offset before it (fold=1 here; Python's
                # fold=0 took the one after, an hour earlier). In a fold both read the first.
                return moment.replace(fold=1).astimezone(UTC)
            return early
        except (OverflowError, OSError, ValueError):  # out of the platform's range
            return None
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # past datetime's years in UTC (year 1 east of it), as above
        return None


def utc_time(timestamp: str) -> datetime | None:
    """``timestamp`` as pi reads it, in UTC (see ``_utc``); None where pi's is NaN, or past
    this platform's range."""
    return _utc(timestamp)


# The longest ISO date without a time (``2026-01-15``), which JavaScript reads in UTC.
_DATE_CHARS = 10


def write_time() -> str:
    """Now, with microseconds, strictly increasing within this process: a session's
    ``modified`` time, which orders listings."""
    global _last_write_time
    with _clock_lock:
        second, micros = _now()
        text = f"{second}.{micros:06d}Z"
        if text <= _last_write_time:
            last = datetime.strptime(_last_write_time, "%Y-%m-%dT%H:%M:%S.%fZ")
            text = (last + timedelta(microseconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        _last_write_time = text
        return text


def iso_to_ms(timestamp: str) -> int:
    """Unix milliseconds of an ISO timestamp (pi: ``new Date(ts).getTime()``); where that is
    NaN (no time, or text that is none) ``NAN_TIME``, 0 written null as pi writes NaN."""
    moment = _utc(timestamp)
    return NAN_TIME if moment is None else round(moment.timestamp() * 1000)


def js_time_ms(timestamp: str) -> float:
    """Unix milliseconds of an ISO timestamp as pi's ``new Date(ts).getTime()``, NaN where
    that is NaN (text that is no time)."""
    moment = _utc(timestamp)
    if moment is None:
        return math.nan
    return float((moment - _EPOCH) // timedelta(milliseconds=1))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def new_entry_id(taken: Callable[[str], bool] | None = None) -> str:
    """8 lowercase hex chars, not ``taken`` (pi: ``randomUUID().slice(0, 8)``)."""
    for _ in range(100):
        candidate = secrets.token_hex(4)
        if taken is None or not taken(candidate):
            return candidate
    # 100 collisions in a row means the id space is nearly full; pi falls back the same way.
    return str(uuid.uuid4())


_clock_lock = threading.Lock()
_last_uuid_time = (0, 0)  # (millis, 12-bit counter)
_last_write_time = ""


_SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_session_id(text: str) -> bool:
    """A UUID in its canonical lower-case form, as pi and this project make session ids."""
    return _SESSION_ID.fullmatch(text) is not None


def new_session_id() -> str:
    """A UUID version 7 (time-ordered), as pi uses for session ids. Within this process ids
    also sort in creation order (a counter fills the sub-millisecond bits)."""
    global _last_uuid_time
    with _clock_lock:
        millis = time.time_ns() // 1_000_000
        last_millis, counter = _last_uuid_time
        if millis <= last_millis:
            millis, counter = (
                (last_millis, counter + 1) if counter < 0xFFF else (last_millis + 1, 0)
            )
        else:
            counter = secrets.randbits(10)  # random start, room left to count up
        _last_uuid_time = (millis, counter)
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= counter << 64
    value |= 0b10 << 62  # RFC 4122 variant
    value |= secrets.randbits(62)
    return str(uuid.UUID(int=value))


# --- header -----------------------------------------------------------------------------------


class SessionHeader(WireModel):
    """The first line of a session file: ``{"type":"session","version":3,...}``."""

    type: Literal["session"] = "session"
    version: int | None = None
    id: str
    # pi reads a header its file gives no time (its listing's created date then invalid):
    # so do we, writing it back without one.
    timestamp: str = UNREAD_STAMP
    cwd: str = ""
    parent_session: str | None = None
    metadata: dict[str, Any] | None = None


def new_header(
    session_id: str | None = None,
    cwd: str | None = None,
    parent_session: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> SessionHeader:
    header = SessionHeader(
        version=CURRENT_SESSION_VERSION,
        id=session_id or new_session_id(),
        timestamp=iso_now(),
        cwd=os.getcwd() if cwd is None else cwd,
    )
    # Optional fields are set only when given, so that they are left out of the JSON otherwise.
    if parent_session is not None:
        header.parent_session = parent_session
    if metadata is not None:
        header.metadata = dict(metadata)
    return header


def parse_header(data: Any, where: str = "header") -> SessionHeader:
    if not isinstance(data, Mapping) or data.get("type") != "session":
        raise SessionError("invalid_entry", f"{where}: expected a session header (type 'session')")
    try:
        return SessionHeader.model_validate(data)
    except ValidationError as error:
        detail = describe_validation_error(error, "", data)
        raise SessionError("invalid_entry", f"{where}: {detail}") from None


# --- entries ----------------------------------------------------------------------------------


class SessionEntry(WireModel):
    """The fields every entry has (seed: SessionTreeEntryBase)."""

    type: str
    id: str
    parent_id: str | None = None
    # pi reads an entry its file gives no time: so do we, and write it back without one (an
    # entry made here always gets its time).
    timestamp: str = UNREAD_STAMP

    def model_post_init(self, context: Any, /) -> None:
        # parentId is written even when null: pi's readers expect the key on every entry.
        self.__pydantic_fields_set__.add("parent_id")


class MessageEntry(SessionEntry):
    type: Literal["message"] = "message"
    message: AgentMessage


class ThinkingLevelChangeEntry(SessionEntry):
    type: Literal["thinking_level_change"] = "thinking_level_change"
    thinking_level: str


class ModelChangeEntry(SessionEntry):
    type: Literal["model_change"] = "model_change"
    provider: str
    model_id: str


class ActiveToolsChangeEntry(SessionEntry):
    type: Literal["active_tools_change"] = "active_tools_change"
    active_tool_names: list[str]


class CompactionEntry(SessionEntry):
    """Everything before ``first_kept_entry_id`` (or the whole path, given a retained tail) is
    replaced in the context by ``summary``."""

    type: Literal["compaction"] = "compaction"
    summary: str
    first_kept_entry_id: str | None = None
    tokens_before: int = 0
    details: Any = None
    from_hook: bool | None = None
    usage: Usage | None = None
    retained_tail: list[AgentMessage] | None = None


class BranchSummaryEntry(SessionEntry):
    type: Literal["branch_summary"] = "branch_summary"
    from_id: str
    summary: str
    details: Any = None
    from_hook: bool | None = None
    usage: Usage | None = None


class CustomEntry(SessionEntry):
    """Application data; never sent to the model unless a projector turns it into messages."""

    type: Literal["custom"] = "custom"
    custom_type: str
    data: Any = None


class CustomMessageEntry(SessionEntry):
    """Sent to the model as a user message (even with ``display`` false)."""

    type: Literal["custom_message"] = "custom_message"
    custom_type: str
    content: str | list[UserContent]
    # pi's extensions may leave it out, and pi then hides the message: missing stays missing.
    display: bool | None = None
    details: Any = None


class LabelEntry(SessionEntry):
    """Sets (or, with no label, clears) the label of ``target_id``."""

    type: Literal["label"] = "label"
    target_id: str
    label: str | None = None


class SessionInfoEntry(SessionEntry):
    type: Literal["session_info"] = "session_info"
    name: str | None = None


# What JavaScript's trim() removes (its WhiteSpace and LineTerminator): Python's strip()
# removes the controls U+001C-U+001F and U+0085 too, and keeps U+FEFF.
JS_SPACE = "\t\n\v\f\r \xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
JS_SPACE += "\u2028\u2029\u202f\u205f\u3000\ufeff"


def session_name(name: str | None) -> str | None:
    """A session's name as pi reads a ``session_info`` entry's (``name?.trim() ||
    undefined``): trimmed as JavaScript trims; an empty one clears the name."""
    return (name or "").strip(JS_SPACE) or None


class LeafEntry(SessionEntry):
    """A move of the current leaf to ``target_id``, persisted so a branch switch survives a
    restart. Its ``parentId`` is the target, so pi (which resumes at the last line) lands on
    the same branch. pi knows no such entry type: a file holds it as a custom entry of ours
    (``file_json``)."""

    type: Literal["leaf"] = "leaf"
    target_id: str | None = None


# Entries of ours pi knows no type for, as a pi file holds them: pi's custom entries (which
# pi keeps, hides in its /tree and leaves out of the context), their one field as the data,
# read back as ours. Our type: (the customType, the field).
OWN_CUSTOM_TYPES = {
    "leaf": ("mcp-agent-sessions.leaf", "targetId"),
    "active_tools_change": ("mcp-agent-sessions.active_tools", "activeToolNames"),
}
LEAF_CUSTOM_TYPE = OWN_CUSTOM_TYPES["leaf"][0]
_OWN_BY_CUSTOM = {custom: (own, name) for own, (custom, name) in OWN_CUSTOM_TYPES.items()}
_OWN_PREFIXES = tuple(f'{{"type":"{own}",' for own in OWN_CUSTOM_TYPES)


class UnknownEntry(SessionEntry):
    """An entry type we do not know: kept field for field, contributes nothing to the context."""


ENTRY_TYPES: dict[str, type[SessionEntry]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        MessageEntry,
        ThinkingLevelChangeEntry,
        ModelChangeEntry,
        ActiveToolsChangeEntry,
        CompactionEntry,
        BranchSummaryEntry,
        CustomEntry,
        CustomMessageEntry,
        LabelEntry,
        SessionInfoEntry,
        LeafEntry,
    )
}


def _own_entry(data: Mapping[str, Any], context: Any) -> SessionEntry | None:
    """A custom entry that is one of ours (``file_json``) as ours; None for any other shape,
    a custom entry like any other."""
    custom = data.get("customType")
    found = _OWN_BY_CUSTOM.get(custom) if isinstance(custom, str) else None
    inner = data.get("data")
    if found is None or not isinstance(inner, Mapping) or set(inner) != {found[1]}:
        return None
    own, name = found
    fields = {key: value for key, value in data.items() if key not in ("customType", "data")}
    try:
        return ENTRY_TYPES[own].model_validate(
            {**fields, "type": own, name: inner[name]}, context=context
        )
    except ValidationError:
        return None


def parse_entry(data: Any, where: str = "entry", made_here: bool = False) -> SessionEntry:
    """One entry from its JSON object; ``where`` names it in errors (e.g. ``file.jsonl:12``).
    Read (from a file, a store) a message without a time keeps none, as pi reads it;
    ``made_here`` (an entry made now from a client's fields) it gets the time it is made."""
    if not isinstance(data, Mapping):
        raise SessionError("invalid_entry", f"{where}: expected a JSON object")
    entry_type = data.get("type")
    if entry_type == "session":
        # pi's repeat of a file (the same header again) is skipped before this: another is not.
        raise SessionError(
            "invalid_entry",
            f"{where}: a session header after the first line (a file holds one session, its"
            " header first)",
        )
    if not isinstance(entry_type, str):
        raise SessionError("invalid_entry", f"{where}: missing or invalid entry type")
    cls = ENTRY_TYPES.get(entry_type, UnknownEntry)
    context = None if made_here else FROM_FILE
    own = _own_entry(data, context) if entry_type == "custom" else None
    if own is not None:
        return own
    try:
        return cls.model_validate(data, context=context)
    except ValidationError as error:
        detail = describe_validation_error(error, "", data)
        raise SessionError("invalid_entry", f"{where}: {entry_type} entry: {detail}") from None


def entry_from_json(text: str, where: str = "entry") -> SessionEntry:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise SessionError("invalid_entry", f"{where}: not JSON ({error})") from None
    return parse_entry(data, where)


def entry_to_json(entry: SessionEntry | SessionHeader) -> str:
    """The entry's one line of JSON (compact, UTF-8 kept as is)."""
    # pydantic's own JSON writer: the same JSON as WireModel.to_json, about a third faster.
    return entry.model_dump_json(by_alias=True)


def file_json(entry: SessionEntry | SessionHeader) -> str:
    """The entry's line in a pi file: ``entry_to_json``, an entry pi knows no type for as
    pi's custom entry (``OWN_CUSTOM_TYPES``)."""
    own = OWN_CUSTOM_TYPES.get(entry.type)
    if own is None or not isinstance(entry, SessionEntry):
        return entry_to_json(entry)
    custom, name = own
    line = json.loads(entry_to_json(entry))
    line.update(type="custom", customType=custom, data={name: line.pop(name)})
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def file_line(stored: str) -> str:
    """A stored entry's JSON (``entry_to_json``'s) as its line in a pi file (``file_json``)."""
    return file_json(entry_from_json(stored)) if stored.startswith(_OWN_PREFIXES) else stored


def entry_text(entry: SessionEntry) -> str:
    """The words in an entry that a person may search for (messages, summaries, names)."""
    if isinstance(entry, MessageEntry):
        message = entry.message
        if isinstance(message, BashExecutionMessage):
            return f"{message.command}\n{message.output}"
        if isinstance(message, BranchSummaryMessage | CompactionSummaryMessage):
            return message.summary
        # Look the field up in the instance dict: pydantic's attribute fallback is slow.
        content = message.__dict__.get("content")
        return content_text(content) if isinstance(content, str | list) else ""
    if isinstance(entry, CustomMessageEntry):
        return content_text(entry.content)
    if isinstance(entry, CompactionEntry | BranchSummaryEntry):
        return entry.summary
    if isinstance(entry, SessionInfoEntry):
        return entry.name or ""
    return ""


def entry_usage(entry: SessionEntry) -> Usage | None:
    """What producing this entry cost: an assistant's usage, a tool result's own usage, or the
    model call behind a compaction or branch summary."""
    if isinstance(entry, MessageEntry):
        # From the instance dict: a message without the field (a user's) sent getattr through
        # pydantic's __getattr__ and its AttributeError, about 10 µs of every such append.
        usage = entry.message.__dict__.get("usage")
        return usage if isinstance(usage, Usage) else None
    if isinstance(entry, CompactionEntry | BranchSummaryEntry):
        return entry.usage
    return None


def is_tree_node(entry: SessionEntry) -> bool:
    """Leaf moves are bookkeeping: they are stored but are not part of the conversation tree."""
    return not isinstance(entry, LeafEntry)
