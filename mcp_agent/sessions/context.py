"""Building what the model sees from a branch of entries (seed: buildSessionContext).

The rules follow pi's ``buildSessionContext``: the newest compaction on the path wins; its
summary comes first, then the kept entries (from ``firstKeptEntryId``, or the compaction's
retained tail), then everything after it. Thinking level, model and active tools come from the
whole path. Transforms rewrite the list of entries; projectors turn ``custom`` entries of a
given ``customType`` into messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
    timed,
)
from mcp_agent.sessions.entries import (
    ActiveToolsChangeEntry,
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    MessageEntry,
    ModelChangeEntry,
    SessionEntry,
    ThinkingLevelChangeEntry,
    iso_to_ms,
)

EntryTransform = Callable[[list[SessionEntry]], list[SessionEntry]]
# (entry, its index in the context entries, the context entries) -> messages
EntryProjector = Callable[[CustomEntry, int, list[SessionEntry]], list[BaseMessage]]


@dataclass
class SessionContextBuildOptions:
    entry_transforms: list[EntryTransform] | None = None
    entry_projectors: dict[str, EntryProjector] | None = None


@dataclass
class SessionContext:
    messages: list[BaseMessage] = field(default_factory=list)
    thinking_level: str = "off"
    # Whether an entry on the branch set the level ("off" without one is nobody's choice:
    # pi's AgentSession then runs at its default level and records it).
    thinking_level_recorded: bool = False
    model: dict[str, str] | None = None
    active_tool_names: list[str] | None = None

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "messages": [m.to_json_dict() for m in self.messages],
            "thinkingLevel": self.thinking_level,
            "model": self.model,
        }
        if self.active_tool_names is not None:
            data["activeToolNames"] = list(self.active_tool_names)
        return data


def merge_context_build_options(
    base: SessionContextBuildOptions | None, extra: SessionContextBuildOptions | None
) -> SessionContextBuildOptions:
    """Session-level options first, then the call's: transforms run in that order, and a
    call's projector replaces the session's for the same custom type."""
    base = base or SessionContextBuildOptions()
    extra = extra or SessionContextBuildOptions()
    transforms = [*(base.entry_transforms or []), *(extra.entry_transforms or [])]
    projectors = {**(base.entry_projectors or {}), **(extra.entry_projectors or {})}
    return SessionContextBuildOptions(
        entry_transforms=transforms or None, entry_projectors=projectors or None
    )


@dataclass
class _State:
    thinking_level: str = "off"
    thinking_level_recorded: bool = False
    model: dict[str, str] | None = None
    active_tool_names: list[str] | None = None


def derive_session_context_state(path_entries: Sequence[SessionEntry]) -> _State:
    state = _State()
    for entry in path_entries:
        _apply_setting(state, entry)
    return state


def _apply_setting(state: _State, entry: SessionEntry) -> None:
    if isinstance(entry, ThinkingLevelChangeEntry):
        state.thinking_level = entry.thinking_level
        state.thinking_level_recorded = True
    elif isinstance(entry, ModelChangeEntry):
        state.model = {"provider": entry.provider, "modelId": entry.model_id}
    elif isinstance(entry, MessageEntry) and isinstance(entry.message, AssistantMessage):
        _apply_answer_model(state, entry.message.provider, entry.message.model)
    elif isinstance(entry, ActiveToolsChangeEntry):
        state.active_tool_names = list(entry.active_tool_names)


def _apply_answer_model(state: _State, provider: str, model: str) -> None:
    # One appended over MCP names no model (both empty): it leaves the model as it was.
    if provider or model:
        state.model = {"provider": provider, "modelId": model}


def _apply_newest_model(
    state: _State,
    rows: Sequence[tuple[str, str, str | None]],
    models: Sequence[int],
    entry_at: Callable[[int], SessionEntry],
    message_texts: Mapping[str, str] | None,
) -> None:
    """The model as ``derive_session_context_state`` finds it over ``rows``: set by the newest
    of the entries at ``models`` that names one (an answer appended over MCP names none and
    leaves it as it was), looked at newest first. Parsing a message entry builds the entry's
    and its message's models (the first time in a process, milliseconds: most of a first whole
    context read but its walk), so an answer's model is read from its JSON when the caller has
    it (two fields)."""
    for i in reversed(models):
        text = message_texts.get(rows[i][0]) if message_texts else None
        named = None if text is None or rows[i][1] != "message" else _answer_model(text)
        if named is None:
            _apply_setting(state, entry_at(i))
        else:
            _apply_answer_model(state, *named)
        if state.model is not None:
            return


def _answer_model(text: str) -> tuple[str, str] | None:
    """The provider and model of an assistant message given as its stored JSON ``text``, as
    ``AssistantMessage`` reads them (both default to ""); None when they are not strings
    (then the entry is parsed, and refused, as before)."""
    data = json.loads(text)
    if not isinstance(data, dict):
        return None
    provider, model = data.get("provider", ""), data.get("model", "")
    if isinstance(provider, str) and isinstance(model, str):
        return provider, model
    return None


# --- where a context starts: the one rule that every backend and compaction follow ----------


def newest_compaction(types: Sequence[str]) -> int | None:
    """The index of the newest compaction on a path, given its entries' types root first."""
    for index in range(len(types) - 1, -1, -1):
        if types[index] == "compaction":
            return index
    return None


def first_kept_id(compaction: CompactionEntry) -> str | None:
    """The entry from which a compaction keeps the branch before it verbatim; None when the
    context starts at the compaction itself (it carries a retained tail, or keeps nothing)."""
    return compaction.first_kept_entry_id if compaction.retained_tail is None else None


def context_start(ids: Sequence[str], index: int, compaction: CompactionEntry) -> int:
    """Where the context of a path whose newest compaction stands at ``index`` begins: at its
    first kept entry, or at the compaction (also when the kept entry is not on the path)."""
    kept = first_kept_id(compaction)
    return next((i for i in range(index) if ids[i] == kept), index) if kept else index


# Roles of the messages that never set the model; any other message (an assistant's, or one of
# a type registered elsewhere) may.
_NOT_ANSWERS = frozenset(
    {"user", "toolResult", "bashExecution", "custom", "branchSummary", "compactionSummary"}
)


def setting_kind(entry_type: str, role: str | None) -> str | None:
    """Which setting of the context an entry may decide (``derive_session_context_state``):
    "model", "thinking_level_change" or "active_tools_change"; "message?" for a message of a
    role registered elsewhere (it may be an answer); None for the rest. The newest entry of
    each kind on the path is what counts."""
    if entry_type == "model_change" or (entry_type == "message" and role == "assistant"):
        return "model"
    if entry_type in ("thinking_level_change", "active_tools_change"):
        return entry_type
    if entry_type == "message" and role not in _NOT_ANSWERS:
        return "message?"
    return None


def context_path_indices(
    ids: Sequence[str],
    types: Sequence[str],
    roles: Sequence[str | None],
    compaction_at: Callable[[int], CompactionEntry],
) -> list[int]:
    """The entries of a path (given as ids, types and message roles, root first) that its
    context is built from: the newest compaction, what it keeps and all that follows, and before
    those only the newest entry deciding each setting (and the newest model change: the model
    stays its when the newest answer names none). ``compaction_at(i)`` parses entry i.
    A backend that reads rows uses it to parse no more of a long branch than that."""
    index = newest_compaction(types)
    if index is None:
        return list(range(len(ids)))
    start = context_start(ids, index, compaction_at(index))
    settings: dict[str | int, int] = {}
    for i in range(start):
        kind = setting_kind(types[i], roles[i])
        if kind is not None:
            settings[i if kind == "message?" else kind] = i
        if types[i] == "model_change":  # the model, when the newest answer names none
            settings["model_change"] = i
    return [*sorted(set(settings.values())), *range(start, len(ids))]


def context_order(
    ids: Sequence[str], types: Sequence[str], compaction_at: Callable[[int], CompactionEntry]
) -> list[int]:
    """The entries of a path (ids and types, root first) that make up its context, in order:
    the newest compaction first when there is one, then what it keeps and all after it."""
    index = newest_compaction(types)
    if index is None:
        return list(range(len(ids)))
    start = context_start(ids, index, compaction_at(index))
    # Older compactions inside the kept range were superseded by this one.
    kept = [i for i in range(start, index) if types[i] != "compaction"]
    return [index, *kept, *range(index + 1, len(ids))]


def default_context_entry_transform(path_entries: Sequence[SessionEntry]) -> list[SessionEntry]:
    """The entries that make up the context, the newest compaction first when there is one."""

    def compaction_at(index: int) -> CompactionEntry:
        entry = path_entries[index]
        assert isinstance(entry, CompactionEntry)
        return entry

    order = context_order(
        [e.id for e in path_entries], [e.type for e in path_entries], compaction_at
    )
    return [path_entries[i] for i in order]


def compaction_stop() -> Callable[[SessionEntry], bool]:
    """A ``stop`` for ``storage.walk_to_root`` that ends the walk where the newest compaction's
    context begins (seed: getPathToRootOrCompaction): ``context_start`` walking leaf first."""
    kept: list[str | None] = []

    def stop(entry: SessionEntry) -> bool:
        if kept:
            return entry.id == kept[0]
        if isinstance(entry, CompactionEntry):
            found = first_kept_id(entry)
            if found is None:
                return True
            kept.append(found)
        return False

    return stop


def build_context_entries(
    path_entries: Sequence[SessionEntry], options: SessionContextBuildOptions | None = None
) -> list[SessionEntry]:
    entries = default_context_entry_transform(path_entries)
    for transform in (options.entry_transforms if options else None) or []:
        entries = transform(entries)
    return entries


def session_entry_to_context_messages(
    entry: SessionEntry,
    index: int,
    entries: list[SessionEntry],
    options: SessionContextBuildOptions | None = None,
) -> list[BaseMessage]:
    if isinstance(entry, MessageEntry):
        return [entry.message]
    if isinstance(entry, CustomMessageEntry):
        # As pi's createCustomMessage: display and details as the entry has them, null or not.
        given = {
            name: getattr(entry, name)
            for name in ("display", "details")
            if name in entry.model_fields_set
        }
        at = iso_to_ms(entry.timestamp)
        message = CustomMessage(
            custom_type=entry.custom_type, content=entry.content, timestamp=at, **given
        )
        return [timed(message, at)]
    if isinstance(entry, CompactionEntry):
        at = iso_to_ms(entry.timestamp)
        summary = CompactionSummaryMessage(
            summary=entry.summary, tokens_before=entry.tokens_before, timestamp=at
        )
        messages: list[BaseMessage] = [timed(summary, at)]
        messages.extend(entry.retained_tail or [])
        return messages
    if isinstance(entry, BranchSummaryEntry):
        if not entry.summary:  # pi skips empty summaries
            return []
        at = iso_to_ms(entry.timestamp)
        branch = BranchSummaryMessage(summary=entry.summary, from_id=entry.from_id, timestamp=at)
        return [timed(branch, at)]
    if isinstance(entry, CustomEntry):
        projectors = (options.entry_projectors if options else None) or {}
        projector = projectors.get(entry.custom_type)
        return list(projector(entry, index, entries)) if projector else []
    return []


def build_session_context(
    path_entries: Sequence[SessionEntry], options: SessionContextBuildOptions | None = None
) -> SessionContext:
    """The context for a branch given root first (seed: buildSessionContext)."""
    state = derive_session_context_state(path_entries)
    context_entries = build_context_entries(path_entries, options)
    messages: list[BaseMessage] = []
    for index, entry in enumerate(context_entries):
        messages.extend(session_entry_to_context_messages(entry, index, context_entries, options))
    return SessionContext(
        messages=messages,
        thinking_level=state.thinking_level,
        thinking_level_recorded=state.thinking_level_recorded,
        model=state.model,
        active_tool_names=state.active_tool_names,
    )


def stored_context(
    rows: Sequence[tuple[str, str, str | None]],
    parse: Callable[[Sequence[int]], Sequence[SessionEntry]],
    message_texts: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any] | str], SessionContext]:
    """``build_session_context`` (no options) over a path given in outline (id, type, message
    role), root first. Returns the messages, each a JSON object or, for a message entry, the
    entry's id (its stored JSON holds the message), and the context with
    the settings (its ``messages`` left empty). ``parse(indices)`` gives those entries, in that
    order: only the entries that are not messages, and the newest entry deciding each setting,
    are asked for, all at once after the newest compaction (so a backend reads them together).
    ``message_texts``: the stored JSON of the messages of message entries the caller has at
    hand, by entry id; an assistant message deciding the model is read from there, not parsed."""
    ids = [row[0] for row in rows]
    types = [row[1] for row in rows]
    deciding: dict[str | int, int] = {}
    models: list[int] = []  # every entry that may set the model, root first
    for i, row in enumerate(rows):
        kind = setting_kind(row[1], row[2])
        if kind == "model":
            models.append(i)
        elif kind is not None:
            deciding[i if kind == "message?" else kind] = i

    def compaction_at(index: int) -> CompactionEntry:
        entry = parse([index])[0]
        assert isinstance(entry, CompactionEntry)
        return entry

    order = context_order(ids, types, compaction_at)
    settings = sorted(deciding.values())
    # The newest entry that may set the model is read with the rest (it names one, most
    # often); an older one only when it does not.
    newest_model = models[-1:] if not (models and ids[models[-1]] in (message_texts or {})) else []
    wanted = sorted({*settings, *newest_model, *(i for i in order if types[i] != "message")})
    parsed = dict(zip(wanted, parse(wanted), strict=True))
    # Only the newest entry of each kind changes what derive_session_context_state returns.
    state = _State()
    for i in settings:
        _apply_setting(state, parsed[i])
    _apply_newest_model(
        state, rows, models, lambda i: parsed[i] if i in parsed else parse([i])[0], message_texts
    )
    messages: list[dict[str, Any] | str] = []
    for i in order:
        if types[i] == "message":
            messages.append(ids[i])
        else:
            found = session_entry_to_context_messages(parsed[i], 0, [])
            messages.extend(m.to_json_dict() for m in found)
    context = SessionContext(
        thinking_level=state.thinking_level,
        thinking_level_recorded=state.thinking_level_recorded,
        model=state.model,
        active_tool_names=state.active_tool_names,
    )
    return messages, context
