"""Building what the model sees from a branch of entries (seed: buildSessionContext).

The rules follow pi's ``buildSessionContext``: the newest compaction on the path wins; its
summary comes first, then the kept entries (from ``firstKeptEntryId``, or the compaction's
retained tail), then everything after it. Thinking level, model and active tools come from the
whole path. Transforms rewrite the list of entries; projectors turn ``custom`` entries of a
given ``customType`` into messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
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
    model: dict[str, str] | None = None
    active_tool_names: list[str] | None = None


def derive_session_context_state(path_entries: Sequence[SessionEntry]) -> _State:
    state = _State()
    for entry in path_entries:
        if isinstance(entry, ThinkingLevelChangeEntry):
            state.thinking_level = entry.thinking_level
        elif isinstance(entry, ModelChangeEntry):
            state.model = {"provider": entry.provider, "modelId": entry.model_id}
        elif isinstance(entry, MessageEntry) and isinstance(entry.message, AssistantMessage):
            state.model = {"provider": entry.message.provider, "modelId": entry.message.model}
        elif isinstance(entry, ActiveToolsChangeEntry):
            state.active_tool_names = list(entry.active_tool_names)
    return state


def newest_compaction(path_entries: Sequence[SessionEntry]) -> int | None:
    for index in range(len(path_entries) - 1, -1, -1):
        if isinstance(path_entries[index], CompactionEntry):
            return index
    return None


def default_context_entry_transform(path_entries: Sequence[SessionEntry]) -> list[SessionEntry]:
    """The entries that make up the context, the newest compaction first when there is one."""
    index = newest_compaction(path_entries)
    if index is None:
        return list(path_entries)
    compaction = path_entries[index]
    assert isinstance(compaction, CompactionEntry)
    entries: list[SessionEntry] = [compaction]
    if compaction.retained_tail is None and compaction.first_kept_entry_id is not None:
        kept = False
        for entry in path_entries[:index]:
            kept = kept or entry.id == compaction.first_kept_entry_id
            # Older compactions inside the kept range were superseded by this one.
            if kept and not isinstance(entry, CompactionEntry):
                entries.append(entry)
    entries.extend(path_entries[index + 1 :])
    return entries


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
        message = CustomMessage(
            custom_type=entry.custom_type,
            content=entry.content,
            display=entry.display,
            timestamp=iso_to_ms(entry.timestamp),
        )
        if entry.details is not None:
            message.details = entry.details
        return [message]
    if isinstance(entry, CompactionEntry):
        messages: list[BaseMessage] = [
            CompactionSummaryMessage(
                summary=entry.summary,
                tokens_before=entry.tokens_before,
                timestamp=iso_to_ms(entry.timestamp),
            )
        ]
        messages.extend(entry.retained_tail or [])
        return messages
    if isinstance(entry, BranchSummaryEntry):
        if not entry.summary:  # pi skips empty summaries
            return []
        return [
            BranchSummaryMessage(
                summary=entry.summary, from_id=entry.from_id, timestamp=iso_to_ms(entry.timestamp)
            )
        ]
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
        model=state.model,
        active_tool_names=state.active_tool_names,
    )
