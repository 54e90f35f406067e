"""Values worked out for open sessions and kept for the next read, within one budget.

A branch, a context or an outline of a session never changes once worked out for a given key
(its leaf, or its count of entries: every change appends an entry), so a read may serve it
again. Each kind of value is kept in one :class:`Kept` for every session open in the process:
a server with hundreds of sessions open keeps what its clients read most recently, and the
memory it takes is bounded by the budget, not by how many sessions are open.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    """Values by (owner, key), least recently used first, bounded in total ``weigh``-t by
    ``budget`` and in count by ``per_owner`` for each owner (a session's storage). A value
    heavier than ``largest`` is not kept. An owner's values go when it is garbage-collected.
    Thread-safe: storages are read from worker threads."""

    def __init__(
        self, budget: int, largest: int, per_owner: int, weigh: Callable[[V], int]
    ) -> None:
        self.budget = budget
        self.largest = largest
        self.per_owner = per_owner
        self.weigh = weigh
        self.weight = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[int, K], tuple[V, int]] = OrderedDict()
        self._owned: dict[int, OrderedDict[K, None]] = {}  # each owner's keys, oldest first
        self._tokens: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._next_token = itertools.count()
        # Owners collected, let go at the next use. Not at once: an owner can be collected on
        # a thread that holds ``_lock`` already, which would wait for itself forever.
        self._gone: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, owner: object, key: K) -> V | None:
        with self._lock:
            self._let_go()
            token = self._tokens.get(owner)
            if token is None:
                return None
            found = self._items.get((token, key))
            if found is None:
                return None
            self._items.move_to_end((token, key))
            self._owned[token].move_to_end(key)
            return found[0]

    def put(self, owner: object, key: K, value: V) -> None:
        weight = max(1, self.weigh(value))
        if weight > self.largest:
            return
        with self._lock:
            self._let_go()
            token = self._token(owner)
            owned = self._owned[token]
            self._drop(token, key)
            self._items[(token, key)] = (value, weight)
            owned[key] = None
            self.weight += weight
            while len(owned) > self.per_owner:
                self._drop(token, next(iter(owned)))
            while self.weight > self.budget:
                oldest_token, oldest_key = next(iter(self._items))
                self._drop(oldest_token, oldest_key)

    def get_or_work(self, owner: object, key: K, work: Callable[[], V]) -> V:
        """The value kept for ``key``, else what ``work`` gives (then kept)."""
        found = self.get(owner, key)
        if found is None:
            found = work()
            self.put(owner, key, found)
        return found

    def forget(self, owner: object) -> None:
        """Let go of every value of ``owner``."""
        with self._lock:
            token = self._tokens.get(owner)
            if token is not None:
                self._forget(token)

    def _token(self, owner: object) -> int:
        token = self._tokens.get(owner)
        if token is None:
            token = next(self._next_token)
            self._tokens[owner] = token
            self._owned[token] = OrderedDict()
            # A token, not id(owner): an id is reused once its object is gone.
            # Not at exit: the owner is alive then, and a worker thread may still use it.
            weakref.finalize(owner, self._gone.append, token).atexit = False
        return token

    def _drop(self, token: int, key: K) -> None:
        found = self._items.pop((token, key), None)
        if found is not None:
            self.weight -= found[1]
            self._owned[token].pop(key, None)

    def _forget(self, token: int) -> None:
        for key in list(self._owned.get(token, ())):
            self._drop(token, key)

    def _let_go(self) -> None:
        while self._gone:
            token = self._gone.popleft()
            self._forget(token)
            self._owned.pop(token, None)
