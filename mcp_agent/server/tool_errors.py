"""Turning domain errors (sessions, runtime, manifests) into tool errors whose text a person or a model can act on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from pydantic import AfterValidator

from mcp_agent.manifests import ManifestError
from mcp_agent.messages import MessageParseError
from mcp_agent.runtime.errors import Refused
from mcp_agent.sessions import SessionError

HINTS = {
    "not_found": "list sessions with session_list, or entries with session_get",
}
# A not_found error says what is missing first ("session … not found", "entry … not found"):
# its hint names the listing of that alone (the other would only be noise).
NOT_FOUND_HINTS = {
    "session": "list sessions with session_list",
    "entry": "list entries with session_get",
}


def hint_for(error: SessionError) -> str | None:
    """Where to look for what ``error`` says is missing or wrong, or None."""
    if error.code == "not_found":
        missing = str(error).split(" ", 1)[0]
        if missing in NOT_FOUND_HINTS:
            return NOT_FOUND_HINTS[missing]
    return HINTS.get(error.code)


def blank(value: str) -> str | None:
    """What is wrong with an id given as ``value`` that holds nothing (empty, or only
    whitespace): refused as such, where looking it up said "session  not found"; None for
    any other."""
    if value.strip():
        return None
    return "is empty" if not value else "is only whitespace"


def _given(value: str | None) -> str | None:
    if value is not None and (problem := blank(value)) is not None:
        raise ValueError(problem)
    return value


def check_given(name: str, value: str, hint: str) -> None:
    """Refuse an id ``value`` that holds nothing (``blank``) as invalid params, in the words of
    a tool's argument error: the argument's ``name``, what was sent, and ``hint`` (where ids
    come from). For resource templates and prompts, whose arguments pydantic does not check."""
    if (problem := blank(value)) is not None:
        sent = json.dumps(value, ensure_ascii=False)[:60]
        raise MCPError(INVALID_PARAMS, f"{name} {problem} (got {sent}); {hint}")


# A session id argument of a tool: an empty or blank one is refused as such in the tool's
# argument error (``strict.argument_error``), the argument named. (Not an entry id: an
# imported file may hold an entry whose id is empty, and pi reads it.)
GIVEN = AfterValidator(_given)


@contextmanager
def tool_errors() -> Iterator[None]:
    """Raise the known errors as ToolError (the SDK hides the text of any other exception)."""
    try:
        yield
    except SessionError as error:
        hint = hint_for(error)
        # A busy session's message says so itself, and what to do.
        prefix = "" if error.code == "busy" else f"{error.code}: "
        raise ToolError(f"{prefix}{error}" + (f" ({hint})" if hint else "")) from None
    except (Refused, MessageParseError, ManifestError, ValueError) as error:
        raise ToolError(str(error)) from None
    except OSError as error:
        # The store's files changed under the server (a folder made unreadable, a disk gone):
        # said with the file, where the SDK said only "Error executing tool".
        where = f" ({error.filename})" if error.filename else ""
        raise ToolError(
            f"storage: {error.strerror or error}{where}; check the session store's files and"
            " their permissions"
        ) from None
