"""What goes wrong when compacting or summarising (nothing is written then)."""

from __future__ import annotations

from mcp_agent.sessions.errors import SessionError


class CompactionError(SessionError):
    """Compaction or a branch summary could not be made; nothing was written.

    Codes: ``nothing_to_compact``, ``summarizer_failed``, ``aborted``, ``conflict`` (the
    session moved on while the summary was being written)."""


class SummaryTooLong(CompactionError):
    """The summariser refused the request as longer than its window (``summarizer_failed``)."""
