"""A failure that repeats while something is out of reach (a database down, a connection that
will not come back): said in one line when it starts and in one when it ends, with the
repeats between counted, not logged. A loop that retries each second no longer writes a
traceback each second for as long as the outage lasts."""

from __future__ import annotations

import logging
import threading
import time

from mcp_agent.wire import one_line


class Outage:
    """``failed`` at each failure, ``recovered`` at each success; safe from any thread."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log = log
        self.what = what  # e.g. "the session database postgresql://…/db is out of reach"
        self._lock = threading.Lock()
        self._since: float | None = None
        self._failures = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, reason: BaseException | str) -> None:
        with self._lock:
            self._failures += 1
            if self._since is not None:
                return
            self._since = time.monotonic()
        self.log.warning(
            "%s: %s (said once; tried again quietly until it works)", self.what, one_line(reason)
        )

    def recovered(self) -> None:
        with self._lock:
            if self._since is None:
                return
            seconds, failures = time.monotonic() - self._since, self._failures
            self._since, self._failures = None, 0
        tries = "try" if failures == 1 else "tries"
        self.log.warning(
            "%s: over, after %.0f s (%d %s failed)", self.what, seconds, failures, tries
        )
