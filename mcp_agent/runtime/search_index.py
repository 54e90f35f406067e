"""The search index caught up in the background.

The SQLite file indexes the text of new entries for full-text search only when a search asks
(indexing inside every append would make each durable append write several more pages). After
an import of a large session that left the first search to index everything: about 6 s for
300,000 entries, while the person searching waits. The server instead indexes such text in the
background once it starts (text another process stored before; the command line's import and
copy index theirs themselves) and after each import and fork, one batch (one short write
transaction) at a time, resting between batches as long as each took, so that appends and
reads of every client go on at no less than half speed meanwhile.
"""

from __future__ import annotations

import logging

import anyio

from mcp_agent.blocking import Offload
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.repo import SessionRepo

log = logging.getLogger(__name__)


class SearchIndexer:
    """Runs ``repo.index_search_text`` batch after batch whenever nudged, in one task
    (``run``); nudges that come while it works make one more round, not one each."""

    def __init__(self, repo: SessionRepo, offload: Offload) -> None:
        self._repo = repo
        self._offload = offload
        self._wanted = anyio.Event()
        self.calls = 0  # index_search_text calls that returned (for the curious, and tests)

    def nudge(self) -> None:
        """Ask for a round: there may be text to index."""
        self._wanted.set()

    async def run(self) -> None:
        """Index whenever nudged, until cancelled."""
        while True:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            await self._round()

    async def _round(self) -> None:
        more = True
        while more:
            started = anyio.current_time()
            try:
                more = await self._offload(self._repo.index_search_text)
            except SessionError as error:
                # Busy for a minute, a full disk: the next search indexes what is left.
                log.warning("indexing session text for search stopped: %s", error)
                return
            except Exception:  # never the end of the server: searches index for themselves
                log.exception("indexing session text for search failed")
                return
            self.calls += 1
            await anyio.sleep(anyio.current_time() - started)
