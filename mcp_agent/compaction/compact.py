"""Compaction: replace the older part of a long branch by a model-written summary (pi's design).

- Token accounting: the last assistant message's usage, plus pi's estimate (UTF-16 units / 4,
  a tool result's image as 4,800) for the messages after it. Usage recorded before the newest
  compaction is stale (it measured the context before the summary replaced it) and is ignored.
- When: ``should_compact`` (context tokens > context window - reserve).
- Where: ``find_cut_point`` keeps about ``keep_recent_tokens`` of the newest entries, never
  between a tool call and its result. When the cut falls inside a turn (a split turn), that
  turn's beginning gets a summary of its own ("turn prefix"), as pi does.
- What: ``generate_summary`` asks the model with pi's structured prompt, or its "update" prompt
  when an earlier compaction's summary exists (that summary is merged, not lost); a history (or
  a split turn's prefix) the model refuses as too long is summarised in halves, each updating
  the summary so far (``in_parts``). Files
  read and modified (from tool-call arguments) are tracked in the entry's details and accumulate.
- ``compact`` appends the compaction entry; history is never deleted. Summariser failures raise
  ``CompactionError`` and nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_agent.abort import AbortSignal
from mcp_agent.blocking import Offload, inline
from mcp_agent.compaction.cut_points import (
    CompactionPreparation,
    format_file_operations,
    prepare_compaction,
)
from mcp_agent.compaction.errors import CompactionError, SummaryTooLong
from mcp_agent.compaction.prompts import SPLIT_TURN_SEPARATOR
from mcp_agent.compaction.summarize import (
    NOTHING_WRITTEN,
    Completion,
    generate_summary,
    generate_turn_prefix_summary,
)
from mcp_agent.compaction.tokens import (
    DEFAULT_KEEP_RECENT_TOKENS,
    DEFAULT_RESERVE_TOKENS,
    compacted_tokens,
    estimate_messages_tokens,
    estimate_tokens,
    fit_to_window,
)
from mcp_agent.messages import (
    BaseMessage,
    Model,
    ThinkingLevel,
    Usage,
    UserMessage,
)
from mcp_agent.providers.base import StreamFn, StreamOptions
from mcp_agent.sessions.session import Session


@dataclass
class CompactionSettings:
    """Auto-compaction for an Agent bound to a session. ``model`` / ``stream_fn`` choose the
    summariser; unset, the agent's own are used."""

    enabled: bool = True
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    model: Model | None = None
    stream_fn: StreamFn | None = None


# --- compacting a session ---------------------------------------------------------------------

# The file lists ``format_file_operations`` ends a summary with.
_FILE_LISTS = re.compile(
    r"(\n\n<read-files>\n.*?\n</read-files>)?(\n\n<modified-files>\n.*?\n</modified-files>)?\Z",
    re.DOTALL,
)


def carried_summary(previous_summary: str | None) -> str:
    """The history summary when nothing before the turn being split is left to summarise:
    the previous compaction's summary, carried over whole (pi writes "No prior history." here,
    and the context lost the earlier summary), less its file lists, merged in again below."""
    if not previous_summary:
        return "No prior history."
    return _FILE_LISTS.sub("", previous_summary, count=1)


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
    # What went wrong without stopping it: a summary cut at the summariser's output limit.
    warnings: list[str] = field(default_factory=list)


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

    async def summary(part: list[BaseMessage], previous: str | None) -> Completion:
        return await generate_summary(
            part, model, stream_fn, instructions=instructions, previous_summary=previous, **common
        )

    async def prefix_summary(part: list[BaseMessage], previous: str | None) -> Completion:
        return await generate_turn_prefix_summary(
            part, model, stream_fn, previous_summary=previous, **common
        )

    async def summarize_history() -> Completion:
        if not history:
            return Completion(carried_summary(preparation.previous_summary), Usage())
        return await in_parts(summary, history, preparation.previous_summary, model)

    if preparation.is_split_turn:
        results: dict[str, Completion] = {}

        async def run(key: str, make: Any) -> None:
            results[key] = await make()

        async def prefix() -> Completion:
            return await in_parts(prefix_summary, preparation.turn_prefix_messages, None, model)

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
        warnings = results["history"].warnings + results["prefix"].warnings
        completion = Completion(text, usage, warnings)
    else:
        completion = await summarize_history()
    read_files, modified_files = preparation.file_ops.lists()
    completion.text += format_file_operations(read_files, modified_files)
    return completion


Summarize = Callable[[list[BaseMessage], str | None], Awaitable[Completion]]


async def in_parts(
    summarize: Summarize, part: list[BaseMessage], previous: str | None, model: Model
) -> Completion:
    """``summarize(part, previous)``; a part the model refuses as too long (a session appended
    to over MCP, or grown under a model with a larger window) is halved, the second half
    updating the first's summary: else it could never be compacted. One message too long
    alone is refused, saying what to do."""
    try:
        return await summarize(part, previous)
    except SummaryTooLong as error:
        if not part:
            raise
        if len(part) == 1:
            alone = f"one {part[0].role} message of about {estimate_tokens(part[0]):,} tokens"
            raise SummaryTooLong(
                "summarizer_failed",
                f"{str(error).removesuffix(NOTHING_WRITTEN)}: {alone} is more than"
                f" {model.provider}:{model.id} reads at once (a window of"
                f" {model.context_window:,} tokens); compact with a model whose window holds"
                " it (continue the session with that model, then compact), or go on from"
                f" before that message (session_move_to){NOTHING_WRITTEN}",
            ) from None
    half = len(part) // 2
    first = await in_parts(summarize, part[:half], previous, model)
    second = await in_parts(summarize, part[half:], first.text, model)
    return Completion(second.text, first.usage + second.usage, first.warnings + second.warnings)


def check_shorter(summary: str, preparation: CompactionPreparation) -> None:
    """A CompactionError when ``summary`` is no shorter than what it would stand for: such a
    compaction would leave the context larger than before. A compaction of nothing (asked for
    by hand where everything is kept, as pi makes it) carries the summary before it over."""
    if not preparation.messages_to_summarize and not preparation.turn_prefix_messages:
        return
    replaced = estimate_messages_tokens(
        [*preparation.messages_to_summarize, *preparation.turn_prefix_messages]
    )
    if preparation.previous_summary:
        replaced += estimate_tokens(UserMessage(content=preparation.previous_summary))
    size = estimate_tokens(UserMessage(content=summary))
    if size >= replaced:
        raise CompactionError(
            "no_gain",
            f"the summary (about {size:,} tokens) is no shorter than the messages it would"
            f" replace (about {replaced:,} tokens); nothing was written",
        )


async def compact(
    session: Session,
    model: Model,
    stream_fn: StreamFn,
    *,
    instructions: str | None = None,
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
    offload: Offload = inline,
    manual: bool = False,
) -> CompactionResult:
    """Summarise the older part of the session's current branch and append a compaction entry
    (summary, firstKeptEntryId, tokensBefore, details {readFiles, modifiedFiles}, usage). The
    old entries stay in the tree. Raises CompactionError, with nothing written, when there is
    nothing to compact, the summariser fails or is aborted, or the leaf moved meanwhile.
    ``offload`` runs the session's reads and the write (e.g. on worker threads). Both token
    settings are fitted to the model's window (``fit_to_window``). ``manual``: asked for by
    hand (pi's /compact), made even where the whole branch is kept (``prepare_compaction``)."""
    keep_recent_tokens, reserve_tokens = fit_to_window(
        model.context_window, keep_recent_tokens, reserve_tokens
    )

    def prepare() -> tuple[str | None, CompactionPreparation]:
        leaf_id = session.leaf_id
        path = session.get_branch(leaf_id) if leaf_id is not None else []
        context = session.build_context() if path else None
        messages = context.messages if context is not None else None
        return leaf_id, prepare_compaction(path, keep_recent_tokens, messages, manual=manual)

    leaf_id, preparation = await offload(prepare)
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
    details = preparation.file_ops.details()

    def write() -> tuple[str, int]:
        check_shorter(completion.text, preparation)  # estimates walk every message: offloaded
        if session.leaf_id != leaf_id:
            raise CompactionError(
                "conflict", "the session changed while it was being compacted; nothing was written"
            )
        entry_id = session.append_compaction(
            completion.text,
            preparation.first_kept_entry_id,
            preparation.tokens_before,
            details=details,
            usage=completion.usage,
        )
        return entry_id, compacted_tokens(session.build_context().messages)

    entry_id, tokens_after = await offload(write)
    warnings = list(completion.warnings)
    if not preparation.messages_to_summarize and not preparation.turn_prefix_messages:
        # Asked for by hand where everything is kept (as pi makes it): the context grew by the
        # summary, and the answer's two numbers alone read as a compaction gone wrong.
        kept = (
            f"the recent part compaction keeps verbatim (about {keep_recent_tokens:,} tokens,"
            " rounded up to whole messages)"
            if keep_recent_tokens > 0
            else "its newest message, which compaction always keeps verbatim"
        )
        warnings.append(
            f"nothing was summarised: the whole branch (about {preparation.tokens_before:,}"
            f" tokens) is in {kept}, so the context now carries a summary on top of the same"
            f" messages (about {tokens_after:,} tokens); compacting frees room once the"
            " branch is longer than that"
        )
    return CompactionResult(
        entry_id=entry_id,
        summary=completion.text,
        first_kept_entry_id=preparation.first_kept_entry_id,
        tokens_before=preparation.tokens_before,
        tokens_after=tokens_after,
        details=details,
        usage=completion.usage,
        is_split_turn=preparation.is_split_turn,
        warnings=warnings,
    )
