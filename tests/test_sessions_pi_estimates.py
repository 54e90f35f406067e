"""pi's token estimates and compaction preparation against ours, on session files made here
(tests/data/pi/estimates.mjs: pi's estimateTokens, estimateContextTokens and
prepareCompaction on each leaf's branch). Where a compaction cuts turns on these estimates, so
they must be pi's to the token. Skipped when Node or pi is not installed (.ci/peers)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_sessions_pi import PI

from mcp_agent.compaction import CompactionError, prepare_compaction
from mcp_agent.compaction.cut_points import _is_cut_candidate
from mcp_agent.compaction.tokens import context_tokens, estimate_tokens
from mcp_agent.sessions import (
    InMemorySessionStorage,
    MessageEntry,
    SessionEntry,
    build_session_context,
    parse_session_text,
)

DATA = Path(__file__).parent / "data" / "pi"

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(PI is None, reason="Node or pi is not installed (.ci/peers)"),
]

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


class PiFile:
    """A pi (version 3) session file's rows, each new entry a child of the last one."""

    def __init__(self) -> None:
        header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
        self.rows: list[dict[str, Any]] = [{**header, "timestamp": "2026-01-15T08:30:00.000Z"}]
        self.leaf: str | None = None

    def add(self, row: dict[str, Any], parent: str | bool | None = True) -> str:
        n = len(self.rows)
        row.update(id=f"e{n:07d}", parentId=self.leaf if parent is True else parent)
        row["timestamp"] = f"2026-01-15T09:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
        self.rows.append(row)
        self.leaf = row["id"]
        return self.leaf

    def message(self, message: dict[str, Any], parent: str | bool | None = True) -> str:
        message.setdefault("timestamp", 1768467600000 + len(self.rows) * 1000)
        return self.add({"type": "message", "message": message}, parent)

    def user(self, content: str | list[dict[str, Any]]) -> str:
        return self.message({"role": "user", "content": content})

    def assistant(self, *content: dict[str, Any], tokens: int = 1_000) -> str:
        usage: dict[str, Any] = {"input": tokens, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        usage["totalTokens"] = tokens
        usage["cost"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
        stop = "toolUse" if any(block["type"] == "toolCall" for block in content) else "stop"
        answer: dict[str, Any] = {"role": "assistant", "content": list(content)}
        answer["api"] = "anthropic-messages"
        answer.update(provider="anthropic", model="m", usage=usage, stopReason=stop)
        return self.message(answer)

    def result(self, call_id: str, *content: dict[str, Any]) -> str:
        result = {"role": "toolResult", "toolCallId": call_id, "toolName": "read"}
        return self.message({**result, "content": list(content), "isError": False})

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in self.rows))
        return path


def pis(path: Path, keeps: Sequence[int], leaves: list[str]) -> list[list[dict[str, Any]]]:
    """pi's results for each budget in ``keeps``, each a list of one per leaf."""
    assert PI is not None
    node, peers = PI
    budgets = ",".join(str(keep) for keep in keeps)
    args = [node, str(DATA / "estimates.mjs"), str(peers), str(path), budgets, *leaves]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(done.stdout))


def ours(storage: InMemorySessionStorage, leaf: str, keep: int) -> dict[str, Any]:
    """What estimates.mjs prints for pi, of our reading of the branch at ``leaf``."""
    branch = storage.get_branch(leaf)
    messages = build_session_context(branch).messages
    found: dict[str, Any] = {"estimates": [estimate_tokens(m) for m in messages]}
    found.update(contextTokens=context_tokens(messages), prepared=None)
    try:
        prepared = prepare_compaction(branch, keep, manual=True)
    except CompactionError:
        return found
    read_files, modified_files = prepared.file_ops.lists()
    found["prepared"] = {
        "firstKeptEntryId": prepared.first_kept_entry_id,
        "summarized": [m.role for m in prepared.messages_to_summarize],
        "turnPrefix": [m.role for m in prepared.turn_prefix_messages],
        "isSplitTurn": prepared.is_split_turn,
        "tokensBefore": prepared.tokens_before,
        "previousSummary": prepared.previous_summary,
        "readFiles": read_files,
        "modifiedFiles": modified_files,
    }
    return found


def kept_past_the_last_cut_point(branch: Sequence[SessionEntry], keep: int) -> bool:
    """Whether the messages after the branch's last place to cut (tool results) hold ``keep``
    tokens: there pi's cut keeps everything, ours cuts at that place (find_cut_point)."""
    last = max((i for i, entry in enumerate(branch) if _is_cut_candidate(entry)), default=-1)
    after = [e.message for e in branch[last + 1 :] if isinstance(e, MessageEntry)]
    return sum(estimate_tokens(m) for m in after) >= keep


def assert_pi_agrees(file: PiFile, keeps: Sequence[int], tmp_path: Path) -> int:
    """At every entry of ``file`` as the leaf, keeping each of ``keeps``, ours is pi's (a turn pi calls split with
    nothing before the cut is one that is not split, as ours calls it; where the budget is
    reached past the last place to cut, only the estimates are compared). How many leaves
    were compared whole."""
    path = file.write(tmp_path / "session.jsonl")
    parsed = parse_session_text(path.read_text())
    storage = InMemorySessionStorage(parsed.header, parsed.entries)
    leaves = [entry.id for entry in parsed.entries]
    whole = 0
    for keep, results in zip(keeps, pis(path, keeps, leaves), strict=True):
        whole += _agree(storage, keep, dict(zip(leaves, results, strict=True)))
    return whole


def _agree(storage: InMemorySessionStorage, keep: int, theirs_at: dict[str, dict[str, Any]]) -> int:
    whole = 0
    for leaf, theirs in theirs_at.items():
        mine = ours(storage, leaf, keep)
        prepared = theirs["prepared"]
        if prepared is not None and not prepared["turnPrefix"]:
            prepared["isSplitTurn"] = False
        if kept_past_the_last_cut_point(storage.get_branch(leaf), keep):
            mine.pop("prepared")
            theirs.pop("prepared")
        else:
            whole += 1
        assert mine == theirs, (keep, leaf)
    return whole


def test_a_cut_at_a_question_after_a_settings_change_splits_the_turn_before_as_in_pi(
    tmp_path: Path,
) -> None:
    """pi keeps the settings entries before a cut with it, and a cut that then starts at a
    model or thinking level change, not at a question, splits the turn before it: that turn
    is summarised as the prefix of a split turn. Ours called it no split turn and summarised
    it with the history."""
    file = PiFile()
    for n in range(4):
        file.user(f"question {n} " * 60)
        file.assistant(text(f"answer {n} " * 80))
        if n % 2 == 0:
            file.add({"type": "model_change", "provider": "openai", "modelId": f"gpt-{n}"})
        else:
            file.add({"type": "thinking_level_change", "thinkingLevel": "high"})
            file.add({"type": "label", "targetId": "e0000001", "label": f"l{n}"})
    assert assert_pi_agrees(file, [400], tmp_path) == len(file.rows) - 1


def test_custom_messages_and_branch_summaries_before_a_cut_go_with_it_as_in_pi(
    tmp_path: Path,
) -> None:
    """pi's cut counts only message entries toward what it keeps, and keeps the custom
    messages and branch summaries just before it with it, as it keeps settings. Ours counted
    them and stopped at them, and took a custom role's message for the start of a turn."""
    file = PiFile()
    file.user("start " * 100)
    file.assistant(text("first answer " * 60))
    custom = {"type": "custom_message", "customType": "note", "display": True}
    file.add({**custom, "content": "a note from an extension " * 40})
    file.add({"type": "branch_summary", "fromId": "e0000002", "summary": "tried a " * 50})
    file.user("next " * 100)
    file.assistant(text("second answer " * 60))
    file.message({"role": "custom", "customType": "x", "content": "inline " * 80, "display": 1})
    file.assistant(text("third answer " * 60))
    file.add({**custom, "content": [text("another note " * 40)]})
    file.user("last " * 100)
    file.assistant(text("last answer " * 60))
    assert assert_pi_agrees(file, [150, 300, 500], tmp_path) == 3 * (len(file.rows) - 1)


def test_images_in_a_user_message_count_nothing_as_in_pi(tmp_path: Path) -> None:
    """pi's estimate counts a user message's text only (a tool result's or a custom
    message's image counts 4,800 characters), and a role it does not know (a version 3
    file's hookMessage) nothing. Ours counted 1,200 tokens for each image a user sent, and
    the unknown role's text, and so cut elsewhere."""
    file = PiFile()
    file.user([text("look at this " * 20), IMAGE])
    file.assistant(text("I see it. " * 40))
    hook = {"role": "hookMessage", "customType": "h", "display": True}
    file.message({**hook, "content": "from a hook " * 40})
    file.user([text("and these " * 20), IMAGE, IMAGE])
    call = {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a.png"}}
    file.assistant(text("Both. " * 30), call)
    file.result("c1", text("an image:"), IMAGE)
    file.message({"role": "custom", "customType": "x", "content": [IMAGE], "display": True})
    file.assistant(text("Done. " * 40))
    file.user([IMAGE])
    file.assistant(text("Again. " * 40))
    assert assert_pi_agrees(file, [200, 1_500], tmp_path) > 0


def test_characters_outside_the_bmp_count_two_as_in_pis_javascript(tmp_path: Path) -> None:
    """pi's estimate counts a string's length in UTF-16 code units: an emoji (or any
    character past U+FFFF) is two. Ours counted one, so a session in emoji or in rare CJK
    ideographs was estimated at about half of pi's, and cut elsewhere."""
    file = PiFile()
    file.user("😀 " * 300)
    thinking = {"type": "thinking", "thinking": "🤔" * 150}
    call = {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "🎈😀.txt"}}
    file.assistant(text("🎉" * 200), thinking, call)
    file.result("c1", text("𠀀𠀁" * 200))
    file.assistant(text("done, é and 中 are one unit each " * 10))
    bash = {"role": "bashExecution", "command": "echo 🚀", "output": "🚀\n" * 100}
    file.message({**bash, "exitCode": 0, "cancelled": False, "truncated": False})
    file.user("🙂" * 300)
    file.assistant(text("ok"))
    assert assert_pi_agrees(file, [300, 700], tmp_path) > 0


def test_tool_call_arguments_count_as_javascript_writes_them(tmp_path: Path) -> None:
    """pi counts a tool call's arguments as JSON.stringify writes them: 1.0 as 1, 1e-07 as
    1e-7, 1e+17 in its eighteen digits, an integer past 2**53 as the float JavaScript reads.
    Ours counted Python's JSON, so a file another program wrote (or an agent's numeric
    arguments) was estimated, and cut, elsewhere."""
    file = PiFile()
    file.user("compute")
    numbers = {"whole": 1.0, "small": 1e-7, "large": 1e17, "huge": 2.5e25, "id": 2**60}
    arguments = {**numbers, "list": [0.5, -3.0, None, True, {"x": "é😀"}]}
    call = {"type": "toolCall", "id": "c1", "name": "calc", "arguments": arguments}
    file.assistant(call)
    file.result("c1", text("done"))
    file.assistant(text("ok"))
    assert assert_pi_agrees(file, [10, 1_000], tmp_path) > 0
