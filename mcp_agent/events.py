"""Events: the seam between the loop and everything that watches it.

Two families: ``AssistantMessageEvent`` comes out of a provider while a model answers (pi-ai's
stream events, each carrying the partial message so far); ``AgentEvent`` comes out of the loop
(pi's agent events) and wraps the former in ``MessageUpdateEvent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

from mcp_agent.messages import AssistantMessage, BaseMessage, TextContent, ToolResultMessage
from mcp_agent.wire import one_line

# --- provider stream events -------------------------------------------------------------------


@dataclass
class StreamEvent:
    type: ClassVar[str]
    partial: AssistantMessage


@dataclass
class StartEvent(StreamEvent):
    type: ClassVar[str] = "start"


@dataclass
class TextStartEvent(StreamEvent):
    type: ClassVar[str] = "text_start"
    content_index: int = 0


@dataclass
class TextDeltaEvent(StreamEvent):
    type: ClassVar[str] = "text_delta"
    content_index: int = 0
    delta: str = ""


@dataclass
class TextEndEvent(StreamEvent):
    type: ClassVar[str] = "text_end"
    content_index: int = 0
    content: str = ""


@dataclass
class ThinkingStartEvent(StreamEvent):
    type: ClassVar[str] = "thinking_start"
    content_index: int = 0


@dataclass
class ThinkingDeltaEvent(StreamEvent):
    type: ClassVar[str] = "thinking_delta"
    content_index: int = 0
    delta: str = ""


@dataclass
class ThinkingEndEvent(StreamEvent):
    type: ClassVar[str] = "thinking_end"
    content_index: int = 0
    content: str = ""


@dataclass
class ToolCallStartEvent(StreamEvent):
    type: ClassVar[str] = "toolcall_start"
    content_index: int = 0


@dataclass
class ToolCallDeltaEvent(StreamEvent):
    type: ClassVar[str] = "toolcall_delta"
    content_index: int = 0
    delta: str = ""


@dataclass
class ToolCallEndEvent(StreamEvent):
    type: ClassVar[str] = "toolcall_end"
    content_index: int = 0


@dataclass
class DoneEvent(StreamEvent):
    """The last event of a successful stream; ``partial`` is the final message."""

    type: ClassVar[str] = "done"

    @property
    def message(self) -> AssistantMessage:
        return self.partial


@dataclass
class ErrorEvent(StreamEvent):
    """The last event of a failed or aborted stream; ``partial`` is the final message,
    with stop reason error or aborted and an error message."""

    type: ClassVar[str] = "error"

    @property
    def message(self) -> AssistantMessage:
        return self.partial


AssistantMessageEvent = (
    StartEvent
    | TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | DoneEvent
    | ErrorEvent
)


# --- agent events -----------------------------------------------------------------------------


@dataclass
class AgentEvent:
    type: ClassVar[str]


@dataclass
class AgentStartEvent(AgentEvent):
    type: ClassVar[str] = "agent_start"


class AgentEndReason(StrEnum):
    """Why a run ended (``AgentEndEvent.reason``)."""

    COMPLETED = "completed"  # the model answered and nothing was queued
    ERROR = "error"  # the model call failed (the last message has stop reason error)
    ABORTED = "aborted"  # the run was aborted (the last message has stop reason aborted)
    TERMINATED = "terminated"  # every tool result of the last batch asked to terminate
    MAX_TURNS = "max_turns"  # the turn limit was reached with work left
    STOPPED = "stopped"  # should_stop_after_turn said so


@dataclass
class AgentEndEvent(AgentEvent):
    type: ClassVar[str] = "agent_end"
    messages: list[BaseMessage] = field(default_factory=list)
    reason: AgentEndReason = AgentEndReason.COMPLETED


@dataclass
class TurnStartEvent(AgentEvent):
    type: ClassVar[str] = "turn_start"


@dataclass
class TurnEndEvent(AgentEvent):
    type: ClassVar[str] = "turn_end"
    message: BaseMessage
    tool_results: list[ToolResultMessage] = field(default_factory=list)


@dataclass
class MessageStartEvent(AgentEvent):
    type: ClassVar[str] = "message_start"
    message: BaseMessage


@dataclass
class MessageUpdateEvent(AgentEvent):
    type: ClassVar[str] = "message_update"
    message: BaseMessage
    assistant_message_event: AssistantMessageEvent


@dataclass
class MessageEndEvent(AgentEvent):
    type: ClassVar[str] = "message_end"
    message: BaseMessage


@dataclass
class ToolExecutionStartEvent(AgentEvent):
    type: ClassVar[str] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: Any


@dataclass
class ToolExecutionUpdateEvent(AgentEvent):
    type: ClassVar[str] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    args: Any
    partial_result: Any


@dataclass
class ToolExecutionEndEvent(AgentEvent):
    type: ClassVar[str] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool


@dataclass
class AutoRetryStartEvent(AgentEvent):
    """A run ended on a passing model error; after ``delay`` seconds it runs again."""

    type: ClassVar[str] = "auto_retry_start"
    attempt: int = 1
    max_attempts: int = 1
    delay: float = 0.0
    error_message: str = ""


@dataclass
class AutoRetryEndEvent(AgentEvent):
    """Retrying is over: it worked, or ``final_error`` is why not."""

    type: ClassVar[str] = "auto_retry_end"
    success: bool = False
    attempt: int = 1
    final_error: str | None = None


@dataclass
class AutoCompactionStartEvent(AgentEvent):
    """The agent compacts its session: the context passed the threshold after a run, or the
    model refused it as too long (``overflow``; the request is retried once it is compacted).
    pi calls these ``compaction_start`` / ``compaction_end`` in its newer releases."""

    type: ClassVar[str] = "auto_compaction_start"
    reason: Literal["threshold", "overflow"] = "threshold"


@dataclass
class AutoCompactionEndEvent(AgentEvent):
    """The compaction is over: ``result`` (a ``compaction.CompactionResult``) when it was
    written, else ``error_message`` says why not (``aborted``: it was abandoned)."""

    type: ClassVar[str] = "auto_compaction_end"
    reason: Literal["threshold", "overflow"] = "threshold"
    result: Any = None
    aborted: bool = False
    will_retry: bool = False
    error_message: str | None = None


def progress_text(partial: Any) -> str:
    """The text of a tool's progress update (an ``AgentToolResult``, or whatever the tool
    passed): its first text block, empty when it has none."""
    for block in getattr(partial, "content", None) or []:
        if isinstance(block, TextContent) and block.text.strip():
            return block.text
    return ""


def describe_event(event: AgentEvent) -> str:
    """A one-line, human-readable account of an event (for progress messages and logs)."""
    match event:
        case AgentStartEvent():
            return "agent started"
        case AgentEndEvent(messages=messages, reason=reason):
            why = "" if reason == AgentEndReason.COMPLETED else f", {reason.replace('_', ' ')}"
            return f"agent finished ({len(messages)} new messages{why})"
        case TurnStartEvent():
            return "turn started"
        case TurnEndEvent(tool_results=results):
            return f"turn finished ({len(results)} tool results)"
        case MessageStartEvent(message=message):
            return f"{message.role} message started"
        case MessageUpdateEvent(assistant_message_event=inner):
            # A chunk is as long as the API makes it (a whole answer, a tool call's
            # arguments), and it is the model's text: one line, cut, like the rest.
            delta = one_line(getattr(inner, "delta", ""), 200)
            return f"{inner.type}: {delta}" if delta else inner.type
        case MessageEndEvent(message=message):
            text = getattr(message, "text", "")
            return (
                f"{message.role}: {one_line(text, 200)}"
                if text
                else f"{message.role} message finished"
            )
        case ToolExecutionStartEvent(tool_name=name, args=args):
            return f"running tool {name}({one_line(args, 200)})"
        case ToolExecutionUpdateEvent(tool_name=name, partial_result=partial):
            # What the tool said (a downstream server's progress message, a sub-agent's own
            # events): without it a client watching a nested run sees only that time passes.
            said = progress_text(partial)
            return (
                f"tool {name}: {one_line(said, 200)}" if said else f"tool {name} reported progress"
            )
        case ToolExecutionEndEvent(tool_name=name, is_error=is_error):
            return f"tool {name} {'failed' if is_error else 'finished'}"
        case AutoRetryStartEvent(attempt=attempt, max_attempts=most, delay=delay):
            why = one_line(event.error_message, 120)
            return f"model error, retry {attempt}/{most} in {delay:g} s: {why}"
        case AutoRetryEndEvent(success=True, attempt=attempt):
            return f"retry {attempt} worked"
        case AutoRetryEndEvent(attempt=attempt, final_error=error):
            return f"gave up retrying after {attempt}: {one_line(error or 'failed', 120)}"
        case AutoCompactionStartEvent(reason="overflow"):
            return "the model found the context too long: compacting the session"
        case AutoCompactionStartEvent():
            return "the context passed the compaction threshold: compacting the session"
        case AutoCompactionEndEvent(result=result) if result is not None:
            retry = "; asking the model again" if event.will_retry else ""
            warned = "".join(f"; warning: {w}" for w in getattr(result, "warnings", ()))
            return (
                f"compacted: about {result.tokens_before:,} → {result.tokens_after:,} tokens"
                f" (entry {result.entry_id}){warned}{retry}"
            )
        case AutoCompactionEndEvent(aborted=True):
            return "compaction abandoned"
        case AutoCompactionEndEvent(error_message=error):
            return f"compaction failed: {one_line(error or 'no reason given', 160)}"
    return event.type
