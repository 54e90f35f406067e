"""Abort signals: one controller aborts a run; the provider stream, the tools and the hooks listen."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

log = logging.getLogger(__name__)


class AbortSignal:
    def __init__(self) -> None:
        self._event = anyio.Event()
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    def on_abort(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once when aborted (at once if already); returns a remover."""
        if self.aborted:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    def _fire(self, reason: str) -> None:
        if self.aborted:
            return
        self.reason = reason
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        # An abort always goes through: one listener that fails must not keep it from the
        # others (nor fail whoever aborts).
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("an abort listener failed")


def abort_message(why: AbortSignal | str | None) -> str:
    """An abort in words, as every message of ours says it (an answer's ``error_message``, a
    tool call's result, a run's error): "aborted", or "aborted: REASON", the reason given or
    the signal's. Lower case, as pi's stop reason and the run's status say it."""
    reason = why.reason if isinstance(why, AbortSignal) else why
    return f"aborted: {reason}" if reason and reason != "aborted" else "aborted"


class AbortController:
    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str = "aborted") -> None:
        self.signal._fire(reason)
