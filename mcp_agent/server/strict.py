"""The tools as a model meets them: input schemas in OpenAI's strict form, scalar arguments
held to their JSON type (no ``"5"`` for an integer), and argument errors as one line a model
can act on.

Strict form also has every ``$defs`` reference inlined (openai-agents converts a schema with
references only when it can check their targets in place).

Strict form (what openai-agents' ``ensure_strict_json_schema`` and pydantic-ai's OpenAI
transformer accept as it is): every object closed (``additionalProperties: false``), every
property listed as required (an optional one is nullable where null means its default), no
``default`` keyword (the default is said in the description instead), ``anyOf`` rather than
``oneOf``. The server still accepts a call that leaves an optional argument out.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, get_args

import mcp.server.mcpserver.server as sdk_server
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import (
    ResourceNotFoundError,
    ToolError,
    UnexpectedToolError,
)
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import X_MCP_HEADER_KEY
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    GetPromptResult,
    Icon,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import AnyUrl, BaseModel, ValidationError
from pydantic_core import to_json

from mcp_agent.server.made_tools import made_tool
from mcp_agent.sessions.entries import clip_long
from mcp_agent.wire import json_kind

# Pydantic's wording of a type mismatch is fine; these read better to a model.
_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this object",
}
MAX_ERRORS = 3
# An error answer is read by a model, and hosts refuse long tool output: whatever a request
# sent (a megabyte of id), its error repeats at most the start of each value and stays short.
ERROR_CHARS = 4_000
ECHO_CHARS = 100
# The longest resource URI read or subscribed to (a session's are about 60 characters, an
# entry's adds its id): a longer one is refused before any lookup repeats it.
URI_CHARS = 4_096


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` in strict form (a copy); see the module's docstring."""
    result = _inline_definitions(copy.deepcopy(schema))
    for node in schema_nodes(result):
        _drop_title(node)
        if isinstance(node.get("description"), str):  # a model's docstring keeps its breaks
            node["description"] = " ".join(node["description"].split())
        if "oneOf" in node:
            node["anyOf"] = node.pop("oneOf")
        node.pop("discriminator", None)
        if "default" in node:
            default = node.pop("default")
            if default is not None:
                note = f"Default: {json.dumps(default, ensure_ascii=False)}."
                node["description"] = (
                    f"{node['description']}. {note}" if node.get("description") else note
                )
        properties = node.get("properties")
        if node.get("type") == "object" or isinstance(properties, dict):
            node["type"] = "object"
            node.setdefault("properties", {})
            node["required"] = list(node["properties"])
            if node.get("additionalProperties", False) is not False:
                raise ValueError(f"an open object cannot be made strict: {json.dumps(node)[:200]}")
            node["additionalProperties"] = False
    return result


def lean_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (a tool's output schema) without what costs a client's check and a model's
    reading and says nothing: pydantic's titles (the property's own name, capitalised), each
    ``$ref`` to its ``$defs`` (the definition in its place: a client's check looks a reference
    up each time it meets it, for every item of a list), and ``anyOf`` a type or null where
    ``type: [it, "null"]`` says the same (a simple type, or an object whose keywords apply to
    objects only: a check of ``anyOf`` tries the first and makes an error of it for each null).
    A copy; a recursive schema keeps its references."""
    try:
        result = _inline_definitions(copy.deepcopy(schema))
    except ValueError:
        result = copy.deepcopy(schema)
    for node in schema_nodes(result):
        _drop_title(node)
    for node in schema_nodes(result):
        variants = node.get("anyOf")
        if not (isinstance(variants, list) and len(variants) == 2 and _NULL in variants):
            continue
        other = variants[1 - variants.index(_NULL)]
        kind = other.get("type")
        if not isinstance(kind, str):
            continue
        if set(other) <= _SIMPLE_KEYWORDS or (kind == "object" and set(other) <= _OBJECT_KEYWORDS):
            del node["anyOf"]
            # The node's own description and default (the property's) stay.
            node.update({**other, **node}, type=[kind, "null"])
    return result


_NULL = {"type": "null"}
_SIMPLE_KEYWORDS = {"type", "items", "additionalProperties", "description"}
# Keywords that say nothing of a value that is not an object.
_OBJECT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "description"}


def _drop_title(node: dict[str, Any]) -> None:
    # A string: the keyword; a property named "title" maps to its schema.
    if isinstance(node.get("title"), str):
        del node["title"]


def schema_nodes(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every object in ``schema``, itself first; what a node holds is looked at only after
    the caller has seen it (so it may change the node as it goes)."""
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            yield node
            pending.extend(value for value in node.values() if isinstance(value, dict | list))


def _inline_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``$ref`` to its ``$defs`` replaced by the definition: openai-agents
    converts a schema with references only when it can check their targets in place."""
    definitions = schema.pop("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen:
                raise ValueError(f"a recursive schema ({name}) cannot be inlined")
            siblings = {key: value for key, value in node.items() if key != "$ref"}
            return {**resolve(copy.deepcopy(definitions[name]), (*seen, name)), **siblings}
        return {key: resolve(value, seen) for key, value in node.items()}

    resolved: dict[str, Any] = resolve(schema, ())
    return resolved


def argument_error(
    tool: str, error: ValidationError, properties: dict[str, Any], arguments: dict[str, Any]
) -> str:
    """One line: each wrong argument (up to a few), what was wrong, and what it should be (its
    description in the tool's input schema, whose ``properties`` are given; inside an entry,
    the field's)."""
    problems = []
    for detail in error.errors(include_url=False)[:MAX_ERRORS]:
        parts = [str(part) for part in detail["loc"]]
        kind, tagged = "", None
        given_arg = arguments.get(parts[0]) if parts else None
        # A tagged union (an entry by its type) puts the tag in the path: say it apart.
        if len(parts) > 1 and isinstance(given_arg, dict) and given_arg.get("type") == parts[1]:
            tagged = parts[1]
            kind = f" (for type {tagged!r})"
            del parts[1]
        where = ".".join(parts) or "arguments"
        about = _described(properties, parts, tagged)
        context = detail.get("ctx", {})
        if detail["type"] in _UNION_TAG:
            # pydantic's words ("unable to extract tag using discriminator 'type'") name its
            # machinery; the field that says the kind is what is missing or wrong.
            field = f"{where}.{str(context.get('discriminator', 'type')).strip(chr(39))}"
            if detail["type"] == "union_tag_not_found":
                what = f"{field} is required"
            else:
                kinds, got = context.get("expected_tags"), context.get("tag")
                what = f"{field} should be one of {kinds} (got {got!r})"
            problems.append(what + (f"; {where}: {about}" if about else ""))
            continue
        message = detail["msg"].removeprefix("Input ")
        if detail["type"] == "value_error":  # ours (tool_errors.GIVEN), said as it is
            message = str(context.get("error", message))
        what = _MESSAGES.get(detail["type"], message[:1].lower() + message[1:])
        given = detail.get("input")
        if detail["type"] not in ("missing", "extra_forbidden") and not isinstance(given, dict):
            what += f" (got {json.dumps(given, ensure_ascii=False, default=str)[:60]})"
        problems.append(f"{where}{kind} {what}" + (f"; {where}: {about}" if about else ""))
    more = len(error.errors()) - MAX_ERRORS
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{tool}: " + "; ".join(problems) + tail


_UNION_TAG = ("union_tag_not_found", "union_tag_invalid")


def _described(properties: dict[str, Any], parts: list[str], tagged: str | None) -> str | None:
    """The description the input schema gives the argument at ``parts`` (a field of an
    object argument: of its variant whose ``type`` is ``tagged``, or that has the field)."""
    node: Any = properties.get(parts[0]) if parts else None
    for part in parts[1:]:
        if not isinstance(node, dict):
            return None
        variants = node.get("anyOf")
        if isinstance(variants, list):
            node = next((v for v in variants if _has_field(v, part, tagged)), None)
            if node is None:
                return None
        node = node.get("properties", {}).get(part)
    description = node.get("description") if isinstance(node, dict) else None
    return description if isinstance(description, str) and description else None


def _has_field(variant: Any, field: str, tagged: str | None) -> bool:
    if not isinstance(variant, dict) or field not in variant.get("properties", {}):
        return False
    return tagged is None or variant["properties"].get("type", {}).get("const") == tagged


class ForModels(FuncMetadata):
    """The SDK's reading of a tool's arguments and making of its answer, as a model meets
    them.

    A text argument stays the text it was sent as. The SDK reads an argument given as the
    JSON text of an object or array as that object whenever the argument is not of type
    ``str`` alone (clients send objects so), and ``str | None`` is not: a branch summary a
    model wrote as JSON, or a name in brackets, was refused as "should be a valid string",
    though a string was sent. ``"null"`` for one is still null, as before.

    The text of an answer made from a model (what a host gives the model) is its structured
    content as compact JSON, as the reading tools' own text is: the SDK's is indented, 15 to
    60% longer. A tool that makes its CallToolResult itself made its text."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        texts = _text_arguments(self.arg_model)
        for key, value in data.items():
            if key in texts and isinstance(value, str) and parsed[key] is not None:
                parsed[key] = value
        return parsed

    def convert_result(self, result: Any) -> CallToolResult | InputRequiredResult:
        if (
            isinstance(result, BaseModel)
            and not isinstance(result, CallToolResult)
            and type(result) is self.output_model
            and self.output_schema is not None
            and not self.wrap_output
            and type(result).model_config.get("revalidate_instances", "never") == "never"
        ):
            # An instance of the output model itself: the SDK's check of it hands back the
            # same instance (pydantic does not check a model's instance again), and the
            # indented text it makes first is replaced below. Its dump as the SDK makes it,
            # without those two passes (a fifth of a session_append's own CPU in process).
            structured = result.model_dump(mode="json", by_alias=True)
            text = to_json(structured).decode()
            return CallToolResult(
                content=[TextContent(type="text", text=text)], structured_content=structured
            )
        converted = super().convert_result(result)
        made = isinstance(result, BaseModel) and not isinstance(result, CallToolResult)
        if made and isinstance(converted, CallToolResult) and converted.structured_content:
            text = to_json(converted.structured_content).decode()
            converted.content = [TextContent(type="text", text=text)]
        return converted


def for_models(metadata: FuncMetadata) -> ForModels:
    return ForModels(
        arg_model=metadata.arg_model,
        output_schema=metadata.output_schema,
        output_model=metadata.output_model,
        wrap_output=metadata.wrap_output,
    )


@functools.lru_cache(maxsize=256)  # one per tool definition, as made_tools keeps them
def _text_arguments(arg_model: type[ArgModelBase]) -> frozenset[str]:
    """The names (and aliases) of the arguments of type ``str | None``."""
    found: set[str] = set()
    for name, field in arg_model.model_fields.items():
        if set(get_args(field.annotation)) == {str, type(None)}:
            found.update(filter(None, (name, field.alias)))
    return frozenset(found)


_SWAPPING = threading.Lock()


@contextmanager
def _root_logging_left_alone() -> Iterator[None]:
    """The SDK's MCPServer, as it is made, gives the root logger rich's handler (unless it has
    one): it imports rich for it (30 to 70 ms of a server's start, measured, before its first
    answer), and draws each record over several lines (see ``cli.common.plain_logging``,
    which the command line sets up first, so the handler was made only to be dropped). Our
    server leaves the root logger as its caller set it up. One server is made at a time
    (a process may make them on several threads): two swaps interleaved would leave the SDK's
    function swapped for good."""
    with _SWAPPING:
        configure = sdk_server.configure_logging
        sdk_server.configure_logging = _leave_logging_alone
        try:
            yield
        finally:
            sdk_server.configure_logging = configure


def _leave_logging_alone(level: str = "INFO") -> None:
    pass


class SessionsServer(MCPServer):
    """The SDK's MCPServer whose tools are checked and explained as a model needs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with _root_logging_left_alone():
            super().__init__(*args, **kwargs)
        # Tool name -> (its input schema, whether it declares an Mcp-Param header).
        self._declares_headers: dict[str, tuple[dict[str, Any], bool]] = {}
        # Tool name -> (its input schema, the JSON types of its scalar arguments).
        self._scalar_types: dict[str, tuple[dict[str, Any], dict[str, frozenset[str]]]] = {}

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        """The schema the SDK checks an HTTP call's ``Mcp-Param-*`` headers against, only
        for a tool that declares such a header (``x-mcp-header``). Against a schema that
        declares none the check finds nothing to compare, yet walks the whole schema twice a
        call (0.17 ms for session_append's, measured): ours declare none, so it is skipped."""
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return None
        schema = tool.parameters
        known = self._declares_headers.get(name)
        if known is None or known[0] is not schema:
            declares = any(X_MCP_HEADER_KEY in node for node in schema_nodes(schema))
            known = self._declares_headers[name] = (schema, declares)
        return schema if known[1] else None

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        """The SDK's ``add_tool`` (what ``@server.tool()`` calls), the tool's schemas worked out
        once for each place a tool is defined (made_tools). A second tool of one name keeps the
        first, as the SDK's does."""
        if description is None and fn.__doc__:
            # The docstring as one paragraph: hosts show it and send it to a model as it is,
            # and as written each line break carried the source's indentation.
            description = " ".join(fn.__doc__.split())
        tool = made_tool(
            fn,
            name=name,
            title=title,
            description=description,
            annotations=annotations,
            icons=icons,
            meta=meta,
            structured_output=structured_output,
        )
        tool.fn_metadata = for_models(tool.fn_metadata)
        tools = self._tool_manager._tools
        if tool.name in tools:
            if self._tool_manager.warn_on_duplicate_tools:
                sdk_server.logger.warning(f"Tool already exists: {tool.name}")
            return
        tools[tool.name] = tool

    def make_tools_strict(self) -> None:
        """Rewrite every registered tool's advertised input schema in strict form, and its
        output schema lean; call it once all tools are registered."""
        for tool in self._tool_manager.list_tools():
            tool.parameters = strict_schema(tool.parameters)
            if tool.fn_metadata.output_schema is not None:
                tool.fn_metadata.output_schema = lean_output_schema(tool.fn_metadata.output_schema)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            known = ", ".join(t.name for t in self._tool_manager.list_tools())
            shown = clip_long(name, ECHO_CHARS)
            raise ToolError(bounded_error(f"there is no tool {shown!r}; the tools are: {known}"))
        properties: dict[str, Any] = tool.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            shown = ", ".join(repr(clip_long(key, ECHO_CHARS)) for key in unknown)
            raise ToolError(
                bounded_error(
                    f"{name}: unknown argument {shown}; it takes "
                    + (", ".join(properties) or "no arguments")
                )
            )
        arguments = self._scalar_arguments(name, tool.parameters, arguments)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK logs it and says no more to the client
        except ToolError as error:
            text = self._explain(name, error, properties, arguments)
            raise ToolError(bounded_error(text, arguments)) from None

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Any:
        """The SDK's, with a URI too long to be any resource refused without repeating it
        (the SDK's error would hold it twice, in its message and its data)."""
        if len(str(uri)) > URI_CHARS:
            raise MCPError(INVALID_PARAMS, long_uri(str(uri)))
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError as error:
            if not str(error).startswith("Unknown resource"):
                raise  # ours, which says where to look
            # The SDK's, for a URI no template takes: name the ones there are.
            shapes = ", ".join(t.uri_template for t in self._resource_manager.list_templates())
            raise ResourceNotFoundError(
                f"no resource {clip_long(str(uri), ECHO_CHARS)!r}: the resources are {shapes}"
                " (resources/list lists the sessions and agents)"
            ) from None

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[Any, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        """The SDK's, with a wrong name or arguments refused as invalid params saying what
        is wrong (the SDK raises a plain ValueError: error code 0, or an internal error)."""
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            shown = clip_long(name, ECHO_CHARS)
            raise MCPError(
                INVALID_PARAMS,
                bounded_error(f"there is no prompt {shown!r}; the prompts are: {known}"),
            )
        declared = {argument.name: argument for argument in prompt.arguments or []}
        given = set(arguments or {})
        problems = [f"unknown argument {key!r}" for key in sorted(given - set(declared))]
        problems += [
            f"argument {key!r} is required"
            for key, argument in declared.items()
            if argument.required and key not in given
        ]
        if problems:
            takes = ", ".join(declared) or "no arguments"
            text = f"{name}: {'; '.join(problems)}; it takes {takes}"
            raise MCPError(INVALID_PARAMS, bounded_error(text, arguments))
        try:
            return await super().get_prompt(name, arguments, context)
        except MCPError as error:
            if len(error.error.message) <= ERROR_CHARS:
                raise
            bounded = bounded_error(error.error.message, arguments)
            raise MCPError(error.error.code, bounded) from None

    def _scalar_arguments(
        self, name: str, schema: dict[str, Any], arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """``arguments`` with each scalar one given as JSON text of the type wanted (``"5"``
        for an integer, ``"true"`` for a boolean) read as that JSON, as the SDK reads an object
        or array given as JSON text: clients whose forms give text for a type they do not
        know (the Inspector's command line, for every nullable one) could not pass them;
        ``"null"`` for a nullable one is null.
        Any other scalar of the wrong JSON type is refused, where pydantic's lax mode would
        convert it (``"5.0"``, ``1`` for true, ``5.5`` cut to 5)."""
        known = self._scalar_types.get(name)
        if known is None or known[0] is not schema:
            known = self._scalar_types[name] = (schema, scalar_types(schema))
        read: dict[str, Any] = {}
        for key, allowed in known[1].items():
            if key in arguments and not _has_type(arguments[key], allowed):
                if arguments[key] == "null" and "null" in allowed:
                    # Typed for a nullable integer or boolean (a form's text, a model that
                    # writes null in quotes): null, the default, as the JSON it is.
                    read[key] = None
                    continue
                if (value := _json_scalar(arguments[key], allowed)) is not None:
                    read[key] = value
                    continue
                properties: dict[str, Any] = schema.get("properties", {})
                about = properties.get(key, {}).get("description")
                wanted = " or ".join(sorted(allowed - {"null"}))
                given = json.dumps(arguments[key], ensure_ascii=False, default=str)[:60]
                kind = json_kind(arguments[key])
                text = f"{name}: {key} should be a valid {wanted}, not {kind} (got {given})"
                raise ToolError(_one_line(text + (f"; {key}: {about}" if about else "")))
        return {**arguments, **read} if read else arguments

    def _explain(
        self, name: str, error: ToolError, properties: dict[str, Any], arguments: dict[str, Any]
    ) -> str:
        cause = error.__cause__
        if isinstance(cause, ValidationError):
            return argument_error(name, cause, properties, arguments)
        # The SDK's prefix says nothing the tool's own message does not.
        prefix = f"Error executing tool {name}: "
        text = str(error)
        return f"{name}: {text.removeprefix(prefix)}" if text.startswith(prefix) else text


_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
_SCALARS = frozenset({"boolean", "integer", "number", "string", "null"})


def scalar_types(schema: dict[str, Any]) -> dict[str, frozenset[str]]:
    """Each argument of a tool's input ``schema`` that is only ever a scalar, with the JSON
    types it may have."""
    found: dict[str, frozenset[str]] = {}
    for key, node in schema.get("properties", {}).items():
        variants = node.get("anyOf", [node]) if isinstance(node, dict) else []
        types = [variant.get("type") for variant in variants if isinstance(variant, dict)]
        if types and all(kind in _SCALARS for kind in types):
            found[key] = frozenset(str(kind) for kind in types)
    return found


# The longest text read as a scalar's JSON: any number or boolean fits.
JSON_SCALAR_CHARS = 40


def _json_scalar(value: Any, allowed: frozenset[str]) -> Any:
    """``value``, text that is exactly the JSON of a number, integer or boolean ``allowed``
    (``"5"``, ``"true"``), read; else None."""
    if not isinstance(value, str) or len(value) > JSON_SCALAR_CHARS or value != value.strip():
        return None
    try:
        read = json.loads(value)
    except ValueError:
        return None
    if read is None or isinstance(read, str | list | dict) or not _has_type(read, allowed):
        return None
    if isinstance(read, float) and not math.isfinite(read):
        return None  # NaN and Infinity are no JSON
    if isinstance(read, float) and "integer" in allowed and "number" not in allowed:
        return None  # "5.0" or "1e3" for an integer: not as the integer would be written
    return read


def _has_type(value: Any, allowed: frozenset[str]) -> bool:
    kind = _JSON_TYPES.get(type(value))
    if kind in allowed:
        return True
    if kind == "integer":
        return "number" in allowed
    return kind == "number" and "integer" in allowed and float(value).is_integer()


def long_uri(uri: str) -> str:
    return f"a resource URI may have at most {URI_CHARS:,} characters, not {len(uri):,}"


def bounded_error(text: str, sent: Any = None) -> str:
    """``text`` as an error answer: on one line, and at most about ``ERROR_CHARS`` long. A
    long value of ``sent`` (the request's arguments) that it repeats is cut to its start
    with a marker saying how long it was; what is still too long is cut at the end."""
    if len(text) > ERROR_CHARS:
        for value in sorted(_long_strings(sent), key=len, reverse=True):
            if value in text:
                text = text.replace(value, clip_long(value, ECHO_CHARS))
        text = clip_long(text, ERROR_CHARS)
    return _one_line(text)


def _long_strings(value: Any, depth: int = 0) -> Iterator[str]:
    """The strings in ``value`` (JSON-like) longer than ``ECHO_CHARS``."""
    if isinstance(value, str):
        if len(value) > ECHO_CHARS:
            yield value
    elif depth < 20 and isinstance(value, dict):
        for item in value.values():
            yield from _long_strings(item, depth + 1)
    elif depth < 20 and isinstance(value, list):
        for item in value:
            yield from _long_strings(item, depth + 1)


def _one_line(text: str) -> str:
    """An error on one line, whatever the caller's values in it hold (a line break in an id)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
