"""What the runtime refuses, as domain errors: the MCP tools turn them into tool errors, the
command line into one-line messages. Each message says what was wrong and what to do."""

from __future__ import annotations

from mcp_agent.sessions.errors import SessionError


class Refused(Exception):
    """A request the runtime will not carry out; nothing was written."""


class InvalidRequest(Refused):
    """An argument that cannot be used (an empty prompt, a malformed nesting level)."""


class UnknownAgent(Refused):
    """No agent of that name in the manifests."""


class UnknownRun(Refused):
    """No run of that id in this process (or it ended long ago and was forgotten)."""


class RunEnded(Refused):
    """The run has ended; it cannot be steered or followed up any more."""


class ModelUnavailable(Refused):
    """The model cannot be used here: an unknown name, or the client's model without sampling."""


class TooManyRuns(Refused):
    """A run limit (per server or per client) is reached; the message names it and its flag."""


class DepthLimitReached(Refused):
    """A sub-agent would nest deeper than the server allows."""


class SessionBusy(SessionError):
    """A run or a tool (in this process or another) is working on the session. A SessionError
    with code ``busy``, as the storage's own guard raises it inside an append."""

    def __init__(self, message: str) -> None:
        super().__init__("busy", message)
