"""What a client may append with ``session_append``: one closed object per entry kind, so the
tool's input schema suits OpenAI's strict mode (no open objects). Keys inside an entry are
pi's (camelCase). Free-form JSON (custom data, details) travels as JSON text; anything pi's
v3 form allows beyond these (images, tool calls, tool results) goes in ``{"type": "pi",
"json": "<the entry as JSON>"}``."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from mcp_agent.messages import ThinkingLevel, known_role
from mcp_agent.wire import loads_json

KIND = "the kind of entry"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)
    # Fields given as JSON text and stored as the JSON they hold.
    json_text_fields: ClassVar[tuple[str, ...]] = ()

    def to_partial(self) -> dict[str, Any]:
        """The entry in pi's v3 form, without id, parentId and timestamp."""
        partial = self.model_dump(by_alias=True, exclude_none=True)
        for name in self.json_text_fields:
            if name in partial:
                partial[name] = _json_text(partial[name], name)
        return partial


def _json_text(text: str, name: str) -> Any:
    try:
        return loads_json(text)
    except ValueError as error:
        raise ToolError(f"entry.{name} must be JSON text (e.g. '{{\"k\": 1}}'): {error}") from None


class MessageInput(_Input):
    """A message with plain text content."""

    type: Literal["message"] = Field(description=KIND)
    role: Literal["user", "assistant"] = Field(description="who says it")
    content: str = Field(description="the message's text (content blocks, such as images: type pi)")

    def to_partial(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role}
        if self.role == "user":
            message["content"] = self.content
        else:
            message["content"] = [{"type": "text", "text": self.content}]
        return {"type": "message", "message": message}


class LabelInput(_Input):
    """A label on an earlier entry (null or empty: remove its label)."""

    type: Literal["label"] = Field(description=KIND)
    target_id: str = Field(description="the entry to label")
    label: str | None = Field(description="the label; null or empty removes it")


class SessionInfoInput(_Input):
    """The session's display name (null or empty: clear it)."""

    type: Literal["session_info"] = Field(description=KIND)
    name: str | None = Field(description="the new name; null or empty clears it")


class CustomInput(_Input):
    """Data of your own, not sent to the model."""

    type: Literal["custom"] = Field(description=KIND)
    custom_type: str = Field(description="what kind of data, e.g. 'note'")
    data: str | None = Field(description="the data as JSON text, e.g. '{\"k\": 1}'; null: none")
    json_text_fields = ("data",)


class CustomMessageInput(_Input):
    """A message of your own that the model does see (as a user message)."""

    type: Literal["custom_message"] = Field(description=KIND)
    custom_type: str = Field(description="what kind of message, e.g. 'reminder'")
    content: str = Field(description="its text")
    display: bool = Field(default=True, strict=True, description="show it in the session's views")
    details: str | None = Field(
        default=None, description="more data as JSON text, not sent to the model; null: none"
    )
    json_text_fields = ("details",)


class ModelChangeInput(_Input):
    """The model the session continues with."""

    type: Literal["model_change"] = Field(description=KIND)
    provider: str = Field(description="e.g. openai, anthropic")
    model_id: str = Field(description="the provider's model id, e.g. gpt-4o-mini")


class ThinkingLevelChangeInput(_Input):
    """How much the model thinks from here on."""

    type: Literal["thinking_level_change"] = Field(description=KIND)
    thinking_level: ThinkingLevel = Field(
        description="how much: off, minimal, low, medium, high, xhigh or max"
    )


class ActiveToolsChangeInput(_Input):
    """The tools the model may use from here on, by name."""

    type: Literal["active_tools_change"] = Field(description=KIND)
    active_tool_names: list[str] = Field(description="the tools' names; empty: none")


class PiEntryInput(_Input):
    """Any appendable entry in pi's v3 form, as JSON text: for what the other kinds do not
    cover (content with images, assistant tool calls, tool results)."""

    type: Literal["pi"] = Field(description=KIND)
    json_text: str = Field(
        alias="json",
        description=(
            'the entry without id/parentId/timestamp, e.g. \'{"type":"message","message":'
            '{"role":"user","content":[{"type":"text","text":"hi"}]}}\''
        ),
    )

    def to_partial(self) -> dict[str, Any]:
        partial = _json_text(self.json_text, "json")
        if not isinstance(partial, dict):
            raise ToolError("entry.json must be a JSON object: one pi v3 entry")
        message = partial.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if partial.get("type") == "message" and isinstance(role, str) and not known_role(role):
            # A file may hold a role of its own app's (kept as it is); appended by hand it is
            # more likely a slip, and such a message is never sent to a model.
            raise ToolError(
                f"entry.json: message.role {role!r} is not a role of pi's: use user, assistant,"
                " toolResult, bashExecution, custom, branchSummary or compactionSummary"
            )
        return partial


EntryInput = Annotated[
    MessageInput
    | LabelInput
    | SessionInfoInput
    | CustomInput
    | CustomMessageInput
    | ModelChangeInput
    | ThinkingLevelChangeInput
    | ActiveToolsChangeInput
    | PiEntryInput,
    Field(discriminator="type"),
]
