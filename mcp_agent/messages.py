"""Content blocks, messages, usage and models: the seed's "types and messages", in pi's JSON.

Messages are told apart by ``role``. The roles we know are registered here; an application adds
its own message type with :func:`register_message_type` and teaches :func:`convert_to_llm_message`
how to show it to a model with ``@convert_to_llm_message.register``, without editing this module.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    Discriminator,
    Field,
    PlainSerializer,
    PlainValidator,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

from mcp_agent.wire import (
    FROM_FILE,
    UnreadTime,
    WireModel,
    describe_validation_error,
    json_kind,
)


def now_ms() -> int:
    return int(time.time() * 1000)


class ThinkingLevel(StrEnum):
    OFF = "off"
    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"
    MAX = "max"


class ToolExecutionMode(StrEnum):
    SEQUENTIAL = "sequential"
    PARALLEL = "parallel"


class QueueMode(StrEnum):
    ALL = "all"
    ONE_AT_A_TIME = "one-at-a-time"


class StopReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_USE = "toolUse"
    ERROR = "error"
    ABORTED = "aborted"


# --- content blocks ---------------------------------------------------------------------------


class TextContent(WireModel):
    type: Literal["text"] = "text"
    text: str


class ImageContent(WireModel):
    type: Literal["image"] = "image"
    data: str
    mime_type: str


class ThinkingContent(WireModel):
    type: Literal["thinking"] = "thinking"
    thinking: str


class ToolCall(WireModel):
    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # The raw argument text while it streams in; never stored.
    partial_json: str | None = Field(default=None, exclude=True)


class OtherContent(WireModel):
    """A block of a type this project does not know (a newer pi's): kept as it is, every
    field with it, as pi's loader keeps it. It has no text and no model is sent it."""

    type: str


def _block_kind(known: frozenset[str]) -> Discriminator:
    def kind(block: Any) -> str | None:
        found = block.get("type") if isinstance(block, Mapping) else getattr(block, "type", None)
        if not isinstance(found, str) or not found:
            return None  # no type: refused, saying so
        return found if found in known else "other"

    return Discriminator(
        kind,
        custom_error_type="block_type",
        custom_error_message=f"a content block needs a type (one of {', '.join(sorted(known))})",
    )


_USER_BLOCKS = frozenset({"text", "image"})
_ASSISTANT_BLOCKS = frozenset({"text", "thinking", "toolCall"})
_ANY_BLOCKS = _USER_BLOCKS | _ASSISTANT_BLOCKS
_TEXT = Annotated[TextContent, Tag("text")]
_IMAGE = Annotated[ImageContent, Tag("image")]
_THINKING = Annotated[ThinkingContent, Tag("thinking")]
_TOOL_CALL = Annotated[ToolCall, Tag("toolCall")]
_OTHER = Annotated[OtherContent, Tag("other")]
UserContent = Annotated[_TEXT | _IMAGE | _OTHER, _block_kind(_USER_BLOCKS)]
AssistantContent = Annotated[
    _TEXT | _THINKING | _TOOL_CALL | _OTHER, _block_kind(_ASSISTANT_BLOCKS)
]
Content = Annotated[_TEXT | _IMAGE | _THINKING | _TOOL_CALL | _OTHER, _block_kind(_ANY_BLOCKS)]


# --- usage and models -------------------------------------------------------------------------


class UsageCost(WireModel):
    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    total: float = 0.0


class Usage(WireModel):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: UsageCost = Field(default_factory=UsageCost)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            total_tokens=self.total_tokens + other.total_tokens,
            cost=UsageCost(
                input=self.cost.input + other.cost.input,
                output=self.cost.output + other.cost.output,
                cache_read=self.cost.cache_read + other.cost.cache_read,
                cache_write=self.cost.cache_write + other.cost.cache_write,
                total=self.cost.total + other.cost.total,
            ),
        )


class ModelCost(WireModel):
    """Prices in dollars per million tokens."""

    input: float = Field(default=0.0, ge=0)
    output: float = Field(default=0.0, ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)


class Model(WireModel):
    id: str
    name: str = ""
    api: str = "openai-completions"
    provider: str = "openai"
    base_url: str = ""
    reasoning: bool = False
    input: list[str] = Field(default_factory=lambda: ["text"])
    cost: ModelCost = Field(default_factory=ModelCost)
    context_window: int = Field(default=128_000, gt=0)
    max_tokens: int = Field(default=16_384, gt=0)

    @property
    def ref(self) -> str:
        """The registry name, ``provider:model-id``."""
        return f"{self.provider}:{self.id}"


def calculate_cost(model: Model, usage: Usage) -> UsageCost:
    """The cost of ``usage`` at ``model``'s prices; also stored on ``usage``."""
    per_token = 1 / 1_000_000
    cost = UsageCost(
        input=usage.input * model.cost.input * per_token,
        output=usage.output * model.cost.output * per_token,
        cache_read=usage.cache_read * model.cost.cache_read * per_token,
        cache_write=usage.cache_write * model.cost.cache_write * per_token,
    )
    cost.total = cost.input + cost.output + cost.cache_read + cost.cache_write
    usage.cost = cost
    return cost


# --- messages ---------------------------------------------------------------------------------


class BaseMessage(WireModel):
    role: str
    timestamp: int = Field(default_factory=now_ms)


class UserMessage(BaseMessage):
    role: Literal["user"] = "user"
    content: str | list[UserContent]

    @property
    def text(self) -> str:
        return content_text(self.content)


class AssistantMessage(BaseMessage):
    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent] = Field(default_factory=list)
    api: str = ""
    provider: str = ""
    model: str = ""
    usage: Usage = Field(default_factory=Usage)
    # A reason a newer pi may add is kept as it is (pi's loader takes any).
    stop_reason: StopReason | str = StopReason.STOP
    error_message: str | None = None

    @property
    def text(self) -> str:
        return content_text(self.content)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [block for block in self.content if isinstance(block, ToolCall)]

    @property
    def failure(self) -> str | None:
        """Why the answer failed, in one phrase ("aborted: terminated"), or None: the stop
        reason said once, however the message spells it (ours write "aborted: …"; a session
        of another program may say "Aborted: …")."""
        if self.stop_reason not in (StopReason.ERROR, StopReason.ABORTED):
            return None
        stop = str(self.stop_reason)
        why = (self.error_message or "").strip()
        if why.lower() == stop or why.lower().startswith(stop + ":"):
            why = why[len(stop) + 1 :].strip()
        return f"{stop}: {why or 'no reason given'}"


class ToolResultMessage(BaseMessage):
    role: Literal["toolResult"] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: list[UserContent] = Field(default_factory=list)
    details: Any = None
    usage: Usage | None = None
    added_tool_names: list[str] | None = None
    is_error: bool = False

    @property
    def text(self) -> str:
        return content_text(self.content)


class BashExecutionMessage(BaseMessage):
    role: Literal["bashExecution"] = "bashExecution"
    command: str
    output: str
    exit_code: int | None = None
    cancelled: bool = False
    truncated: bool = False
    full_output_path: str | None = None
    exclude_from_context: bool | None = None


class CustomMessage(BaseMessage):
    role: Literal["custom"] = "custom"
    custom_type: str
    content: str | list[UserContent]
    display: bool | None = None  # missing, as pi reads it: not shown
    details: Any = None


class BranchSummaryMessage(BaseMessage):
    role: Literal["branchSummary"] = "branchSummary"
    summary: str
    from_id: str


class CompactionSummaryMessage(BaseMessage):
    role: Literal["compactionSummary"] = "compactionSummary"
    summary: str
    tokens_before: int


# What a model API accepts; everything else is converted first.
Message = UserMessage | AssistantMessage | ToolResultMessage

# (pi's v2 "hookMessage" is v3's "custom": renamed where a v2 file is migrated, sessions.pi;
# in a v3 file it is a role nobody registered, as pi reads it.)
_MESSAGE_TYPES: dict[str, type[BaseMessage]] = {}


def known_role(role: str) -> bool:
    return role in _MESSAGE_TYPES


def register_message_type(cls: type[BaseMessage]) -> type[BaseMessage]:
    """Teach :func:`parse_message` a new role (usable as a class decorator)."""
    role_field = cls.model_fields["role"]
    role = role_field.default
    if not isinstance(role, str) or not role:
        raise TypeError(f"{cls.__name__}.role needs a string default naming its role")
    _MESSAGE_TYPES[role] = cls
    return cls


for _cls in (
    UserMessage,
    AssistantMessage,
    ToolResultMessage,
    BashExecutionMessage,
    CustomMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
):
    register_message_type(_cls)


class MessageParseError(ValueError):
    """Bad message or content JSON; the text names the field path of each problem."""


def parse_message(data: Mapping[str, Any] | BaseMessage, path: str = "message") -> BaseMessage:
    """Parse one message from its JSON object, choosing the type by ``role``."""
    if isinstance(data, BaseMessage):
        return data
    if not isinstance(data, Mapping):
        where = f"{path}: " if path else ""  # "": the caller names the field
        raise MessageParseError(f"{where}expected a JSON object, not {json_kind(data)}")
    role_path = f"{path}.role" if path else "role"
    role = data.get("role")
    if role is None:
        raise MessageParseError(f"{role_path}: field required")
    if not isinstance(role, str) or not role:
        known = ", ".join(sorted(_MESSAGE_TYPES))
        raise MessageParseError(f"{role_path}: expected a role such as {known}, got {role!r}")
    # A role nobody registered (an app's own, as pi's CustomAgentMessages add, or a newer
    # pi's) is kept as it is, every field with it, and never sent to a model, as pi does.
    cls = _MESSAGE_TYPES.get(role, BaseMessage)
    try:
        return cls.model_validate(data)
    except ValidationError as error:
        raise MessageParseError(describe_validation_error(error, path, data)) from None


def _validate_agent_message(value: Any, info: ValidationInfo) -> BaseMessage:
    try:
        message = parse_message(value, path="")
    except MessageParseError as error:
        raise PydanticCustomError("agent_message", "{detail}", {"detail": str(error)}) from None
    if info.context is FROM_FILE and isinstance(value, Mapping) and "timestamp" not in value:
        message.__dict__["timestamp"] = UnreadTime(message.timestamp)
    return message


def _serialize_agent_message(value: BaseMessage) -> dict[str, Any]:
    return value.model_dump(mode="json", by_alias=True)


# Use in pydantic fields that hold any AgentMessage (session entries, retained tails).
AgentMessage = Annotated[
    BaseMessage,
    PlainValidator(_validate_agent_message),
    PlainSerializer(_serialize_agent_message),
]

AnyBlock = TextContent | ImageContent | ThinkingContent | ToolCall | OtherContent


@functools.cache
def _content_adapter() -> TypeAdapter[AnyBlock]:
    """Made at the first block parsed, not at import: a server's start parses none."""
    return TypeAdapter(Content)


def parse_content(data: Any, path: str = "content") -> AnyBlock:
    try:
        return _content_adapter().validate_python(data)
    except ValidationError as error:
        raise MessageParseError(describe_validation_error(error, path, data)) from None


def content_text(content: str | Iterable[Any]) -> str:
    """The text of a content string or list, text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(block.text for block in content if isinstance(block, TextContent))


def answer_chars(message: AssistantMessage) -> int:
    """The characters of an answer: its text, thinking, and tool calls (name and compact JSON
    arguments, or their text while they stream): what bounds a streamed answer (the token
    estimate counts an answer as pi does, ``compaction.tokens``)."""
    chars = 0
    for block in message.content:
        if isinstance(block, TextContent):
            chars += len(block.text)
        elif isinstance(block, ThinkingContent):
            chars += len(block.thinking)
        elif isinstance(block, ToolCall):
            arguments = json.dumps(block.arguments, separators=(",", ":"), ensure_ascii=False)
            # A call still streaming holds its arguments as text, not yet parsed.
            chars += len(block.name) + len(arguments) + len(block.partial_json or "")
    return chars


def text_blocks(content: str | list[Any]) -> list[Any]:
    return [TextContent(text=content)] if isinstance(content, str) else list(content)


# --- what the model sees ----------------------------------------------------------------------

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"


def bash_execution_to_text(message: BashExecutionMessage) -> str:
    text = f"Ran `{message.command}`\n"
    text += f"```\n{message.output}\n```" if message.output else "(no output)"
    if message.cancelled:
        text += "\n\n(command cancelled)"
    elif message.exit_code not in (None, 0):
        text += f"\n\nCommand exited with code {message.exit_code}"
    if message.truncated and message.full_output_path:
        text += f"\n\n[Output truncated. Full output: {message.full_output_path}]"
    return text


@functools.singledispatch
def convert_to_llm_message(message: BaseMessage) -> Message | None:
    """One agent message as a model sees it, or None to leave it out.

    Register new message classes with ``@convert_to_llm_message.register``. A message type
    nobody registered is left out rather than sent in a shape the model API rejects.
    """
    return None


@convert_to_llm_message.register
def _(message: UserMessage) -> Message | None:
    return message


@convert_to_llm_message.register
def _(message: AssistantMessage) -> Message | None:
    return message


@convert_to_llm_message.register
def _(message: ToolResultMessage) -> Message | None:
    return message


@convert_to_llm_message.register
def _(message: BashExecutionMessage) -> Message | None:
    if message.exclude_from_context:
        return None
    text = bash_execution_to_text(message)
    made = UserMessage(content=[TextContent(text=text)], timestamp=message.timestamp)
    return timed(made, message.timestamp)


@convert_to_llm_message.register
def _(message: CustomMessage) -> Message | None:
    made = UserMessage(content=text_blocks(message.content), timestamp=message.timestamp)
    return timed(made, message.timestamp)


@convert_to_llm_message.register
def _(message: CompactionSummaryMessage) -> Message | None:
    text = COMPACTION_SUMMARY_PREFIX + message.summary + COMPACTION_SUMMARY_SUFFIX
    made = UserMessage(content=[TextContent(text=text)], timestamp=message.timestamp)
    return timed(made, message.timestamp)


@convert_to_llm_message.register
def _(message: BranchSummaryMessage) -> Message | None:
    text = BRANCH_SUMMARY_PREFIX + message.summary + BRANCH_SUMMARY_SUFFIX
    made = UserMessage(content=[TextContent(text=text)], timestamp=message.timestamp)
    return timed(made, message.timestamp)


_Made = TypeVar("_Made", bound="BaseMessage")


def timed(message: _Made, timestamp: int) -> _Made:
    """``message`` with ``timestamp`` as given: pydantic makes a marked time (``UnreadTime``,
    ``NaNTime``) a plain int, which would then be written where pi writes none or null."""
    if type(timestamp) is not int:
        message.__dict__["timestamp"] = timestamp
    return message


def convert_to_llm(messages: Iterable[BaseMessage]) -> list[Message]:
    """The agent's messages as a model API accepts them (seed: convertToLlm)."""
    converted = (convert_to_llm_message(m) for m in messages)
    return [m for m in converted if m is not None]
