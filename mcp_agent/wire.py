"""The base of every JSON shape we store or send: pi's camelCase wire names, unknown fields kept.

A field that is None and was never set is left out of the JSON, so that optional fields
(``errorMessage``, ``details``) appear only when a value was given, while a null read from a
file is written back as null: what we read round-trips unchanged.
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer
from pydantic.alias_generators import to_camel

# A code point of half a surrogate pair: JSON can write one ("\\ud800"), and so can Python
# (a byte that was not UTF-8, read with surrogateescape), but no UTF-8 holds it.
SURROGATE = re.compile("[\ud800-\udfff]")
# The escape of one in JSON text (half a pair, or a whole pair's first or second half).
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def utf8_only(value: Any) -> Any:
    """``value`` (JSON-like: str, dict, list, scalars) with each lone surrogate replaced by
    U+FFFD, as a byte that is not UTF-8 is when decoded: a string holding one can be neither
    stored nor sent on, and a message, tool result or prompt holding one would be lost."""
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {utf8_only(key): utf8_only(item) for key, item in value.items()}
    if isinstance(value, list):
        return [utf8_only(item) for item in value]
    return value


# One model built at a time (see WireModel.model_rebuild).
_BUILDING = threading.RLock()


class UnreadTime(int):
    """A message's time its file left out (pi reads such a message as it is): the time given
    in its place for our own reckoning, written nowhere, so the message goes on without one
    (in a context, an export, a store) instead of with the time it was read."""

    __slots__ = ()


class UnreadStamp(str):
    """An entry's time its file left out (pi reads such an entry as it is, its time ``new
    Date(undefined)``, NaN): the empty text in its place, a time that does not read, written
    nowhere, so the entry goes on without one (in a store, an export) as it was read."""

    __slots__ = ()


UNREAD_STAMP = UnreadStamp()


class NaNTime(int):
    """A message's time that pi's ``new Date(…).getTime()`` makes NaN (a summary's entry has a
    time that does not read, or none): 0 for our own reckoning, written null, as JSON.stringify
    writes NaN."""

    __slots__ = ()


NAN_TIME = NaNTime()
# The types of a time that is written nowhere (``WireModel``'s serializer leaves it out).
_UNREAD_TIMES = (UnreadTime, UnreadStamp)


# The validation context of a message read from a file or a store (``FROM_FILE``): a missing
# time is then an ``UnreadTime``, where a message made here gets the time it is made.
FROM_FILE = {"file": True}


class WireModel(BaseModel):
    """A stored or sent shape. Each is built (its validator and serializer) at its first use,
    not at import: a server's start reads and writes none of them (entries, messages), and
    building them was some 2% of the work before its first answer."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        use_enum_values=True,
        validate_assignment=False,
        # A number too large for a float (1e999 in a file) parses as inf, which JSON writes
        # as null, which a number field then refuses: refused where it comes in instead.
        allow_inf_nan=False,
        defer_build=True,
    )

    @classmethod
    def model_rebuild(
        cls,
        *,
        force: bool = False,
        raise_errors: bool = True,
        _parent_namespace_depth: int = 2,
        _types_namespace: Any = None,
    ) -> bool | None:
        """Pydantic's, one at a time: the first use is as likely on a worker thread as on the
        event loop, and before pydantic 2.14 two builds of one model at once could leave a
        third thread validating with the parent's validator (pydantic#11849)."""
        with _BUILDING:
            return super().model_rebuild(
                force=force,
                raise_errors=raise_errors,
                # One frame more between the caller and pydantic: this one.
                _parent_namespace_depth=_parent_namespace_depth + (_parent_namespace_depth > 0),
                _types_namespace=_types_namespace,
            )

    @model_serializer(mode="wrap")
    def _drop_unset_nones(self, handler: Any) -> Any:
        data = handler(self)
        kind = type(self.__dict__.get("timestamp"))
        if kind in _UNREAD_TIMES and isinstance(data, dict):
            del data["timestamp"]
        elif kind is NaNTime and isinstance(data, dict):
            data["timestamp"] = None
        optional = _optional_fields(type(self))
        if optional and isinstance(data, dict):
            fields_set = self.__pydantic_fields_set__
            for name, alias in optional:
                if name in fields_set:
                    continue
                for key in (alias, name):
                    if key in data and data[key] is None:
                        del data[key]
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The canonical JSON object (camelCase, unknown fields included)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict(), ensure_ascii=False, separators=(",", ":"))


_OPTIONAL_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _optional_fields(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(name, wire name) of each field whose default is None: the ones to leave out unset.
    Worked out once per class, since serialising is on every append's path."""
    found = _OPTIONAL_FIELDS.get(cls)
    if found is None:
        found = tuple(
            (name, field.alias or name)
            for name, field in cls.__pydantic_fields__.items()
            if not field.is_required() and field.default is None and field.default_factory is None
        )
        _OPTIONAL_FIELDS[cls] = found
    return found


def describe_validation_error(error: ValidationError, root: str = "", data: Any = None) -> str:
    """The problems of ``validation_problems`` in one line."""
    return "; ".join(validation_problems(error, root, data))


def validation_problems(error: ValidationError, root: str = "", data: Any = None) -> list[str]:
    """One line per problem (each once), each naming the dotted field path, e.g.
    ``message.content.0.text``.

    Pydantic puts the chosen member of a union into the location (``content.0.text.text`` for
    a missing ``text`` in a text block); given the input ``data``, those tags are left out so
    that the path follows the JSON.
    """
    lines = []
    for problem in error.errors(include_url=False):
        parts = [root] if root else []
        loc = problem["loc"]
        # Without the data, the location as pydantic gives it: a name is better than none.
        parts.extend(str(p) for p in (_data_path(loc, data) if data is not None else loc))
        path = ".".join(parts) or "(top level)"
        lines.append(f"{path}: {problem['msg']}")
    return list(dict.fromkeys(lines))


def _data_path(loc: tuple[Any, ...], data: Any) -> list[Any]:
    path: list[Any] = []
    current = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(current, dict):
            if part in current:
                current = current[part]
            elif not last:  # a union member's tag or a validator's name, not a key
                continue
            else:
                current = _MISSING
        elif isinstance(current, list):
            if isinstance(part, int) and 0 <= part < len(current):
                current = current[part]
            else:
                continue
        elif current is not _MISSING:
            continue  # nothing to descend into: the rest names union members
        path.append(part)
    return path


_MISSING = object()


# How deep free-form JSON may nest: an entry holding it must still serialize (pydantic stops
# at about 250 levels, the whole entry counted), far beyond what real data needs.
MAX_JSON_DEPTH = 200
_BIG_EXPONENT = re.compile(r"[eE][+-]?\d{3}")
_TOO_MANY_DIGITS = re.compile(r"Exceeds the limit .* value has (\d+) digits")


def loads_json(
    text: str, finite: bool = True, unique_keys: bool = False, lone_surrogates: bool = False
) -> Any:
    """``text`` parsed as standard JSON, or a ValueError saying what is wrong with it:
    NaN and Infinity are not JSON (pi's JSON.parse refuses them), nesting is bounded by
    ``MAX_JSON_DEPTH``, with ``finite`` a number too large for a float (1e999) is refused
    instead of becoming null when written back, and with ``unique_keys`` a key given twice in
    one object is refused (JSON keeps the last, and a file written back would lose the first).
    An unpaired surrogate escape is refused unless ``lone_surrogates`` (the caller sees to it)."""
    try:
        hook = _no_duplicate_keys if unique_keys else None
        value = json.loads(text, parse_constant=_not_json, object_pairs_hook=hook)
    except RecursionError:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as error:
        found = _TOO_MANY_DIGITS.search(str(error))
        if found is None:
            raise
        # Python's own words name a setting of Python's, no help to whoever wrote the file.
        raise ValueError(f"an integer of {found.group(1)} digits is too long") from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    if finite and _BIG_EXPONENT.search(text):
        json.loads(text, parse_float=_finite)
    if (
        not lone_surrogates
        and SURROGATE_ESCAPE.search(text)
        and (lone := lone_surrogate(value)) is not None
    ):
        raise ValueError(
            f"\\u{ord(lone):04x} is an unpaired surrogate escape (half of a UTF-16 pair),"
            " which is not Unicode text"
        )
    return value


_KINDS: dict[type, str] = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def json_kind(value: Any) -> str:
    """What JSON type ``value`` (parsed JSON) is, as a message says it: "an array", "null"."""
    return _KINDS.get(type(value), f"a {type(value).__name__}")


# C0 and C1 control characters but line feed and tab: a terminal acts on them (ESC begins
# the sequences that clear the screen or set its title). And the bidirectional overrides and
# isolates, which make text read otherwise than it is ("run \u202erm -rf /" reads "run / fr- mr").
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with each control character but line feed and tab written as an escape
    (``\\x1b``, ``\\u202e``), so that text from a session, a model or a server can be shown
    on a terminal as it is and do nothing there; CRLF and CR line ends become LF."""
    if text.isprintable():  # the common case, at C speed
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # a lone CR ends a line too
    return _CONTROLS.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_WORD = re.compile(r"\S+")


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` as a message, a listing or a preview quotes it: whitespace runs one space,
    control characters escaped (text from a session, a model or a server must do nothing on a
    terminal), cut at ``limit`` characters with an ellipsis. Costs what is shown, not what
    ``text`` holds (a server's malformed event may hold 64 MB)."""
    text = str(text)
    if limit is not None and len(text) > 2 * limit:
        words: list[str] = []
        kept = 0
        for word in _WORD.finditer(text):  # escaping only lengthens: limit + 1 is enough
            words.append(word.group())
            kept += len(words[-1]) + 1
            if kept > limit + 1:
                break
        text = " ".join(words)
    flat = escape_controls(" ".join(text.split()))
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"


def lone_surrogate(value: Any) -> str | None:
    """The first code point from U+D800 to U+DFFF in ``value``'s strings and keys (a pair of
    escapes parses into one character, so any found was unpaired)."""
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            found = None if node.isascii() else SURROGATE.search(node)
            if found is not None:
                return found.group()
        elif isinstance(node, dict):
            pending.extend(node)
            pending.extend(node.values())
        elif isinstance(node, list | tuple):
            pending.extend(node)
    return None


# What a JSON text cut off in the middle of a token ends with, from where the parser gave
# up: part of a string (an escape too: the parser points into a \u escape), of a number,
# or of true, false or null.
_PARTIAL_TOKEN = re.compile(
    r'\s*(?:"(?:[^"\\]|\\.)*(?:\\u?[0-9a-fA-F]{0,3})?|-?[0-9]*\.?[0-9]*(?:[eE][+-]?[0-9]*)?'
    r"|u[0-9a-fA-F]{0,4}|t(?:ru?)?|f(?:a(?:ls?)?)?|n(?:ul?)?)\s*",
    re.S,
)


def cut_off_json(text: str, error: ValueError) -> bool:
    """Whether ``text``, which failed to parse with ``error``, did so only because it ends too
    soon: it is the start of some JSON text, as a write torn by a crash leaves a line. A whole
    text that breaks a rule (NaN, too deep, junk after the object) is not."""
    return (
        isinstance(error, json.JSONDecodeError)
        and _PARTIAL_TOKEN.fullmatch(text, error.pos) is not None
    )


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {json.dumps(key)} appears twice in one object")
        found[key] = value
    return found


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value (JSON numbers are finite)")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"the number {text} is too large (beyond a 64-bit float)")
    return number


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (iterative: no recursion limit)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest
