"""Tools the agent can call: AgentTool, AgentToolResult, and argument validation by JSON Schema."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_agent.abort import AbortSignal
from mcp_agent.messages import ImageContent, TextContent, ToolExecutionMode, Usage


@dataclass
class AgentToolResult:
    content: list[TextContent | ImageContent] = field(default_factory=list)
    details: Any = None
    usage: Usage | None = None
    added_tool_names: list[str] | None = None
    terminate: bool | None = None
    is_error: bool = False

    @classmethod
    def text(cls, text: str, **kwargs: Any) -> AgentToolResult:
        return cls(content=[TextContent(text=text)], **kwargs)

    @classmethod
    def error(cls, text: str, **kwargs: Any) -> AgentToolResult:
        return cls(content=[TextContent(text=text)], is_error=True, **kwargs)


ToolUpdateCallback = Callable[[AgentToolResult], None]


class ToolExecute(Protocol):
    def __call__(
        self,
        tool_call_id: str,
        params: dict[str, Any],
        signal: AbortSignal,
        on_update: ToolUpdateCallback,
        context: Any,
    ) -> Awaitable[AgentToolResult]: ...


PrepareArguments = Callable[[Any], Any]


@dataclass
class AgentTool:
    name: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecute
    label: str = ""
    prepare_arguments: PrepareArguments | None = None
    execution_mode: ToolExecutionMode | None = None

    def __post_init__(self) -> None:
        if not self.label:
            self.label = self.name

    def spec(self) -> dict[str, Any]:
        """What a model API is told about this tool."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


class ToolArgumentsError(ValueError):
    """Arguments that do not match a tool's JSON Schema; the text says where and why."""


_validators: dict[int, tuple[dict[str, Any], Any]] = {}


def _with_nulls(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with null for each required top-level property it leaves out that may be
    null. A schema in OpenAI's strict form lists every property as required, the optional
    ones nullable (null: the default); a model not in strict mode leaves those out."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return arguments
    missing = [
        name
        for name in schema.get("required", [])
        if name not in arguments and _allows_null(properties.get(name))
    ]
    return {**arguments, **dict.fromkeys(missing)} if missing else arguments


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_allows_null(variant) for variant in schema.get("anyOf", []))


def validate_tool_arguments(tool: AgentTool, arguments: Any) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema; return them (with nulls for the nullable
    required properties left out, see ``_with_nulls``) or raise ToolArgumentsError."""
    if not isinstance(arguments, dict):
        raise ToolArgumentsError(
            f"arguments for {tool.name} must be a JSON object, got {type(arguments).__name__}"
        )
    # Imported here: jsonschema takes a noticeable share of the server's start-up time.
    import jsonschema
    from jsonschema.exceptions import best_match

    cached = _validators.get(id(tool.parameters))
    if cached is None or cached[0] is not tool.parameters:
        cls = jsonschema.validators.validator_for(
            tool.parameters, default=jsonschema.Draft202012Validator
        )
        cached = (tool.parameters, cls(tool.parameters))
        _validators[id(tool.parameters)] = cached
    validator = cached[1]
    filled: dict[str, Any] = _with_nulls(tool.parameters, arguments)
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        problems = []
        for error in errors[:5]:
            error = best_match([error]) or error
            where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
            problems.append(f"{where}: {error.message}")
        raise ToolArgumentsError(f"invalid arguments for {tool.name}: " + "; ".join(problems))
    return filled
