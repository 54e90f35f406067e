"""Compaction: replace the older part of a long branch by a model-written summary (pi's design).

- Token accounting: the last assistant message's usage, plus an estimate (characters / 4, an
  image as 4,800 characters) for the messages after it. Usage recorded before the newest
  compaction is stale (it measured the context before the summary replaced it) and is ignored.
- When: ``should_compact`` (context tokens > context window - reserve).
- Where: ``find_cut_point`` keeps about ``keep_recent_tokens`` of the newest entries, never
  between a tool call and its result. When the cut falls inside a turn (a split turn), that
  turn's beginning gets a summary of its own ("turn prefix"), as pi does.
- What: ``generate_summary`` asks the model with pi's structured prompt, or its "update" prompt
  when an earlier compaction's summary exists (that summary is merged, not lost). Files read and
  modified (from tool-call arguments) are tracked in the entry's details and accumulate.
- ``compact`` appends the compaction entry; history is never deleted. Summariser failures raise
  ``CompactionError`` and nothing is written.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import anyio

from mcp_agent.abort import AbortSignal
from mcp_agent.events import AssistantMessageEvent
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    BashExecutionMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    ImageContent,
    Message,
    Model,
    StopReason,
    TextContent,
    ThinkingContent,
    ThinkingLevel,
    ToolCall,
    Usage,
    UserMessage,
    convert_to_llm,
)
from mcp_agent.providers.base import LlmContext, StreamFn, StreamOptions, final_message
from mcp_agent.sessions.context import (
    SessionContext,
    build_session_context,
    session_entry_to_context_messages,
)
from mcp_agent.sessions.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    SessionEntry,
)
from mcp_agent.sessions.errors import SessionError

DEFAULT_RESERVE_TOKENS = 16_384
DEFAULT_KEEP_RECENT_TOKENS = 20_000
IMAGE_CHARS = 4_800
TOOL_RESULT_MAX_CHARS = 2_000


class CompactionError(SessionError):
    """Compaction or a branch summary could not be made; nothing was written.

    Codes: ``nothing_to_compact``, ``summarizer_failed``, ``aborted``, ``conflict`` (the
    session moved on while the summary was being written)."""


class CompactableSession(Protocol):
    """What compaction needs of a session (``mcp_agent.sessions.Session`` has it)."""

    @property
    def id(self) -> str: ...
    @property
    def leaf_id(self) -> str | None: ...
    def get_entry(self, entry_id: str) -> SessionEntry | None: ...
    def get_branch(self, leaf_id: str | None = None) -> list[SessionEntry]: ...
    def build_context(self) -> SessionContext: ...
    def append_compaction(
        self,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        details: Any = None,
        from_hook: bool = False,
        usage: Usage | None = None,
        retained_tail: list[BaseMessage] | None = None,
    ) -> str: ...
    def move_to(
        self, entry_id: str | None, summary: Mapping[str, Any] | None = None
    ) -> str | None: ...


@dataclass
class CompactionSettings:
    """Auto-compaction for an Agent bound to a session. ``model`` / ``stream_fn`` choose the
    summariser; unset, the agent's own are used."""

    enabled: bool = True
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    model: Model | None = None
    stream_fn: StreamFn | None = None


# --- token accounting -------------------------------------------------------------------------


def _content_chars(content: str | Sequence[Any]) -> int:
    if isinstance(content, str):
        return len(content)
    chars = 0
    for block in content:
        if isinstance(block, TextContent):
            chars += len(block.text)
        elif isinstance(block, ImageContent):
            chars += IMAGE_CHARS
    return chars


def _json_chars(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def estimate_tokens(message: BaseMessage) -> int:
    """pi's estimate: characters / 4, rounded up; an image counts as 4,800 characters."""
    chars = 0
    if isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, TextContent):
                chars += len(block.text)
            elif isinstance(block, ThinkingContent):
                chars += len(block.thinking)
            elif isinstance(block, ToolCall):
                chars += len(block.name) + _json_chars(block.arguments)
    elif isinstance(message, BashExecutionMessage):
        chars = len(message.command) + len(message.output)
    elif isinstance(message, BranchSummaryMessage | CompactionSummaryMessage):
        chars = len(message.summary)
    else:  # user, toolResult, custom, and any registered type with content
        content = getattr(message, "content", "")
        if isinstance(content, str | list):
            chars = _content_chars(content)
    return math.ceil(chars / 4)


def estimate_messages_tokens(messages: Sequence[BaseMessage]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def calculate_context_tokens(usage: Usage) -> int:
    """The context size a model call reported (pi: totalTokens, else the sum of the parts)."""
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)


@dataclass
class ContextEstimate:
    tokens: int
    usage_tokens: int
    trailing_tokens: int
    # Index of the assistant message whose usage was used; None: everything was estimated.
    last_usage_index: int | None


def _usable_usage(message: BaseMessage, stale_before: int | None) -> Usage | None:
    if not isinstance(message, AssistantMessage):
        return None
    if message.stop_reason in (StopReason.ERROR, StopReason.ABORTED):
        return None
    if stale_before is not None and message.timestamp <= stale_before:
        return None
    return message.usage if calculate_context_tokens(message.usage) > 0 else None


def estimate_context_tokens(messages: Sequence[BaseMessage]) -> ContextEstimate:
    """The context size: the newest usable assistant usage plus estimates for what follows.
    Error and aborted answers carry no usable usage; neither does an answer from before the
    newest compaction summary in ``messages`` (it measured the context before compaction)."""
    summaries = [m.timestamp for m in messages if isinstance(m, CompactionSummaryMessage)]
    stale_before = max(summaries) if summaries else None
    for index in range(len(messages) - 1, -1, -1):
        usage = _usable_usage(messages[index], stale_before)
        if usage is not None:
            usage_tokens = calculate_context_tokens(usage)
            trailing = estimate_messages_tokens(messages[index + 1 :])
            return ContextEstimate(usage_tokens + trailing, usage_tokens, trailing, index)
    estimated = estimate_messages_tokens(messages)
    return ContextEstimate(estimated, 0, estimated, None)


def context_tokens(messages: Sequence[BaseMessage]) -> int:
    return estimate_context_tokens(messages).tokens


def should_compact(
    context_tokens: int, context_window: int, reserve: int = DEFAULT_RESERVE_TOKENS
) -> bool:
    return context_tokens > context_window - reserve


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


def _is_cut_candidate(entry: SessionEntry) -> bool:
    """pi's valid cut points: any message but a tool result, a custom message, a branch summary."""
    if isinstance(entry, MessageEntry):
        return entry.message.role != "toolResult"
    return isinstance(entry, CustomMessageEntry | BranchSummaryEntry)


def is_turn_start(entry: SessionEntry) -> bool:
    """An entry that begins a turn: a user (or user-like) message."""
    if isinstance(entry, MessageEntry):
        return entry.message.role in ("user", "bashExecution", "custom")
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
    messages are kept (pi's findCutPoint). Walking back from the newest, once the kept messages
    reach the budget the cut goes to the nearest valid cut point at or after that message: a
    user, assistant, custom message or branch summary (never a tool result, nor anywhere between
    a tool call and its result). Settings and labels just before the cut are kept with it."""
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
        messages = entry_messages(entries[index])
        if not messages:
            continue
        kept_tokens += estimate_messages_tokens(messages)
        if kept_tokens >= keep_recent_tokens:
            cut = next((c for c in candidates if c >= index), candidates[-1])
            break
    turn_start = None if is_turn_start(entries[cut]) else find_turn_start(entries, cut - 1, start)
    first_kept = cut
    while first_kept > start:
        previous = entries[first_kept - 1]
        if isinstance(previous, CompactionEntry) or entry_messages(previous):
            break
        first_kept -= 1
    return CutPoint(first_kept, turn_start, turn_start is not None)


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


def _newest_compaction(path: Sequence[SessionEntry]) -> int | None:
    for index in range(len(path) - 1, -1, -1):
        if isinstance(path[index], CompactionEntry):
            return index
    return None


def prepare_compaction(
    path: Sequence[SessionEntry],
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS,
    context_messages: Sequence[BaseMessage] | None = None,
) -> CompactionPreparation:
    """What a compaction of the branch ``path`` (root first) would summarise and keep (pi's
    prepareCompaction). Raises CompactionError when there is nothing to summarise.
    ``context_messages`` is the branch's built context (for tokens before); built if omitted."""
    if not path:
        raise CompactionError("nothing_to_compact", "nothing to compact: the branch is empty")
    if isinstance(path[-1], CompactionEntry):
        raise CompactionError("nothing_to_compact", "nothing to compact: already compacted")
    previous_index = _newest_compaction(path)
    previous: CompactionEntry | None = None
    boundary = 0
    carried: list[BaseMessage] = []
    file_ops = FileOps()
    if previous_index is not None:
        found = path[previous_index]
        assert isinstance(found, CompactionEntry)
        previous = found
        kept = next(
            (
                i
                for i, e in enumerate(path[:previous_index])
                if e.id == previous.first_kept_entry_id
            ),
            None,
        )
        boundary = kept if kept is not None else previous_index + 1
        carried = list(previous.retained_tail or []) if kept is None else []
        if not previous.from_hook:
            file_ops.add_details(previous.details)
    if context_messages is None:
        context_messages = build_session_context(path).messages
    cut = find_cut_point(path, keep_recent_tokens, start=boundary)
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_index
    assert history_end is not None
    history = [*carried, *_messages(path[boundary:history_end])]
    prefix = _messages(path[history_end : cut.first_kept_index]) if cut.is_split_turn else []
    if not history and not prefix:
        since = " since the last compaction" if previous is not None else ""
        size = estimate_messages_tokens(_messages(path[boundary:]))
        raise CompactionError(
            "nothing_to_compact",
            f"nothing to compact: the branch{since} (about {size} tokens) fits in the recent "
            f"part that is kept verbatim (about {keep_recent_tokens} tokens)",
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


# --- prompts (pi's, verbatim) -----------------------------------------------------------------

SUMMARIZATION_SYSTEM_PROMPT = """You are a context summarization assistant. Your task is to read a conversation between a user and an AI coding assistant, then produce a structured summary following the exact format specified.

Do NOT continue the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary."""

SUMMARIZATION_PROMPT = """The messages above are a conversation to summarize. Create a structured context checkpoint summary that another LLM will use to continue the work.

Use this EXACT format:

## Goal
[What is the user trying to accomplish? Can be multiple items if the session covers different tasks.]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned by user]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Current work]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [Ordered list of what should happen next]

## Critical Context
- [Any data, examples, or references needed to continue]
- [Or "(none)" if not applicable]

Keep each section concise. Preserve exact file paths, function names, and error messages."""

UPDATE_SUMMARIZATION_PROMPT = """The messages above are NEW conversation messages to incorporate into the existing summary provided in <previous-summary> tags.

Update the existing structured summary with new information. RULES:
- PRESERVE all existing information from the previous summary
- ADD new progress, decisions, and context from the new messages
- UPDATE the Progress section: move items from "In Progress" to "Done" when completed
- UPDATE "Next Steps" based on what was accomplished
- PRESERVE exact file paths, function names, and error messages
- If something is no longer relevant, you may remove it

Use this EXACT format:

## Goal
[Preserve existing goals, add new ones if the task expanded]

## Constraints & Preferences
- [Preserve existing, add new ones discovered]

## Progress
### Done
- [x] [Include previously done items AND newly completed items]

### In Progress
- [ ] [Current work - update based on progress]

### Blocked
- [Current blockers - remove if resolved]

## Key Decisions
- **[Decision]**: [Brief rationale] (preserve all previous, add new)

## Next Steps
1. [Update based on current state]

## Critical Context
- [Preserve important context, add new if needed]

Keep each section concise. Preserve exact file paths, function names, and error messages."""

TURN_PREFIX_SUMMARIZATION_PROMPT = """This is the PREFIX of a turn that was too large to keep. The SUFFIX (recent work) is retained.

Summarize the prefix to provide context for the retained suffix:

## Original Request
[What did the user ask for in this turn?]

## Early Progress
- [Key decisions and work done in the prefix]

## Context for Suffix
- [Information needed to understand the retained recent work]

Be concise. Focus on what's needed to understand the kept suffix."""

SPLIT_TURN_SEPARATOR = "\n\n---\n\n**Turn Context (split turn):**\n\n"


# --- serialising and asking the model ---------------------------------------------------------


def _truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n\n[... {len(text) - max_chars} more characters truncated]"


def serialize_conversation(messages: Sequence[Message]) -> str:
    """The conversation as plain text, so that the model summarises it instead of continuing
    it (pi's serializeConversation); tool results are cut to 2,000 characters."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            content = message.content
            text = (
                content
                if isinstance(content, str)
                else "".join(b.text for b in content if isinstance(b, TextContent))
            )
            if text:
                parts.append(f"[User]: {text}")
        elif isinstance(message, AssistantMessage):
            texts, thoughts, calls = [], [], []
            for block in message.content:
                if isinstance(block, TextContent):
                    texts.append(block.text)
                elif isinstance(block, ThinkingContent):
                    thoughts.append(block.thinking)
                elif isinstance(block, ToolCall):
                    arguments = ", ".join(
                        f"{k}={json.dumps(v, ensure_ascii=False, separators=(',', ':'))}"
                        for k, v in block.arguments.items()
                    )
                    calls.append(f"{block.name}({arguments})")
            if thoughts:
                parts.append("[Assistant thinking]: " + "\n".join(thoughts))
            if texts:
                parts.append("[Assistant]: " + "\n".join(texts))
            if calls:
                parts.append("[Assistant tool calls]: " + "; ".join(calls))
        else:
            text = "".join(b.text for b in message.content if isinstance(b, TextContent))
            if text:
                parts.append(f"[Tool result]: {_truncate(text, TOOL_RESULT_MAX_CHARS)}")
    return "\n\n".join(parts)


def conversation_block(messages: Sequence[BaseMessage]) -> str:
    return (
        f"<conversation>\n{serialize_conversation(convert_to_llm(messages))}\n</conversation>\n\n"
    )


@dataclass
class Completion:
    text: str
    usage: Usage


async def _drain(
    stream: AsyncIterator[AssistantMessageEvent], signal: AbortSignal | None
) -> AssistantMessage | None:
    """The stream's final message; None when ``signal`` fired first."""
    result: AssistantMessage | None = None
    with anyio.CancelScope() as scope:
        remove = signal.on_abort(scope.cancel) if signal is not None else None
        try:
            result = await final_message(stream)
        finally:
            if remove is not None:
                remove()
            close = getattr(stream, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()
    return result


async def complete_summary(
    model: Model,
    stream_fn: StreamFn,
    prompt: str,
    *,
    max_tokens: int,
    what: str = "Summarization",
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    """One summariser call: pi's system prompt, ``prompt`` as the only user message."""
    level = ThinkingLevel(thinking_level) if model.reasoning else ThinkingLevel.OFF
    if model.max_tokens > 0:
        max_tokens = min(max_tokens, model.max_tokens)
    request = LlmContext(
        system_prompt=SUMMARIZATION_SYSTEM_PROMPT,
        messages=[UserMessage(content=[TextContent(text=prompt)])],
    )
    stream_options = replace(
        options or StreamOptions(), signal=signal, max_tokens=max_tokens, thinking_level=level
    )
    if signal is not None and signal.aborted:
        raise CompactionError("aborted", f"{what} was aborted")
    try:
        stream: Any = stream_fn(model, request, stream_options)
        if inspect.isawaitable(stream):
            stream = await stream
        response = await _drain(stream, signal)
    except Exception as error:  # a provider should not raise; one that does still fails cleanly
        raise CompactionError("summarizer_failed", f"{what} failed: {error}") from error
    if response is None or response.stop_reason == StopReason.ABORTED:
        raise CompactionError("aborted", f"{what} was aborted")
    if response.stop_reason == StopReason.ERROR:
        reason = response.error_message or "unknown error"
        raise CompactionError("summarizer_failed", f"{what} failed: {reason}")
    text = "\n".join(b.text for b in response.content if isinstance(b, TextContent))
    if not text.strip():
        raise CompactionError("summarizer_failed", f"{what} failed: the model returned no text")
    return Completion(text, response.usage)


async def generate_summary(
    messages: Sequence[BaseMessage],
    model: Model,
    stream_fn: StreamFn,
    *,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    instructions: str | None = None,
    previous_summary: str | None = None,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    """A structured summary of ``messages``; with ``previous_summary``, that summary updated
    with them (pi's generateSummary)."""
    prompt = UPDATE_SUMMARIZATION_PROMPT if previous_summary else SUMMARIZATION_PROMPT
    if instructions:
        prompt = f"{prompt}\n\nAdditional focus: {instructions}"
    text = conversation_block(messages)
    if previous_summary:
        text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
    return await complete_summary(
        model,
        stream_fn,
        text + prompt,
        max_tokens=math.floor(0.8 * reserve_tokens),
        signal=signal,
        options=options,
        thinking_level=thinking_level,
    )


async def generate_turn_prefix_summary(
    messages: Sequence[BaseMessage],
    model: Model,
    stream_fn: StreamFn,
    *,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    return await complete_summary(
        model,
        stream_fn,
        conversation_block(messages) + TURN_PREFIX_SUMMARIZATION_PROMPT,
        max_tokens=math.floor(0.5 * reserve_tokens),
        what="Turn prefix summarization",
        signal=signal,
        options=options,
        thinking_level=thinking_level,
    )


# --- compacting a session ---------------------------------------------------------------------


@dataclass
class CompactionResult:
    entry_id: str
    summary: str
    first_kept_entry_id: str
    tokens_before: int
    # The rebuilt context's estimated size.
    tokens_after: int
    details: dict[str, list[str]]
    usage: Usage
    is_split_turn: bool


async def summarize_preparation(
    preparation: CompactionPreparation,
    model: Model,
    stream_fn: StreamFn,
    *,
    instructions: str | None = None,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> Completion:
    """The summary text for a prepared compaction (pi's compact): the history summary, and for
    a split turn the turn prefix summary made alongside it, then the file lists."""
    common: dict[str, Any] = {
        "reserve_tokens": reserve_tokens,
        "signal": signal,
        "options": options,
        "thinking_level": thinking_level,
    }
    history = preparation.messages_to_summarize

    async def summarize_history() -> Completion:
        if not history:
            return Completion("No prior history.", Usage())
        return await generate_summary(
            history,
            model,
            stream_fn,
            instructions=instructions,
            previous_summary=preparation.previous_summary,
            **common,
        )

    if preparation.is_split_turn:
        results: dict[str, Completion] = {}

        async def run(key: str, make: Any) -> None:
            results[key] = await make()

        async def prefix() -> Completion:
            return await generate_turn_prefix_summary(
                preparation.turn_prefix_messages, model, stream_fn, **common
            )

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(run, "history", summarize_history)
                group.start_soon(run, "prefix", prefix)
        except BaseExceptionGroup as group_error:
            failure = next(
                (e for e in group_error.exceptions if isinstance(e, CompactionError)), None
            )
            if failure is not None:
                raise failure from None
            raise
        text = results["history"].text + SPLIT_TURN_SEPARATOR + results["prefix"].text
        usage = results["history"].usage + results["prefix"].usage
        completion = Completion(text, usage)
    else:
        completion = await summarize_history()
    read_files, modified_files = preparation.file_ops.lists()
    completion.text += format_file_operations(read_files, modified_files)
    return completion


async def compact(
    session: CompactableSession,
    model: Model,
    stream_fn: StreamFn,
    *,
    instructions: str | None = None,
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> CompactionResult:
    """Summarise the older part of the session's current branch and append a compaction entry
    (summary, firstKeptEntryId, tokensBefore, details {readFiles, modifiedFiles}, usage). The
    old entries stay in the tree. Raises CompactionError, with nothing written, when there is
    nothing to compact, the summariser fails or is aborted, or the leaf moved meanwhile."""
    leaf_id = session.leaf_id
    path = session.get_branch(leaf_id) if leaf_id is not None else []
    context = session.build_context() if path else None
    preparation = prepare_compaction(
        path, keep_recent_tokens, context.messages if context is not None else None
    )
    completion = await summarize_preparation(
        preparation,
        model,
        stream_fn,
        instructions=instructions,
        reserve_tokens=reserve_tokens,
        signal=signal,
        options=options,
        thinking_level=thinking_level,
    )
    if signal is not None and signal.aborted:
        raise CompactionError("aborted", "compaction was aborted")
    if session.leaf_id != leaf_id:
        raise CompactionError(
            "conflict", "the session changed while it was being compacted; nothing was written"
        )
    details = preparation.file_ops.details()
    entry_id = session.append_compaction(
        completion.text,
        preparation.first_kept_entry_id,
        preparation.tokens_before,
        details=details,
        usage=completion.usage,
    )
    return CompactionResult(
        entry_id=entry_id,
        summary=completion.text,
        first_kept_entry_id=preparation.first_kept_entry_id,
        tokens_before=preparation.tokens_before,
        tokens_after=context_tokens(session.build_context().messages),
        details=details,
        usage=completion.usage,
        is_split_turn=preparation.is_split_turn,
    )
