"""Crash safety: a child process writes to sessions in a loop and is killed with SIGKILL at a
random moment, many times over. After each kill the store opens, every write the child saw
return is there, no partial entry exists, and every tree holds together (parents resolve, the
leaf is where the log ends and reaches a root, counters and labels equal what the entries say).

20 kills per case in CI; ``MCP_AGENT_FULL=1`` runs 100. ``MCP_AGENT_SEED`` replays a run.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_support import (
    WriterProcess,
    check_jsonl_store,
    check_sqlite_store,
    size,
    tear_last_line,
)

from mcp_agent.messages import UserMessage
from mcp_agent.sessions import LeafEntry, MessageEntry, SessionEntry
from mcp_agent.sessions.entries import entry_to_json, iso_now

KILLS = size(20, 100)
SEED = int(os.environ.get("MCP_AGENT_SEED") or random.randrange(2**32))

Store = dict[str, list[SessionEntry]]


def crash_many_times(
    backend: str,
    path: Path,
    check: Callable[[Path], Store],
    *writer_args: str,
    kills: int = KILLS,
    after_kill: Callable[[random.Random, Store], tuple[str, str] | None] | None = None,
) -> int:
    """Kill a writer ``kills`` times; returns how many entries were acknowledged in all."""
    rng = random.Random(SEED)
    known: set[tuple[str, str]] = set()  # entries seen in the store after the previous kill
    acknowledged: set[tuple[str, str]] = set()
    sessions: list[str] = []
    torn: set[tuple[str, str]] = set()  # entries whose lines after_kill tore
    for round_ in range(kills):
        where = f"seed {SEED}, kill {round_ + 1} of {kills}"
        writer = WriterProcess(
            backend,
            path,
            rng.randrange(2**32),
            *writer_args,
            *(f"--session={sid}" for sid in sessions),
        )
        if rng.random() < 0.15:
            time.sleep(rng.uniform(0, 0.25))  # while it starts: opening the store, its schema
        else:
            # A few writes acknowledged first, however loaded the machine (a fixed sleep alone
            # killed many writers before their first write), then a kill at a random moment.
            writer.wait_ready()
            writer.wait_acknowledged(rng.randint(1, 3))
            time.sleep(rng.uniform(0, 0.2))
        writer.kill()
        assert not writer.acks.errors, f"{where}: the writer failed: {writer.describe()}"
        acknowledged |= {(sid, e) for sid, ids in writer.acks.entries.items() for e in ids}

        store = check(path) if path.exists() else {}
        present = {(sid, entry.id) for sid, entries in store.items() for entry in entries}
        lost = acknowledged - present
        assert not lost, f"{where}: acknowledged entries missing: {sorted(lost)[:5]}"
        assert not (torn & present), f"{where}: a torn line was loaded"
        # Besides what was acknowledged, only the write in flight at the kill may have landed.
        # (Leaf moves are not acknowledged: a branch switch acknowledges its summary only.)
        nodes = {
            (sid, entry.id)
            for sid, entries in store.items()
            for entry in entries
            if not isinstance(entry, LeafEntry)
        }
        unacknowledged = nodes - known - acknowledged
        assert len(unacknowledged) <= 1, f"{where}: unexpected entries {unacknowledged}"
        known = present
        sessions = sorted(store)
        if after_kill is not None and store:
            tore = after_kill(rng, store)
            if tore is not None:
                torn.add(tore)
    return len(acknowledged)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["full", "normal"])
def test_sqlite_survives_sigkill(tmp_path: Path, durability: str) -> None:
    # "normal" differs only on power loss, so it gets fewer kills.
    kills = KILLS if durability == "full" else KILLS // 2
    db = tmp_path / "crash.db"
    acknowledged = crash_many_times(
        "sqlite", db, check_sqlite_store, f"--durability={durability}", kills=kills
    )
    assert acknowledged  # every round not killed in its start waited for writes (above)


@pytest.mark.slow
def test_jsonl_survives_sigkill_and_torn_last_lines(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()

    def tear(rng: random.Random, store: Store) -> tuple[str, str] | None:
        """Now and then, cut a write short as a power loss would: a partial last line."""
        if rng.random() > 0.3:
            return None
        sid = rng.choice(sorted(store))
        path = folder / f"{sid}.jsonl"
        if not path.read_bytes().endswith(b"\n"):
            return None  # still torn: a writer of ours cuts a torn line before it writes
        entries = store[sid]
        entry = MessageEntry(
            id=f"{rng.getrandbits(32):08x}",
            parent_id=entries[-1].id if entries else None,
            timestamp=iso_now(),
            message=UserMessage(content="never acknowledged " * rng.randint(1, 50)),
        )
        line = entry_to_json(entry)
        tear_last_line(path, rng, line)
        return sid, entry.id

    acknowledged = crash_many_times("jsonl", folder, check_jsonl_store, after_kill=tear)
    assert acknowledged  # every round not killed in its start waited for writes (above)
