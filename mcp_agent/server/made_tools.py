"""The SDK's Tool for a tool function, made once for each place a tool is defined: a server's
tools are closures over that server, made afresh for each server built, yet what the SDK works
out from one (its argument model and input and output schemas, 77% of building a server: 0.12
s of CPU) depends only on the function's code, signature and options. A process that builds
many servers (a test suite, an embedding application) works it out once; each server gets its
own copy, with its own function and schemas of its own to rewrite (``make_tools_strict``)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable
from typing import Any

from mcp.server.mcpserver.tools import Tool

# Distinct tool definitions kept (a server has about 20); past it the table starts again.
MAX_MADE_TOOLS = 256

_made: dict[Hashable, Tool] = {}
_lock = threading.Lock()


def _key(fn: Callable[..., Any], options: dict[str, Any]) -> Hashable | None:
    """What the SDK's Tool for ``fn`` depends on, or None when it cannot be told (a callable
    that is not a plain function, defaults that cannot be compared): made afresh then."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
    key = (
        code,
        getattr(fn, "__module__", None),
        getattr(fn, "__defaults__", None),
        tuple(sorted(kwdefaults.items())),
        # As evaluated where they were written (text under `from __future__ import annotations`).
        repr(getattr(fn, "__annotations__", None)),
        repr(sorted(options.items())),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def made_tool(fn: Callable[..., Any], **options: Any) -> Tool:
    """``Tool.from_function(fn, **options)``, its schemas worked out once per definition."""
    key = _key(fn, options)
    with _lock:
        made = _made.get(key) if key is not None else None
    if made is None:
        made = Tool.from_function(fn, **options)
        if key is not None:
            with _lock:
                if len(_made) >= MAX_MADE_TOOLS:
                    _made.clear()
                _made[key] = made
    # The kept Tool is only ever copied: its lazily cached output schema is never worked out.
    metadata = made.fn_metadata.model_copy(
        update={"output_schema": copy.deepcopy(made.fn_metadata.output_schema)}
    )
    return made.model_copy(
        update={"fn": fn, "parameters": copy.deepcopy(made.parameters), "fn_metadata": metadata}
    )
