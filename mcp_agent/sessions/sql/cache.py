"""The parse cache of the SQL backends: parsed entries kept per database, bounded in bytes."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque

from mcp_agent.sessions.entries import SessionEntry

# Parsed entries kept per database (entries never change once stored), in bytes: an entry
# counts as the length of its stored JSON plus ENTRY_OVERHEAD_BYTES, about what its Python
# objects cost beyond the text (1.4 to 6.6 KB measured for entries of 150 to 800 bytes), so
# that the bound holds for small entries too. See EntryCache.
ENTRY_CACHE_BYTES = 64 * 2**20
ENTRY_OVERHEAD_BYTES = 2048


class EntryCache:
    """The parsed entries of the sessions open on one database, bounded in bytes.

    One budget per database, shared among the storages open on it by use: each storage keeps
    its entries least recently used first (a :class:`CacheShare`), and when the cache is over
    budget, the storage holding the most gives back its least recently used entries, down to
    an even share of the budget (or to 1/8 under budget). So a session read alone may use the
    whole budget, while a full read of one big session pushes out its own older entries, not
    the few that the other open sessions use at every turn. A storage's entries go when it is
    garbage-collected. Thread-safe: storages are read from worker threads.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.lock = threading.Lock()
        self.shares: set[CacheShare] = set()
        # Shares whose storage is gone, to be let go at the next use of the cache. Not at
        # once: a storage can be collected (by the cyclic collector) on a thread that holds
        # ``lock`` already, in the middle of a put, which would wait for itself forever.
        self._gone: deque[CacheShare] = deque()

    def share(self) -> CacheShare:
        share = CacheShare(self)
        with self.lock:
            self._let_go()
            self.shares.add(share)
        return share

    def gone(self, share: CacheShare) -> None:
        """``share``'s storage is gone (a finalizer: takes no lock; deque appends are atomic)."""
        self._gone.append(share)

    def _let_go(self) -> None:
        """Free the shares of storages that are gone (the lock held)."""
        while self._gone:
            share = self._gone.popleft()
            self.shares.discard(share)
            self.bytes -= share.bytes
            share.bytes = 0
            share.entries.clear()

    def evict(self) -> None:
        """Back under budget (the lock held)."""
        low = self.max_bytes - self.max_bytes // 8
        while self.bytes > self.max_bytes:
            holders = [share for share in self.shares if share.bytes]
            victim = max(holders, key=lambda share: share.bytes)
            # Over budget, the biggest holder has more than an even share: this takes at
            # least one entry.
            even = self.max_bytes // len(holders)
            entries = victim.entries
            while entries and self.bytes > low and victim.bytes > even:
                _, (_, size) = entries.popitem(last=False)
                victim.bytes -= size
                self.bytes -= size


class CacheShare:
    """One storage's entries in its database's :class:`EntryCache`."""

    def __init__(self, cache: EntryCache) -> None:
        self.cache = cache
        self.entries: OrderedDict[str, tuple[SessionEntry, int]] = OrderedDict()
        self.bytes = 0

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, entry_id: str) -> SessionEntry | None:
        with self.cache.lock:
            self.cache._let_go()
            found = self.entries.get(entry_id)
            if found is None:
                return None
            self.entries.move_to_end(entry_id)
            return found[0]

    def put(self, entry_id: str, entry: SessionEntry, json_chars: int) -> None:
        cache = self.cache
        size = json_chars + ENTRY_OVERHEAD_BYTES
        if size > cache.max_bytes:
            return
        with cache.lock:
            cache._let_go()
            if self not in cache.shares:
                return  # released
            old = self.entries.pop(entry_id, None)
            if old is not None:
                self.bytes -= old[1]
                cache.bytes -= old[1]
            self.entries[entry_id] = (entry, size)
            self.bytes += size
            cache.bytes += size
            if cache.bytes > cache.max_bytes:
                cache.evict()

    def release(self) -> None:
        """Give back every entry: the storage is gone (called by its finalizer, so it only
        leaves word with the cache; see ``EntryCache.gone``)."""
        self.cache.gone(self)


# By database object (SqliteDatabase, PostgresDatabase): entries never change once stored, in
# any replica.
_caches: weakref.WeakKeyDictionary[object, EntryCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def entry_cache(database: object) -> EntryCache:
    """The parse cache of ``database`` (made with ENTRY_CACHE_BYTES as its budget)."""
    with _caches_lock:
        cache = _caches.get(database)
        if cache is None:
            cache = _caches[database] = EntryCache(ENTRY_CACHE_BYTES)
        return cache
