"""The base of every JSON shape we store or send: pi's camelCase wire names, unknown fields kept.

A field that is None and was never set is left out of the JSON, so that optional fields
(``errorMessage``, ``details``) appear only when a value was given, while a null read from a
file is written back as null: what we read round-trips unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        use_enum_values=True,
        validate_assignment=False,
    )

    @model_serializer(mode="wrap")
    def _drop_unset_nones(self, handler: Any) -> Any:
        data = handler(self)
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
    """One line per problem, each naming the dotted field path, e.g. ``message.content.0.text``.

    Pydantic puts the chosen member of a union into the location (``content.0.text.text`` for
    a missing ``text`` in a text block); given the input ``data``, those tags are left out so
    that the path follows the JSON.
    """
    lines = []
    for problem in error.errors(include_url=False):
        parts = [root] if root else []
        parts.extend(str(p) for p in _data_path(problem["loc"], data))
        path = ".".join(parts) or "(top level)"
        lines.append(f"{path}: {problem['msg']}")
    return "; ".join(dict.fromkeys(lines))


def _data_path(loc: tuple[Any, ...], data: Any) -> list[Any]:
    path: list[Any] = []
    current = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(current, dict):
            if part in current:
                current = current[part]
            elif not last and part in (current.get("type"), current.get("role")):
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
