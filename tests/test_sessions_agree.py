"""The three backends agree: random operation sequences give the same log, context, stats and
tree on memory, SQLite and JSONL, also after reopening from disk."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_agent.messages import AssistantMessage, BaseMessage, TextContent, Usage, UserMessage
from mcp_agent.sessions import (
    InMemorySessionRepo,
    JsonlSessionRepo,
    Session,
    SessionError,
    SqliteSessionRepo,
)

ID_FIELDS = ("id", "parentId", "targetId", "firstKeptEntryId", "fromId")

words = st.sampled_from(["alpha", "beta", "gamma", "delta"])
index = st.integers(min_value=0, max_value=50)
operation = st.one_of(
    st.tuples(st.just("user"), words),
    st.tuples(st.just("assistant"), words, st.integers(0, 500)),
    st.tuples(st.just("thinking"), st.sampled_from(["low", "high", "off"])),
    st.tuples(st.just("model"), words),
    st.tuples(st.just("tools"), st.lists(words, max_size=3)),
    st.tuples(st.just("compact"), index, st.booleans()),
    st.tuples(st.just("custom"), words),
    st.tuples(st.just("custom_message"), words, st.booleans()),
    st.tuples(st.just("label"), index, st.one_of(st.none(), words)),
    st.tuples(st.just("name"), words),
    st.tuples(st.just("move"), st.one_of(st.none(), index)),
    st.tuples(st.just("move_summary"), index, words),
    st.tuples(
        st.just("bad_move"),
    ),
)


def apply(session: Session, operations: list[tuple[Any, ...]]) -> None:
    for op in operations:
        ids = [e.id for e in session.get_entries() if e.type != "leaf"]

        def pick(k: int, ids: list[str] = ids) -> str:
            return ids[k % len(ids)]

        kind = op[0]
        if kind == "user":
            session.append_message(UserMessage(content=op[1], timestamp=1))
        elif kind == "assistant":
            usage = Usage(input=op[2], output=1, total_tokens=op[2] + 1)
            session.append_message(
                AssistantMessage(
                    content=[TextContent(text=op[1])],
                    provider="p",
                    model=op[1],
                    usage=usage,
                    timestamp=2,
                )
            )
        elif kind == "thinking":
            session.append_thinking_level_change(op[1])
        elif kind == "model":
            session.append_model_change("prov", op[1])
        elif kind == "tools":
            session.append_active_tools_change(op[1])
        elif kind == "compact" and ids:
            tail: list[BaseMessage] | None = (
                [UserMessage(content="tail", timestamp=3)] if op[2] else None
            )
            session.append_compaction("summary", pick(op[1]), 10, retained_tail=tail)
        elif kind == "custom":
            session.append_custom("kind", {"w": op[1]})
        elif kind == "custom_message":
            session.append_custom_message("note", op[1], display=op[2])
        elif kind == "label" and ids:
            session.append_label(pick(op[1]), op[2])
        elif kind == "name":
            session.set_name(op[1])
        elif kind == "move":
            session.move_to(pick(op[1]) if ids and op[1] is not None else None)
        elif kind == "move_summary" and ids:
            session.move_to(pick(op[1]), {"summary": op[2]})
        elif kind == "bad_move":
            try:
                session.move_to("ffffffff")
            except SessionError:
                pass


def normalized(session: Session) -> dict[str, Any]:
    """Everything observable, with ids renamed by order of appearance and times dropped."""
    entries = session.get_entries()
    # Read by ids that may be None (a parentless entry's parent, an empty session's leaf).
    names: dict[str | None, str] = {e.id: f"#{n}" for n, e in enumerate(entries)}

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: (names.get(v, v) if k in ID_FIELDS else scrub(v))
                for k, v in value.items()
                if k != "timestamp"
            }
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    stats = session.stats().to_json_dict()
    stats.pop("firstTimestamp")
    stats.pop("lastTimestamp")
    return {
        "entries": [scrub(e.to_json_dict()) for e in entries],
        "leaf": names.get(session.leaf_id),
        "context": scrub(session.build_context().to_json_dict()),
        "stats": stats,
        "name": session.name,
        "labels": {names[e.id]: session.get_label(e.id) for e in entries},
        "tree": [scrub(node.to_json_dict()) for node in session.tree()],
        "compaction_path": [names[e.id] for e in session.get_path_to_root_or_compaction()]
        if session.leaf_id
        else [],
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=25))
def test_backends_agree(operations: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repos = [
            InMemorySessionRepo(),
            SqliteSessionRepo(root / "s.db"),
            JsonlSessionRepo(root / "j"),
        ]
        results = []
        for repo in repos:
            session = repo.create()
            apply(session, operations)
            results.append((repo, session.id, normalized(session)))
        expected = results[0][2]
        for repo, _session_id, result in results[1:]:
            assert result == expected
            repo.close()
        # what was written reads back the same
        for reopened, (_, session_id, _) in zip(
            [SqliteSessionRepo(root / "s.db"), JsonlSessionRepo(root / "j")],
            results[1:],
            strict=True,
        ):
            assert normalized(reopened.open(session_id)) == expected
            reopened.close()
