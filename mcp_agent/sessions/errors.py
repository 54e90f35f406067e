"""The one exception the session layer raises for bad requests and bad data."""

from __future__ import annotations


class SessionError(Exception):
    """A session operation that cannot be done, with a machine-readable ``code``.

    Codes: ``not_found`` (no such session or entry), ``invalid_fork_target``, ``invalid_entry``
    (an entry that does not parse or break the tree), ``invalid_import`` (a session file we
    cannot import), ``corrupt`` (a stored session that no longer reads), ``conflict`` (an id
    that is already taken), ``invalid_argument``, ``busy`` (another process works on the session, or holds the
    database's write lock too long), ``storage`` (the database failed: disk full, I/O error),
    ``closed``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"SessionError({self.code!r}, {self.message!r})"


class Reincarnated(SessionError):
    """A write through the storage of a session that was deleted since it was opened, whose id
    names another session now (made again, by another process or replica): nothing was
    written. The repo opens the session there now and writes to it."""

    def __init__(self, session_id: str) -> None:
        super().__init__("not_found", f"session {session_id} was deleted")


class Unreachable(SessionError):
    """The session database is out of reach (down, or gone from the network): every call is
    refused with this until it is back. The database logs the outage once, when it starts,
    and once when it ends; a loop that retries need not log each of these."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__("storage", message)
        self.reason = reason  # why, in a line (the driver's words)
