"""Where a compaction cuts the branch, what it summarises, and the files it keeps track of."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.compaction.errors import CompactionError
from mcp_agent.compaction.tokens import (
    DEFAULT_KEEP_RECENT_TOKENS,
    context_tokens,
    estimate_messages_tokens,
    estimate_tokens,
)
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
)
from mcp_agent.sessions.context import (
    build_session_context,
    context_start,
    newest_compaction,
    session_entry_to_context_messages,
)
from mcp_agent.sessions.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    SessionEntry,
)

# --- file tracking ----------------------------------------------------------------------------

# Tool names (a downstream server's prefix "<server>__" removed) that read, write or edit the
# file named in their arguments: pi's read / write / edit, and the common MCP filesystem names.
FILE_TOOLS: dict[str, str] = {
    "read": "read",
    "read_file": "read",
    "read_text_file": "read",
    "read_media_file": "read",
    "read_multiple_files": "read",
    "view": "read",
    "write": "write",
    "write_file": "write",
    "create_file": "write",
    "edit": "edit",
    "edit_file": "edit",
    "multi_edit": "edit",
    "str_replace": "edit",
}
PATH_ARGUMENTS = ("path", "file_path", "filePath")


@dataclass
class FileOps:
    read: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    edited: set[str] = field(default_factory=set)

    def add_details(self, details: Any) -> None:
        """Take over the file lists of an earlier compaction or branch summary."""
        if not isinstance(details, Mapping):
            return
        for path in _strings(details.get("readFiles")):
            self.read.add(path)
        for path in _strings(details.get("modifiedFiles")):
            self.edited.add(path)

    def add_message(self, message: BaseMessage) -> None:
        """Record the files an assistant message's tool calls read or change."""
        if not isinstance(message, AssistantMessage):
            return
        for call in message.tool_calls:
            kind = FILE_TOOLS.get(call.name.rpartition("__")[2])
            if kind is None:
                continue
            target = {"read": self.read, "write": self.written, "edit": self.edited}[kind]
            target.update(tool_call_paths(call.arguments))

    def lists(self) -> tuple[list[str], list[str]]:
        """(files only read, files modified), each sorted (pi: computeFileLists)."""
        modified = self.edited | self.written
        return sorted(self.read - modified), sorted(modified)

    def details(self) -> dict[str, list[str]]:
        read_files, modified_files = self.lists()
        return {"readFiles": read_files, "modifiedFiles": modified_files}


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def tool_call_paths(arguments: Mapping[str, Any]) -> list[str]:
    paths = [arguments[k] for k in PATH_ARGUMENTS if isinstance(arguments.get(k), str)]
    paths.extend(_strings(arguments.get("paths")))
    return [p for p in paths if p]


def format_file_operations(read_files: Sequence[str], modified_files: Sequence[str]) -> str:
    sections = []
    if read_files:
        sections.append("<read-files>\n" + "\n".join(read_files) + "\n</read-files>")
    if modified_files:
        sections.append("<modified-files>\n" + "\n".join(modified_files) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(sections) if sections else ""


# --- the cut point ----------------------------------------------------------------------------


def entry_messages(entry: SessionEntry) -> list[BaseMessage]:
    """What an entry adds to a conversation being summarised (compactions and custom entries
    add nothing: an earlier summary is passed separately)."""
    if isinstance(entry, MessageEntry | CustomMessageEntry | BranchSummaryEntry):
        return session_entry_to_context_messages(entry, 0, [entry])
    return []


# The roles of messages a cut may fall on (pi's findValidCutPoints): not a tool result, which
# must follow its call, nor a role pi does not know.
CUT_ROLES = frozenset(
    ("user", "assistant", "bashExecution", "custom", "branchSummary", "compactionSummary")
)


def _is_cut_candidate(entry: SessionEntry) -> bool:
    """pi's valid cut points: a message of ``CUT_ROLES``, a custom message, a branch summary."""
    if isinstance(entry, MessageEntry):
        return entry.message.role in CUT_ROLES
    return isinstance(entry, CustomMessageEntry | BranchSummaryEntry)


def is_turn_start(entry: SessionEntry) -> bool:
    """An entry that begins a turn (pi's findTurnStartIndex): a user message, a shell command
    the user ran, a custom message or a branch summary."""
    if isinstance(entry, MessageEntry):
        return entry.message.role in ("user", "bashExecution")
    return isinstance(entry, CustomMessageEntry | BranchSummaryEntry)


def _inside_tool_exchanges(entries: Sequence[SessionEntry], start: int, end: int) -> set[int]:
    """Indexes where a cut would part a tool result from its call: after the call, up to and
    including its result."""
    calls: dict[str, int] = {}
    inside: set[int] = set()
    for index in range(start, end):
        entry = entries[index]
        if not isinstance(entry, MessageEntry):
            continue
        message = entry.message
        if isinstance(message, AssistantMessage):
            calls.update((call.id, index) for call in message.tool_calls)
        elif message.role == "toolResult":
            call_index = calls.get(getattr(message, "tool_call_id", ""))
            if call_index is not None:
                inside.update(range(call_index + 1, index + 1))
    return inside


@dataclass
class CutPoint:
    first_kept_index: int
    # The entry that starts the turn the cut falls in, when the cut splits a turn.
    turn_start_index: int | None
    is_split_turn: bool


def find_turn_start(entries: Sequence[SessionEntry], index: int, start: int = 0) -> int | None:
    for i in range(index, start - 1, -1):
        if is_turn_start(entries[i]):
            return i
    return None


def find_cut_point(
    entries: Sequence[SessionEntry],
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS,
    *,
    start: int = 0,
    end: int | None = None,
) -> CutPoint:
    """Where to cut ``entries[start:end]`` so that about ``keep_recent_tokens`` of the newest
    messages are kept, as pi's findCutPoint cuts. Walking back from the newest message entry
    (custom messages and branch summaries count nothing there), once the kept messages reach
    the budget the cut goes to the nearest valid cut point at or after that message, never a
    tool result, nor, ours only, anywhere between a tool call and its result. Ours only too:
    with no cut point after it (the budget reached in the tool results that end the branch)
    the cut goes to the last one, where pi's goes to the first and keeps everything, so that
    a turn grown past the model's window by its tool results can still be compacted. The
    entries just before the cut that are no message entries (settings, labels, custom
    messages, branch summaries) are kept with it, up to a compaction. A cut at anything but a user message splits the turn it falls in; one at a
    user message after settings splits the turn before them, as in pi."""
    end = len(entries) if end is None else end
    excluded = _inside_tool_exchanges(entries, start, end)
    candidates = [
        i for i in range(start, end) if _is_cut_candidate(entries[i]) and i not in excluded
    ]
    if not candidates:
        return CutPoint(start, None, False)
    cut = candidates[0]
    kept_tokens = 0
    for index in range(end - 1, start - 1, -1):
        entry = entries[index]
        if not isinstance(entry, MessageEntry):
            continue
        kept_tokens += estimate_tokens(entry.message)
        if kept_tokens >= keep_recent_tokens:
            cut = next((c for c in candidates if c >= index), candidates[-1])
            break
    while cut > start and not isinstance(entries[cut - 1], CompactionEntry | MessageEntry):
        cut -= 1
    kept = entries[cut]
    at_user = isinstance(kept, MessageEntry) and kept.message.role == "user"
    turn_start = None if at_user else find_turn_start(entries, cut, start)
    return CutPoint(cut, turn_start, turn_start is not None)


# --- preparing a compaction -------------------------------------------------------------------


@dataclass
class CompactionPreparation:
    first_kept_entry_id: str
    first_kept_index: int
    messages_to_summarize: list[BaseMessage]
    turn_prefix_messages: list[BaseMessage]
    is_split_turn: bool
    tokens_before: int
    previous_summary: str | None
    file_ops: FileOps


def prepare_compaction(
    path: Sequence[SessionEntry],
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS,
    context_messages: Sequence[BaseMessage] | None = None,
    *,
    manual: bool = False,
) -> CompactionPreparation:
    """What a compaction of the branch ``path`` (root first) would summarise and keep (pi's
    prepareCompaction). Raises CompactionError for an empty branch, one that ends in a
    compaction, and, unless ``manual``, one with nothing older than what is kept: a compaction
    asked for (pi's /compact) is made anyway, as pi makes it, the summary carrying what came
    before. ``context_messages`` is the branch's built context (for tokens before); built if
    omitted."""
    if not path:
        raise CompactionError("nothing_to_compact", "nothing to compact: the branch is empty")
    if isinstance(path[-1], CompactionEntry):
        raise CompactionError("nothing_to_compact", "nothing to compact: already compacted")
    previous_index = newest_compaction([e.type for e in path])
    previous: CompactionEntry | None = None
    boundary = 0
    carried: list[BaseMessage] = []
    file_ops = FileOps()
    if previous_index is not None:
        found = path[previous_index]
        assert isinstance(found, CompactionEntry)
        previous = found
        start = context_start([e.id for e in path], previous_index, previous)
        kept = start < previous_index
        boundary = start if kept else previous_index + 1
        carried = [] if kept else list(previous.retained_tail or [])
        if not previous.from_hook:
            file_ops.add_details(previous.details)
    if context_messages is None:
        context_messages = build_session_context(path).messages
    cut = find_cut_point(path, keep_recent_tokens, start=boundary)
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_index
    assert history_end is not None
    history = [*carried, *_messages(path[boundary:history_end])]
    prefix = _messages(path[history_end : cut.first_kept_index]) if cut.is_split_turn else []
    if not history and not prefix and not manual:
        since = " since the last compaction" if previous is not None else ""
        size = estimate_messages_tokens(_messages(path[boundary:]))
        verbatim = (
            f"the recent part that is kept verbatim (about {keep_recent_tokens} tokens, rounded "
            "up to whole messages)"
            if keep_recent_tokens > 0
            else "its newest message, which is always kept verbatim"
        )
        raise CompactionError(
            "nothing_to_compact",
            f"nothing to compact: the branch{since} (about {size} tokens) is all in {verbatim}",
        )
    for message in (*history, *prefix):
        file_ops.add_message(message)
    return CompactionPreparation(
        first_kept_entry_id=path[cut.first_kept_index].id,
        first_kept_index=cut.first_kept_index,
        messages_to_summarize=history,
        turn_prefix_messages=prefix,
        is_split_turn=cut.is_split_turn and bool(prefix),
        tokens_before=context_tokens(context_messages),
        previous_summary=previous.summary if previous is not None else None,
        file_ops=file_ops,
    )


def _messages(entries: Sequence[SessionEntry]) -> list[BaseMessage]:
    return [m for entry in entries for m in entry_messages(entry)]
