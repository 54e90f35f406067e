"""Tools the agent can call: AgentTool, AgentToolResult, and argument validation by JSON Schema."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_agent.abort import AbortSignal
from mcp_agent.messages import ImageContent, TextContent, ToolExecutionMode, Usage
from mcp_agent.wire import one_line


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


# Validators of the schemas tools were last called with, newest last, each kept with its schema
# (so that the id is not reused while it is cached). Bounded: each run's tools are new objects
# (a downstream tool's schema is copied for every run), and the cache grew by one entry a tool
# called in each run, for as long as the server ran.
_validators: OrderedDict[int, tuple[dict[str, Any], Any]] = OrderedDict()
MAX_VALIDATORS = 256
# What the metaschema found in the schemas checked last (by their digest), as many.
_faults: OrderedDict[bytes, str | None] = OrderedDict()
# Schemas are checked on worker threads (a downstream listing) while calls are validated.
_caches_lock = threading.Lock()
# How much of what is wrong with a tool's schema its error quotes.
MAX_SCHEMA_FAULT = 300
# The longest a schema's `pattern` may take to match one string. A downstream server's schema
# meets a model's strings: Python's `re` has no time limit and holds the GIL for the whole of
# a match, so one catastrophic pattern (`^(a|aa)+$` against forty a's and a b) froze the
# server for minutes. `regex` takes a time limit; normal patterns take microseconds.
PATTERN_SECONDS = 0.25
# And the longest all of one call's matches take together: a limit per match alone let an
# array of such strings (each item matched by is_valid and again by iter_errors) hold the
# event loop that many times over, a minute and a half for 200 items.
CALL_PATTERN_SECONDS = 1.0
# When the matches of the call being validated must end (time.monotonic()); None: no call's.
_patterns_until: ContextVar[float | None] = ContextVar("_patterns_until", default=None)
# Validator classes whose patterns match under that limit, by the draft's class.
_bounded_classes: dict[type, type] = {}


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


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        isinstance(v, int | float) and not isinstance(v, bool) and float(v).is_integer()
    ),
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _coerce_primitive(value: Any, kind: str) -> Any:
    """``value`` as a ``kind`` the way pi-ai converts it, or ``value`` itself."""
    if kind in ("number", "integer"):
        if value is None:
            return 0
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, str) and value.strip() and "_" not in value:
            try:
                number = float(value)
            except ValueError:
                return value
            if math.isfinite(number) and (kind == "number" or number.is_integer()):
                return int(number) if number.is_integer() else number
        return value
    if kind == "boolean":
        if value is None:
            return False
        if value in ("true", "false"):
            return value == "true"
        if not isinstance(value, bool) and isinstance(value, int | float) and value in (0, 1):
            return value == 1
        return value
    if kind == "string":
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return _js_number(value)
        return value
    if kind == "null" and (value == "" or (value == 0 and value is not True) or value is False):
        return None
    return value


def _js_number(value: int | float) -> str:
    """A number as JavaScript's String() writes it (3.0 → "3")."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _pattern_found(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches in ``text``, as jsonschema's ``re.search``; raises
    TimeoutError past ``PATTERN_SECONDS``, or once the call's ``CALL_PATTERN_SECONDS`` are
    spent."""
    import regex

    timeout = PATTERN_SECONDS
    if (until := _patterns_until.get()) is not None:
        timeout = min(timeout, until - time.monotonic())
        if timeout <= 0:
            raise TimeoutError
    return regex.search(pattern, text, timeout=timeout) is not None


def _timed_out(pattern: str, what: str) -> str:
    return one_line(
        f"{what} could not be checked against the pattern {pattern!r}: the match took over "
        f"{PATTERN_SECONDS} s, or the call's matches {CALL_PATTERN_SECONDS} s in all (the "
        "tool's schema has a pattern that backtracks without end)",
        MAX_SCHEMA_FAULT,
    )


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    try:
        found = _pattern_found(pattern, instance)
    except TimeoutError:
        yield ValidationError(_timed_out(pattern, "the value"))
        return
    if not found:
        shown = one_line(repr(instance), MAX_SCHEMA_FAULT)
        yield ValidationError(f"{shown} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                found = _pattern_found(pattern, key)
            except TimeoutError:
                yield ValidationError(_timed_out(pattern, f"the property name {key!r}"))
                continue
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def validator_class(schema: Any) -> Any:
    """The jsonschema validator class for ``schema``'s draft, its patterns matched within
    ``PATTERN_SECONDS``."""
    import jsonschema

    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    with _caches_lock:
        bounded = _bounded_classes.get(base)
        if bounded is None:
            keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
            bounded = jsonschema.validators.extend(base, keywords)  # type: ignore[no-untyped-call]
            _bounded_classes[base] = bounded
    return bounded


def _is_valid(schema: Any, value: Any) -> bool:
    try:
        return bool(validator_class(schema)(schema).is_valid(value))
    except Exception:  # a part that cannot stand alone (a $ref into its root) decides nothing
        return False


def _coerce(value: Any, schema: Any) -> Any:
    """``value`` with its primitives converted to the types ``schema`` asks for, as pi-ai's
    validateToolArguments does before it validates: models often send ``"5"`` for an integer
    or ``"true"`` for a boolean, and pi runs such a call where a strict check would refuse it.
    A value that fits already is left alone."""
    if not isinstance(schema, dict):
        return value
    for part in schema.get("allOf", []):
        value = _coerce(value, part)
    for union in ("anyOf", "oneOf"):
        members = schema.get(union)
        if isinstance(members, list) and not any(_is_valid(m, value) for m in members):
            for member in members:
                candidate = _coerce(copy.deepcopy(value), member)
                if _is_valid(member, candidate):
                    value = candidate
                    break
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds or [] if isinstance(k, str)]
    if kinds and not any(_JSON_TYPES.get(kind, lambda v: False)(value) for kind in kinds):
        for kind in kinds:
            candidate = _coerce_primitive(value, kind)
            if candidate is not value:
                value = candidate
                break
    if "object" in kinds and isinstance(value, dict):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        extra = schema.get("additionalProperties")
        for key in list(value):
            if key in properties:
                value[key] = _coerce(value[key], properties[key])
            elif isinstance(extra, dict):
                value[key] = _coerce(value[key], extra)
    if "array" in kinds and isinstance(value, list):
        items = schema.get("prefixItems", schema.get("items"))
        for index in range(len(value)):
            if isinstance(items, list):
                if index < len(items):
                    value[index] = _coerce(value[index], items[index])
            elif isinstance(items, dict):
                value[index] = _coerce(value[index], items)
    return value


def validate_tool_arguments(tool: AgentTool, arguments: Any) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema; return them (primitives converted to the
    types asked for, see ``_coerce``, and with nulls for the nullable required properties left
    out, see ``_with_nulls``) or raise ToolArgumentsError."""
    if not isinstance(arguments, dict):
        raise ToolArgumentsError(
            f"arguments for {tool.name} must be a JSON object, got {type(arguments).__name__}"
        )
    token = _patterns_until.set(time.monotonic() + CALL_PATTERN_SECONDS)
    try:
        return _validated(tool, arguments)
    except ToolArgumentsError:
        raise
    except Exception as error:
        # The schema, not the arguments: one jsonschema cannot use (a "type" of 12, $refs that
        # refer to each other in a circle) failed every call with words such as "'int' object
        # is not iterable", which told the model nothing.
        raise ToolArgumentsError(
            f"{tool.name} cannot be called: its input schema is not valid JSON Schema: "
            + _schema_fault(tool.parameters, error)
        ) from None
    finally:
        _patterns_until.reset(token)


def _schema_fault(schema: dict[str, Any], error: Exception) -> str:
    """What is wrong with ``schema``, which failed a validation with ``error``: the first
    fault its metaschema finds, or else the error, in one bounded line."""
    fault = schema_fault(schema)
    if fault is not None:
        return fault
    if isinstance(error, RecursionError):
        return "its $refs refer to each other without end, or it nests too deep"
    return one_line(str(error) or type(error).__name__, MAX_SCHEMA_FAULT)


def schema_fault(schema: dict[str, Any], max_chars: int | None = None) -> str | None:
    """The first fault ``schema``'s metaschema finds in it, in one bounded line, or None for
    valid JSON Schema (about a millisecond for a tool's: remembered by the schema's digest);
    with ``max_chars``, a schema longer as JSON is a fault too."""
    text = json.dumps(schema, sort_keys=True, default=repr)
    if max_chars is not None and len(text) > max_chars:
        return f"it is {len(text):,} characters, past the {max_chars:,} sent with every request"
    digest = hashlib.sha256(text.encode()).digest()
    with _caches_lock:
        if digest in _faults:
            _faults.move_to_end(digest)
            return _faults[digest]
    import jsonschema
    from jsonschema.exceptions import best_match

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        found = best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    except Exception:
        found = None
    fault = None
    if found is not None:
        where = "/".join(str(part) for part in found.absolute_path) or "(top level)"
        fault = one_line(f"{where}: {found.message}", MAX_SCHEMA_FAULT)
    with _caches_lock:
        _faults[digest] = fault
        if len(_faults) > MAX_VALIDATORS:
            _faults.popitem(last=False)
    return fault


def _validated(tool: AgentTool, arguments: dict[str, Any]) -> dict[str, Any]:
    # Imported here: jsonschema takes a noticeable share of the server's start-up time.
    from jsonschema.exceptions import best_match

    cls = validator_class(tool.parameters)
    with _caches_lock:
        cached = _validators.get(id(tool.parameters))
        if cached is None or cached[0] is not tool.parameters:
            cached = (tool.parameters, cls(tool.parameters))
            _validators[id(tool.parameters)] = cached
            if len(_validators) > MAX_VALIDATORS:
                _validators.popitem(last=False)
        else:
            _validators.move_to_end(id(tool.parameters))
    validator = cached[1]
    filled: dict[str, Any] = _with_nulls(tool.parameters, arguments)
    if validator.is_valid(filled):
        # What fits the schema has nothing to convert (``_coerce`` leaves a value of the
        # type asked for alone): no copy and no walk for the calls models get right.
        return filled
    # Converted before the nulls go in: a null stands for "the default", never for "" or 0.
    coerced = _coerce(copy.deepcopy(arguments), tool.parameters)
    if not isinstance(coerced, dict):
        coerced = arguments
    filled = _with_nulls(tool.parameters, coerced)
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        problems = []
        for error in errors[:5]:
            error = best_match([error]) or error
            where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
            problems.append(f"{where}: {error.message}")
        raise ToolArgumentsError(f"invalid arguments for {tool.name}: " + "; ".join(problems))
    return filled
