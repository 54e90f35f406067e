"""sessions.kept: values kept for open sessions within one budget for all of them."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from mcp_agent.sessions import SqliteSessionRepo
from mcp_agent.sessions.kept import Kept
from mcp_agent.sessions.sql.repo import OPEN_SESSIONS


class Owner:
    """Stands for a session's storage: hashable, weakly referable."""


def test_a_value_is_kept_for_its_owner_and_key_only() -> None:
    kept: Kept[str, list[int]] = Kept(100, 50, 4, len)
    a, b = Owner(), Owner()
    kept.put(a, "leaf", [1, 2, 3])
    assert kept.get(a, "leaf") == [1, 2, 3]
    assert kept.get(b, "leaf") is None
    assert kept.get(a, "other") is None
    assert kept.weight == 3


def test_the_budget_holds_for_every_owner_together_least_recently_used_first() -> None:
    kept: Kept[int, list[int]] = Kept(10, 10, 4, len)
    owners = [Owner() for _ in range(4)]
    for owner in owners:
        kept.put(owner, 0, [0] * 3)
    # 12 rows over a budget of 10: the first owner's value went
    assert kept.weight <= 10
    assert kept.get(owners[0], 0) is None
    assert kept.get(owners[1], 0) is not None  # used now: the newest
    kept.put(owners[0], 0, [0] * 3)
    assert kept.get(owners[2], 0) is None  # the least recently used went
    assert kept.get(owners[1], 0) is not None
    assert kept.weight == sum(3 for o in owners if kept.get(o, 0) is not None)


def test_each_owner_keeps_at_most_per_owner_values_and_none_too_heavy() -> None:
    kept: Kept[int, list[int]] = Kept(1000, 5, 2, len)
    owner = Owner()
    for key in range(3):
        kept.put(owner, key, [key])
    assert kept.get(owner, 0) is None
    assert kept.get(owner, 1) == [1] and kept.get(owner, 2) == [2]
    kept.put(owner, 9, [0] * 6)  # heavier than the largest kept
    assert kept.get(owner, 9) is None
    assert kept.get(owner, 1) == [1]
    # a key put again replaces its value and its weight
    kept.put(owner, 1, [1, 1, 1])
    assert kept.get(owner, 1) == [1, 1, 1]
    assert kept.weight == 4


def test_get_or_work_works_once() -> None:
    kept: Kept[str, list[int]] = Kept(100, 100, 4, len)
    owner = Owner()
    calls: list[int] = []

    def work() -> list[int]:
        calls.append(1)
        return [7]

    assert kept.get_or_work(owner, "k", work) == [7]
    assert kept.get_or_work(owner, "k", work) == [7]
    assert calls == [1]


def test_an_owner_gone_gives_its_values_back() -> None:
    kept: Kept[str, list[int]] = Kept(100, 100, 4, len)
    owner, other = Owner(), Owner()
    kept.put(owner, "a", [1, 2])
    kept.put(other, "a", [1])
    del owner
    gc.collect()
    assert kept.get(other, "a") == [1]  # the next use lets the gone owner's values go
    assert kept.weight == 1 and len(kept) == 1
    kept.forget(other)
    assert kept.weight == 0 and kept.get(other, "a") is None


def test_threads_keep_the_books_straight() -> None:
    kept: Kept[int, list[int]] = Kept(500, 50, 8, len)
    owners = [Owner() for _ in range(8)]

    def use(index: int) -> None:
        for n in range(2000):
            owner = owners[(index + n) % len(owners)]
            kept.put(owner, n % 11, [0] * (n % 7))
            kept.get(owner, (n + 3) % 11)

    threads = [threading.Thread(target=use, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert kept.weight <= 500
    total = 0
    for owner in owners:
        for key in range(11):
            found = kept.get(owner, key)
            if found is not None:
                total += max(1, len(found))
    assert total == kept.weight


def test_a_repo_keeps_many_sessions_open(tmp_path: Path) -> None:
    # A server's clients work in many sessions at once: going back to one of them finds it
    # open (no second read of its row and header, its caches as they were).
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        sessions = [repo.create() for _ in range(min(50, OPEN_SESSIONS))]
        storages = [session.storage for session in sessions]
        for session in sessions:
            repo.open(session.id).append_entry(
                {"type": "message", "message": {"role": "user", "content": "hi"}}
            )
        assert all(
            repo.open(session.id).storage is storage
            for session, storage in zip(sessions, storages, strict=True)
        )
