"""A child process for the crash and concurrency tests: it writes to sessions in a loop and
prints one acknowledgement line per write that returned, flushed at once.

    python tests/reliability_writer.py BACKEND PATH SEED [--ops N] [--session ID ...]
        [--no-create] [--start-at TIME] [--pause SECONDS] [--durability full|normal]

BACKEND is ``sqlite`` (PATH is the database file) or ``jsonl`` (PATH is the folder). Output:

    READY                       the repo is open, writes begin
    E <session id> <entry id>   this entry was stored (the call that wrote it returned)
    S <session id>              this session was created (its first entries follow as E lines)
    DONE                        all --ops writes are done (without --ops the loop never ends)

Any error is printed as ``ERROR <type>: <text>`` and the process exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from multiprocessing.connection import Connection

from mcp_agent.messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UsageCost,
    UserMessage,
)
from mcp_agent.sessions import JsonlSessionRepo, Session, SqliteSessionRepo, jsonl
from mcp_agent.sessions.repo import BaseSessionRepo

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def ack(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def text_of(rng: random.Random) -> str:
    roll = rng.random()
    # Mostly short, some spanning several database pages, a few very long.
    size = rng.randint(10, 200) if roll < 0.9 else rng.randint(2_000, 8_000)
    if roll > 0.99:
        size = 100_000
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words) + " é ✓"


class Writer:
    def __init__(self, repo: BaseSessionRepo, rng: random.Random, session_ids: list[str]):
        self.repo = repo
        self.rng = rng
        self.sessions: dict[str, Session] = {sid: repo.open(sid) for sid in session_ids}
        self.written: dict[str, list[str]] = {sid: [] for sid in session_ids}

    def create(self) -> None:
        name = self.rng.choice([None, "crash test " + self.rng.choice(WORDS)])
        session = self.repo.create(name=name, cwd="/tmp", metadata={"by": "reliability_writer"})
        ack(f"S {session.id}")
        self.sessions[session.id] = session
        self.written[session.id] = []
        for entry in session.get_entries():
            self.acknowledge(session.id, entry.id)

    def acknowledge(self, session_id: str, entry_id: str | None) -> None:
        assert entry_id is not None
        self.written[session_id].append(entry_id)
        ack(f"E {session_id} {entry_id}")

    def step(self) -> None:
        rng = self.rng
        if not self.sessions or rng.random() < 0.02:
            self.create()
            return
        sid = rng.choice(list(self.sessions))
        session = self.sessions[sid]
        mine = self.written[sid]
        roll = rng.random()
        if roll < 0.40:
            self.acknowledge(sid, session.append_message(UserMessage(content=text_of(rng))))
        elif roll < 0.65:
            calls = [
                ToolCall(id=f"call_{rng.getrandbits(32):08x}", name="lookup", arguments={"q": w})
                for w in rng.sample(WORDS, rng.randint(0, 2))
            ]
            tokens = rng.randint(1, 500)
            assistant = AssistantMessage(
                content=[TextContent(text=text_of(rng)), *calls],
                provider="scripted",
                model="scripted",
                usage=Usage(
                    input=tokens,
                    output=tokens // 2,
                    cache_read=tokens // 4,
                    total_tokens=tokens + tokens // 2,
                    cost=UsageCost(total=tokens / 1e6),
                ),
                stop_reason=StopReason.TOOL_USE if calls else StopReason.STOP,
            )
            self.acknowledge(sid, session.append_message(assistant))
            for call in calls:
                result = ToolResultMessage(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    content=[TextContent(text=text_of(rng))],
                )
                self.acknowledge(sid, session.append_message(result))
        elif roll < 0.75 and mine:
            label = rng.choice([None, rng.choice(WORDS)])
            self.acknowledge(sid, session.append_label(rng.choice(mine), label))
        elif roll < 0.80:
            self.acknowledge(sid, session.set_name(rng.choice(["", "named " + rng.choice(WORDS)])))
        elif roll < 0.87:
            self.acknowledge(sid, session.append_custom("note", {"n": rng.random()}))
        elif roll < 0.92 and mine:
            # A branch switch: a leaf move, then a branch summary under the target.
            summary = {"summary": "left a branch about " + rng.choice(WORDS)}
            self.acknowledge(sid, session.move_to(rng.choice(mine), summary))
        elif roll < 0.95:
            # Searching indexes the text appended so far (its own write transaction).
            self.repo.list(query=rng.choice(WORDS), limit=5)
        else:
            self.acknowledge(sid, session.append_model_change("scripted", rng.choice(WORDS)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=["sqlite", "jsonl"])
    parser.add_argument("path")
    parser.add_argument("seed", type=int)
    parser.add_argument("--ops", type=int, default=None, help="stop after this many writes")
    parser.add_argument("--session", action="append", default=[], help="write to this session")
    parser.add_argument(
        "--start-at", type=float, default=None, help="wait until this time.time() to begin"
    )
    parser.add_argument(
        "--pause", type=float, default=0.0, help="sleep up to this many seconds between writes"
    )
    parser.add_argument("--durability", choices=["full", "normal"], default="full")
    parser.add_argument(
        "--no-create", action="store_true", help="never create sessions (concurrency test)"
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    # An append waits a second for a torn last line to be finished (pi may be writing it)
    # before it cuts it off: no one else writes here, and a writer lives a fraction of that.
    jsonl.TORN_WAIT = 0.001
    if args.start_at is not None:
        # Several writers start together, opening the store included (schema creation races).
        time.sleep(max(0.0, args.start_at - time.time()))
    try:
        repo: BaseSessionRepo = (
            SqliteSessionRepo(args.path, durability=args.durability)
            if args.backend == "sqlite"
            else JsonlSessionRepo(args.path)
        )
        writer = Writer(repo, rng, args.session)
        if args.no_create and not writer.sessions:
            raise SystemExit("--no-create needs --session")
        ack("READY")
        done = 0
        while args.ops is None or done < args.ops:
            if args.no_create:
                # Appends only: one linear chain per session (no branch switches, no creates).
                sid = rng.choice(list(writer.sessions))
                text = f"{args.seed}:{done}"
                writer.acknowledge(
                    sid, writer.sessions[sid].append_message(UserMessage(content=text))
                )
            else:
                writer.step()
            done += 1
            if args.pause:
                time.sleep(rng.uniform(0, args.pause))
        repo.close()
        ack("DONE")
        return 0
    except Exception as error:
        ack(f"ERROR {type(error).__name__}: {error}")
        traceback.print_exc()
        return 1


def forked(argv: list[str], out: Connection, err: Connection) -> None:
    """``main`` in a process forked from one that imported this module (reliability_support's
    forkserver), its output on ``out`` and ``err``: what a started script prints on its stdout
    and stderr. An acknowledgement is written at once, as a started script's is."""
    sys.stdout = open(os.dup(out.fileno()), "w", buffering=1, encoding="utf-8")
    sys.stderr = open(os.dup(err.fileno()), "w", buffering=1, encoding="utf-8")
    out.close()
    err.close()
    raise SystemExit(main(argv))


if __name__ == "__main__":
    raise SystemExit(main())
