"""Turning domain errors (sessions, runtime, manifests) into tool errors whose text a person or a model can act on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from mcp_agent.manifests import ManifestError
from mcp_agent.messages import MessageParseError
from mcp_agent.runtime.errors import Refused
from mcp_agent.sessions import SessionError

HINTS = {
    "not_found": "list sessions with session_list, or entries with session_get",
}


@contextmanager
def tool_errors() -> Iterator[None]:
    """Raise the known errors as ToolError (the SDK hides the text of any other exception)."""
    try:
        yield
    except SessionError as error:
        hint = HINTS.get(error.code)
        # A busy session's message says so itself, and what to do.
        prefix = "" if error.code == "busy" else f"{error.code}: "
        raise ToolError(f"{prefix}{error}" + (f" ({hint})" if hint else "")) from None
    except (Refused, MessageParseError, ManifestError, ValueError) as error:
        raise ToolError(str(error)) from None
