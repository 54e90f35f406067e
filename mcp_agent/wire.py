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
        if not isinstance(data, dict):
            return data
        fields = type(self).model_fields
        fields_set = self.model_fields_set
        for name, field in fields.items():
            if name in fields_set or getattr(self, name, None) is not None:
                continue
            data.pop(field.alias or name, None)
            data.pop(name, None)
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The canonical JSON object (camelCase, unknown fields included)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict(), ensure_ascii=False, separators=(",", ":"))


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
