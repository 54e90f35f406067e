"""The contract every session backend passes: memory, SQLite, JSONL and PostgreSQL run the same
tests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict, Unpack

import pytest
from narrow import narrow, present

from mcp_agent.messages import (
    AssistantMessage,
    CompactionSummaryMessage,
    ImageContent,
    TextContent,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    Usage,
    UsageCost,
    UserMessage,
)
from mcp_agent.sessions import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    InMemorySessionRepo,
    JsonlSessionRepo,
    MessageEntry,
    Session,
    SessionContextBuildOptions,
    SessionError,
    SqliteSessionRepo,
)
from mcp_agent.sessions.entries import iso_now
from mcp_agent.sessions.pi import export_text
from mcp_agent.sessions.repo import BaseSessionRepo

DATA = Path(__file__).parent / "data" / "pi"


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


class TokenCounts(TypedDict, total=False):
    """The token counts of a Usage (its cost left at zero)."""

    input: int
    output: int
    cache_read: int
    cache_write: int
    total_tokens: int


def assistant(
    text: str, provider: str = "anthropic", model: str = "claude", **usage: Unpack[TokenCounts]
) -> AssistantMessage:
    return AssistantMessage(
        content=[TextContent(text=text)],
        provider=provider,
        model=model,
        api="anthropic-messages",
        usage=Usage(**usage),
        timestamp=2,
    )


def texts(session: Session) -> list[str]:
    out = []
    for message in session.build_context().messages:
        text = getattr(message, "text", None)
        out.append(text if isinstance(text, str) else getattr(message, "summary", message.role))
    return out


RepoFactory = Callable[[], object]


@pytest.fixture(params=["memory", "sqlite", "jsonl", "jsonl-pi", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], object]]:
    """A function returning a repo; for the persistent backends each call opens the same
    store afresh, as a restarted process would (PostgreSQL: a database of the test's own on
    the test run's cluster)."""
    made: list[BaseSessionRepo] = []
    memory = InMemorySessionRepo()
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""

    def make() -> object:
        if request.param == "memory":
            return memory
        if request.param == "postgres":
            from mcp_agent.sessions.postgres import PostgresSessionRepo

            repo: BaseSessionRepo = PostgresSessionRepo(url, max_connections=4)
        elif request.param == "sqlite":
            repo = SqliteSessionRepo(tmp_path / "sessions.db")
        elif request.param == "jsonl":
            repo = JsonlSessionRepo(tmp_path / "sessions", layout="flat")
        else:
            repo = JsonlSessionRepo(tmp_path / "sessions", layout="pi")  # pi's folders and names
        made.append(repo)
        return repo

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for repo in made:
        repo.close()


@pytest.fixture
def repo(backend: Callable[[], object]):
    return backend()


# --- appends and the leaf ---------------------------------------------------------------------


def test_appends_chain_from_the_leaf_with_short_unique_ids(repo) -> None:
    session = repo.create()
    ids = [session.append_message(user(f"m{i}")) for i in range(5)]
    assert all(re.fullmatch(r"[0-9a-f]{8}", i) for i in ids)
    assert len(set(ids)) == 5
    assert session.leaf_id == ids[-1]
    branch = session.get_branch()
    assert [e.id for e in branch] == ids
    assert branch[0].parent_id is None
    assert [e.parent_id for e in branch[1:]] == ids[:-1]
    assert session.get_entry(ids[2]).message.content == "m2"
    assert session.get_entry("nope0000") is None


def test_every_append_method_writes_its_entry_type(repo) -> None:
    session = repo.create()
    session.append_message(user("hi"))
    session.append_thinking_level_change(ThinkingLevel.HIGH)
    session.append_model_change("openai", "gpt-4o")
    session.append_active_tools_change(["bash", "read"])
    session.append_custom("app-state", {"k": 1})
    session.append_custom_message("note", "remember this", display=False, details={"a": 1})
    target = session.leaf_id
    shown = session.append_entry({"type": "custom_message", "customType": "n", "content": "c"})
    assert narrow(session.get_entry(shown), CustomMessageEntry).display is True  # as appended
    session.append_label(target, "bookmark")
    session.set_name("  my session  ")
    kinds = [e.type for e in session.get_entries()]
    assert kinds == [
        "message",
        "thinking_level_change",
        "model_change",
        "active_tools_change",
        "custom",
        "custom_message",
        "custom_message",
        "label",
        "session_info",
    ]
    assert session.get_label(target) == "bookmark"
    assert session.name == "my session"
    assert [e.type for e in session.find_entries("custom")] == ["custom"]
    context = session.build_context()
    assert context.thinking_level == "high"
    assert context.model == {"provider": "openai", "modelId": "gpt-4o"}
    assert context.active_tool_names == ["bash", "read"]
    # custom entries stay out of the context; custom messages go in even when not displayed
    assert [m.role for m in context.messages] == ["user", "custom", "custom"]
    assert context.messages[1].details == {"a": 1}


def test_assistant_message_sets_the_model_and_a_later_change_wins(repo) -> None:
    session = repo.create()
    session.append_model_change("openai", "gpt-4o")
    session.append_message(assistant("x", provider="anthropic", model="claude-sonnet"))
    assert session.build_context().model == {"provider": "anthropic", "modelId": "claude-sonnet"}
    session.append_model_change("google", "gemini")
    assert session.build_context().model == {"provider": "google", "modelId": "gemini"}


def test_empty_session_builds_an_empty_context(repo) -> None:
    context = repo.create().build_context()
    assert context.messages == []
    assert context.thinking_level == "off"
    assert context.model is None
    assert context.active_tool_names is None


# --- compaction -------------------------------------------------------------------------------


def seed_compaction_session(repo) -> tuple[Session, list[str]]:
    """The seed's compaction example: msg_1 .. msg_16, compacted keeping msg_11 onwards."""
    session = repo.create()
    ids = []
    for i in range(1, 17):
        message = user(f"msg_{i}") if i % 2 else assistant(f"msg_{i}")
        ids.append(session.append_message(message))
    return session, ids


def test_compaction_keeps_entries_from_first_kept(repo) -> None:
    session, ids = seed_compaction_session(repo)
    session.append_compaction("Previous conversation summary", ids[10], 100_000)
    assert texts(session) == ["Previous conversation summary"] + [f"msg_{i}" for i in range(11, 17)]
    session.append_message(user("after"))
    assert texts(session)[-1] == "after"
    summary = session.build_context().messages[0]
    assert summary.role == "compactionSummary"
    assert narrow(summary, CompactionSummaryMessage).tokens_before == 100_000


def test_compaction_with_retained_tail_replaces_everything_before(repo) -> None:
    session, ids = seed_compaction_session(repo)
    tail = [user("kept question"), assistant("kept answer")]
    session.append_compaction("summary", ids[1], 500, {"n": 1}, retained_tail=tail)
    session.append_message(user("next"))
    assert texts(session) == ["summary", "kept question", "kept answer", "next"]
    compaction = narrow(session.find_entries("compaction")[0], CompactionEntry)
    assert compaction.details == {"n": 1}
    kept = present(compaction.retained_tail)
    assert [m.to_json_dict() for m in kept] == [m.to_json_dict() for m in tail]
    # the walk for the context stops at a compaction with a retained tail
    assert session.get_path_to_root_or_compaction()[0].type == "compaction"


def test_newest_compaction_wins_and_older_ones_inside_the_kept_range_are_skipped(repo) -> None:
    session = repo.create()
    a = session.append_message(user("a"))
    session.append_message(assistant("b"))
    session.append_compaction("first", a, 10)
    c = session.append_message(user("c"))
    session.append_message(assistant("d"))
    session.append_compaction("second", a, 20)
    session.append_message(user("e"))
    assert texts(session) == ["second", "a", "b", "c", "d", "e"]
    path = session.get_path_to_root_or_compaction()
    assert path[0].id == a
    session.append_compaction("third", c, 30)
    assert texts(session) == ["third", "c", "d", "e"]


def test_compaction_state_before_it_still_applies(repo) -> None:
    session = repo.create()
    session.append_thinking_level_change("low")
    session.append_model_change("openai", "gpt")
    first = session.append_message(user("a"))
    session.append_compaction("s", first, 1)
    context = session.build_context()
    assert context.thinking_level == "low"
    assert context.model == {"provider": "openai", "modelId": "gpt"}


def test_compaction_with_unknown_first_kept_entry_is_refused(repo) -> None:
    session = repo.create()
    session.append_message(user("a"))
    before = len(session.get_entries())
    with pytest.raises(SessionError) as error:
        session.append_compaction("s", "deadbeef", 1)
    assert error.value.code == "not_found"
    assert len(session.get_entries()) == before


# --- branches ---------------------------------------------------------------------------------


def test_move_to_branches_like_the_seed_example(repo) -> None:
    session = repo.create()
    e1 = session.append_message(user("E1"))
    e2 = session.append_message(assistant("E2"))
    session.append_message(user("E3"))
    e4 = session.append_message(assistant("E4"))
    assert session.move_to(e2) is None
    assert session.leaf_id == e2
    session.append_message(user("E3'"))
    session.append_message(assistant("E4'"))
    assert texts(session) == ["E1", "E2", "E3'", "E4'"]
    # the old branch is still there
    assert [e.message.text for e in session.get_branch(e4)] == ["E1", "E2", "E3", "E4"]
    assert [e.id for e in session.children(e2)] != []
    assert len(session.children(e2)) == 2
    assert [e.id for e in session.children(None)] == [e1]


def test_move_to_with_summary_adds_a_branch_summary_under_the_target(repo) -> None:
    session = repo.create()
    session.append_message(user("E1"))
    e2 = session.append_message(assistant("E2"))
    session.append_message(user("E3"))
    summary_id = session.move_to(
        e2, {"summary": "User changed direction", "details": {"focus": "files"}}
    )
    entry = session.get_entry(summary_id)
    assert entry.type == "branch_summary"
    assert entry.parent_id == e2 and entry.from_id == e2
    assert entry.details == {"focus": "files"}
    assert session.leaf_id == summary_id
    session.append_message(user("Let's work with files"))
    context = session.build_context()
    assert [m.role for m in context.messages] == ["user", "assistant", "branchSummary", "user"]
    assert context.messages[2].from_id == e2


def test_move_to_unknown_entry_fails_and_writes_nothing(repo) -> None:
    session = repo.create()
    session.append_message(user("a"))
    before = [e.id for e in session.get_entries()]
    leaf = session.leaf_id
    for call in (
        lambda: session.move_to("00000000"),
        lambda: session.move_to("00000000", {"summary": "x"}),
        lambda: session.append_label("00000000", "x"),
    ):
        with pytest.raises(SessionError) as error:
            call()
        assert error.value.code == "not_found"
        assert "00000000" in str(error.value)
    assert [e.id for e in session.get_entries()] == before
    assert session.leaf_id == leaf


def test_move_to_none_starts_a_new_root(repo) -> None:
    session = repo.create()
    session.append_message(user("a"))
    session.move_to(None)
    assert session.leaf_id is None
    assert session.build_context().messages == []
    b = session.append_message(user("b"))
    assert session.get_entry(b).parent_id is None
    assert len(session.children(None)) == 2
    assert texts(session) == ["b"]


def test_moving_to_the_current_leaf_writes_nothing(repo) -> None:
    session = repo.create()
    a = session.append_message(user("a"))
    count = len(session.get_entries())
    session.move_to(a)
    assert len(session.get_entries()) == count


def test_leaf_moves_are_not_tree_nodes(repo) -> None:
    session = repo.create()
    a = session.append_message(user("a"))
    b = session.append_message(user("b"))
    session.move_to(a)
    assert session.find_entries("leaf")[0].target_id == a
    assert [e.id for e in session.children(a)] == [b]
    stats = session.stats()
    assert stats.entry_count == 2
    assert stats.leaf_count == 1
    tree = session.tree()
    assert len(tree) == 1 and [c.entry.id for c in tree[0].children] == [b]
    # Named as a place to go to, label or fork at, a leaf move says what it is.
    move = session.find_entries("leaf")[0].id
    for attempt in (
        lambda: session.move_to(move),
        lambda: session.append_label(move, "here"),
        lambda: repo.fork(session.id, move, "at"),
    ):
        with pytest.raises(SessionError) as refused:
            attempt()
        assert refused.value.code == "not_found"
        assert f"entry {move} of session {session.id} is a leaf move" in str(refused.value)
        assert f"it moved the leaf to {a}" in str(refused.value)
    assert session.leaf_id == a and len(repo.list().items) == 1


def test_tree_and_labels(repo) -> None:
    session = repo.create()
    a = session.append_message(user("a"))
    b = session.append_message(assistant("b"))
    session.move_to(a)
    c = session.append_message(assistant("c"))
    session.append_label(b, "first try")
    session.append_label(b, "renamed")
    session.append_label(c, "")
    tree = session.tree()
    assert [n.entry.id for n in tree] == [a]
    assert [n.entry.id for n in tree[0].children] == [b, c]
    assert tree[0].children[0].label == "renamed"
    assert tree[0].children[1].label is None
    session.append_label(b, None)
    assert session.get_label(b) is None
    as_json = tree[0].to_json_dict()
    assert as_json["entry"]["id"] == a and len(as_json["children"]) == 2


def test_set_name_and_clear(repo) -> None:
    session = repo.create(name="first")
    assert session.name == "first"
    session.set_name("second")
    assert session.name == "second"
    session.set_name("   ")
    assert session.name is None


# --- stats ------------------------------------------------------------------------------------


def test_stats_count_roles_tokens_cost_leaves_and_times(repo) -> None:
    session = repo.create()
    a = session.append_message(user("q"))
    cost = UsageCost(total=0.5)
    reply = assistant(
        "calling", input=100, output=10, cache_read=5, cache_write=1, total_tokens=116
    )
    reply.content.append(ToolCall(id="t1", name="bash", arguments={}))
    reply.usage.cost = cost
    session.append_message(reply)
    result = ToolResultMessage(
        tool_call_id="t1",
        tool_name="bash",
        content=[TextContent(text="ok")],
        usage=Usage(input=7, output=3, total_tokens=10, cost=UsageCost(total=0.25)),
        timestamp=3,
    )
    session.append_message(result)
    session.move_to(a)
    session.append_message(assistant("other", input=1, output=1, total_tokens=2))
    session.append_custom("x")
    session.append_compaction(
        "s",
        None,
        99,
        usage=Usage(input=1000, output=100, total_tokens=1100, cost=UsageCost(total=1.0)),
    )
    stats = session.stats()
    assert stats.entry_count == 6
    assert stats.message_count == 4
    assert stats.messages_by_role == {"user": 1, "assistant": 2, "toolResult": 1}
    assert stats.tool_call_count == 1
    # the assistants, the tool result's own usage, and the model call behind the compaction
    assert stats.input_tokens == 1108
    assert stats.output_tokens == 114
    assert stats.cache_read_tokens == 5
    assert stats.cache_write_tokens == 1
    assert stats.total_tokens == 1228
    assert stats.cost_total == pytest.approx(1.75)
    assert stats.leaf_count == 2
    assert stats.branch_point_count == 1
    entries = [e for e in session.get_entries() if e.type != "leaf"]
    assert stats.first_timestamp == entries[0].timestamp
    assert stats.last_timestamp == entries[-1].timestamp
    assert stats.to_json_dict()["messagesByRole"]["user"] == 1


# --- context build options --------------------------------------------------------------------


def test_projectors_and_transforms_from_session_and_call_are_merged(repo) -> None:
    session = repo.create()
    session.append_message(user("a"))
    session.append_custom("todo", {"item": "write tests"})
    session.append_message(user("b"))

    def project(entry: CustomEntry, index: int, entries: list) -> list:
        return [user(f"todo: {entry.data['item']} at {index}")]

    session.context_build_options = SessionContextBuildOptions(entry_projectors={"todo": project})
    assert texts(session) == ["a", "todo: write tests at 1", "b"]

    def drop_first(entries: list) -> list:
        return entries[1:]

    options = SessionContextBuildOptions(entry_transforms=[drop_first])
    assert [
        t for t in (getattr(m, "text", "") for m in session.build_context(options).messages)
    ] == [
        "todo: write tests at 0",
        "b",
    ]
    # a call's projector replaces the session's for the same custom type
    override = SessionContextBuildOptions(entry_projectors={"todo": lambda e, i, es: []})
    assert texts(session.__class__(session.storage, session.context_build_options)) == texts(
        session
    )
    assert [m.text for m in session.build_context(override).messages] == ["a", "b"]


# --- listeners --------------------------------------------------------------------------------


def test_listeners_hear_every_stored_entry(repo) -> None:
    heard: list[tuple[str, str]] = []
    repo.listeners.append(lambda session_id, entry: heard.append((session_id, entry.type)))

    def broken(session_id, entry):
        raise RuntimeError("subscriber bug")

    repo.listeners.append(broken)
    session = repo.create()
    a = session.append_message(user("a"))
    session.append_message(user("b"))
    session.move_to(a, {"summary": "back"})
    assert heard == [
        (session.id, "message"),
        (session.id, "message"),
        (session.id, "branch_summary"),  # alone, a child of the target, as pi writes it
    ]
    with pytest.raises(SessionError):
        session.move_to("ffffffff")
    assert len(heard) == 3
    session.move_to(None)
    assert heard[-1] == (session.id, "leaf")


def test_a_move_with_a_summary_is_the_summary_alone_as_pi_writes_it(repo) -> None:
    """A leaf move was written before the summary: a line pi does not write, which its /tree
    shows as an empty row."""
    session = repo.create()
    a = session.append_message(user("a"))
    session.append_message(user("b"))
    summary_id = session.move_to(a, {"summary": "back"})
    assert [e.type for e in session.get_entries()] == ["message", "message", "branch_summary"]
    stored = narrow(session.get_entries()[-1], BranchSummaryEntry)
    assert stored.id == summary_id and stored.parent_id == a == stored.from_id
    assert session.leaf_id == summary_id
    root = session.move_to(None, {"summary": "from the top"})
    assert session.get_entries()[-1].parent_id is None and session.leaf_id == root


# --- repos ------------------------------------------------------------------------------------


def test_create_open_and_header(repo, backend) -> None:
    session = repo.create(name="n", cwd="/tmp/x", metadata={"agent": "coder"})
    header = session.header
    assert header.version == 3 and header.type == "session"
    assert header.cwd == "/tmp/x" and header.metadata == {"agent": "coder"}
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", session.id
    )
    first = session.append_message(user("hello"))
    reopened = backend().open(session.id)
    assert reopened.header.to_json_dict() == header.to_json_dict()
    assert reopened.leaf_id == first
    assert reopened.name == "n"
    with pytest.raises(SessionError) as error:
        repo.open("no-such-session")
    assert error.value.code == "not_found"


def test_state_survives_a_restart_including_leaf_moves(repo, backend) -> None:
    session = repo.create()
    a = session.append_message(user("a"))
    session.append_message(assistant("b"))
    session.move_to(a)
    session.append_label(a, "start")
    session.move_to(a)
    again = backend().open(session.id)
    assert again.leaf_id == a
    assert texts(again) == texts(session) == ["a"]
    assert again.get_label(a) == "start"
    assert again.stats() == session.stats()
    assert [e.to_json_dict() for e in again.get_entries()] == [
        e.to_json_dict() for e in session.get_entries()
    ]


def test_the_listing_shows_the_first_user_message_with_text_as_pi_does(repo) -> None:
    # pi's listing: the first user message that has text, its text blocks joined by spaces.
    session = repo.create()
    session.append_message(UserMessage(content=[ImageContent(data="aGk=", mime_type="image/png")]))
    session.append_message(
        UserMessage(content=[TextContent(text="part one"), TextContent(text="part two")])
    )
    session.append_message(user("a later question"))
    for listed in (repo.list().items[0], repo.list(query="part").items[0]):
        assert listed.first_user_message == "part one part two"


def test_the_listing_row_holds_the_leaf(repo) -> None:
    session = repo.create()
    first = session.append_message(user("one"))
    session.append_message(user("two"))
    session.move_to(first)
    assert repo.list().items[0].leaf_id == first
    assert repo.summary(session.id).to_json_dict()["leafId"] == first


def test_list_is_newest_first_paged_and_searchable(repo) -> None:
    made = []
    for i in range(7):
        session = repo.create(name=f"session {i}")
        session.append_message(user(f"question about {'apples' if i % 2 else 'pears'} number{i}"))
        session.append_message(assistant("answer"))
        made.append(session.id)
    seen: list[str] = []
    page = repo.list(limit=3)
    while True:
        seen.extend(item.id for item in page.items)
        if page.next_cursor is None:
            break
        page = repo.list(limit=3, cursor=page.next_cursor)
    assert seen == list(reversed(made))
    first = repo.list(limit=1).items[0]
    assert first.name == "session 6"
    assert first.message_count == 2 and first.entry_count == 3
    assert first.first_user_message == "question about pears number6"
    if isinstance(repo, JsonlSessionRepo):  # as pi: its last message's own time (here 2 ms)
        assert first.modified == "1970-01-01T00:00:00.002000Z"
    else:
        assert first.modified >= first.created
    assert first.to_json_dict()["firstUserMessage"] == "question about pears number6"
    apples = repo.list(query="APPLES")
    assert [s.id for s in apples.items] == [made[5], made[3], made[1]]
    assert [s.id for s in repo.list(query="appl question").items] == [made[5], made[3], made[1]]
    assert [s.id for s in repo.list(query="number4").items] == [made[4]]
    assert repo.list(query="session 2").items[0].id == made[2]  # names are searchable
    assert repo.list(query="bananas").items == []
    with pytest.raises(SessionError):
        repo.list(cursor="not a cursor")


def test_a_malformed_cursor_or_an_oversized_search_is_a_clear_refusal(repo) -> None:
    import base64

    repo.create().append_message(user("apples"))
    nested = base64.urlsafe_b64encode(b"[" * 100_000).decode()
    for cursor in (nested[:1000], nested, "x" * 5000):
        with pytest.raises(SessionError) as raised:
            repo.list(cursor=cursor)
        assert raised.value.code == "invalid_argument" and "invalid cursor" in str(raised.value)
        assert len(str(raised.value)) < 200  # the cursor is not echoed in full
    with pytest.raises(SessionError) as raised:
        repo.list(query=" ".join(f"word{i}" for i in range(1001)))
    assert raised.value.code == "invalid_argument" and "at most 32 words" in str(raised.value)
    assert len(repo.list(query=" ".join(["apples"] * 32)).items) == 1


def test_a_search_with_no_words_is_refused_and_naming_none_lists_all(repo) -> None:
    """A search for text with no word in it ("🎉", "%", a quote, a backslash) is refused,
    naming it, as no session could be told to match it (before: it matched every session,
    as if no search had been asked for). No search (null, empty or blanks) lists all; "C++"
    is the word "c", matched as the start of words, as every word is."""
    party = repo.create(name="emoji 🎉 party")
    plain = repo.create(name="plain words only")
    camel = repo.create(name="camelCase and example.com")
    for query in ("🎉", "%", "'", "\\", "🎉 %", "--"):
        with pytest.raises(SessionError) as raised:
            repo.list(query=query)
        assert raised.value.code == "invalid_argument", query
        assert f"the search {query!r} has no words to search for" in str(raised.value)
    every = {party.id, plain.id, camel.id}
    for no_search in (None, "", "  "):
        assert {s.id for s in repo.list(query=no_search).items} == every, no_search
    assert [s.id for s in repo.list(query="C++").items] == [camel.id]
    assert [s.id for s in repo.list(query="🎉 party").items] == [party.id]


def found(repo: BaseSessionRepo, query: str) -> set[str]:
    """The ids of the sessions a search for ``query`` lists."""
    return {s.id for s in repo.list(query=query).items}


def test_a_search_finds_chinese_and_japanese_words_inside_a_run_of_them(repo) -> None:
    """Chinese and Japanese have no spaces: a run of their characters was one word, so 天気
    found nothing in 東京の天気は晴れ. Each such character is a word of its own and a search
    word of several is a phrase: the characters in order, anywhere in a run."""
    weather = repo.create(name="天気")
    weather.append_message(user("東京の天気は晴れです。GPT4の回答を見て"))
    kana = repo.create(name="notes")
    kana.append_message(user("カタカナのテストと漢字"))
    apart = repo.create(name="apart")
    apart.append_message(user("天 and later 気, and 晴 alone"))

    assert found(repo, "天気") == {weather.id}  # a phrase: 天 then 気, not each anywhere
    assert found(repo, "東京") == {weather.id}
    assert found(repo, "晴れ") == {weather.id}
    assert found(repo, "京の天") == {weather.id}
    assert found(repo, "gpt4の回答") == {weather.id}
    assert found(repo, "テスト") == {kana.id}
    assert found(repo, "漢字 カタカナ") == {kana.id}
    assert found(repo, "天") == {weather.id, apart.id}
    assert found(repo, "気天") == set()
    assert found(repo, "大阪") == set()
    # words of other scripts still match what they start, not what they hold
    assert found(repo, "atakana") == set() and found(repo, "ater") == set()


def test_a_search_finds_latin_letters_with_or_without_their_accents(repo) -> None:
    """A search for cafe found café in SQLite (its tokenizer folds accents) and nowhere else: every
    store folds Latin letters alike, the search's words and the text searched, however the
    accent is written (one character or a letter and a combining mark)."""
    accented = repo.create(name="menu")
    accented.append_message(user("Un café crème à Besançon, Ångström"))
    combining = repo.create(name="notes")
    combining.append_message(user("re\u0301sume\u0301 of the naïve plan"))

    assert found(repo, "cafe creme") == found(repo, "CAFÉ") == {accented.id}
    assert found(repo, "besancon angstrom") == {accented.id}
    assert found(repo, "résumé") == found(repo, "resume") == {combining.id}
    assert found(repo, "naive") == {combining.id}
    assert found(repo, "cafes") == set()


def test_list_order_follows_the_latest_append(repo) -> None:
    old = repo.create()
    new = repo.create()
    new.append_message(user("x"))
    old.append_message(user("y"))
    assert [s.id for s in repo.list().items][:2] == [old.id, new.id]


def test_delete(repo) -> None:
    keep = repo.create()
    gone = repo.create()
    gone.append_message(user("bye"))
    repo.delete(gone.id)
    assert [s.id for s in repo.list().items] == [keep.id]
    assert not repo.exists(gone.id)
    with pytest.raises(SessionError) as error:
        repo.open(gone.id)
    assert error.value.code == "not_found"
    with pytest.raises(SessionError):
        repo.delete(gone.id)
    assert repo.list(query="bye").items == []


# --- fork -------------------------------------------------------------------------------------


def forkable(repo) -> tuple[Session, dict[str, str]]:
    session = repo.create(cwd="/w")
    ids = {}
    session.append_model_change("openai", "gpt")
    ids["q1"] = session.append_message(user("q1"))
    ids["a1"] = session.append_message(assistant("a1"))
    ids["q2"] = session.append_message(user("q2"))
    ids["a2"] = session.append_message(assistant("a2"))
    session.append_label(ids["q1"], "start")
    return session, ids


def test_fork_whole_session(repo) -> None:
    source, _ids = forkable(repo)
    source.move_to(_ids["a1"])
    fork = repo.fork(source.id)
    assert fork.id != source.id
    assert repo.summary(fork.id).parent_session == source.id
    if getattr(repo, "layout", None) == "pi":  # pi's header names the parent's file
        assert fork.header.parent_session == str(repo.path_for(source.id))
    else:
        assert fork.header.parent_session == source.id
    assert fork.header.cwd == "/w"
    assert [e.to_json_dict() for e in fork.get_entries()] == [
        e.to_json_dict() for e in source.get_entries()
    ]
    assert fork.leaf_id == source.leaf_id
    assert texts(fork) == texts(source)
    assert repo.list().items[0].parent_session == source.id


def test_fork_at_and_before_an_entry(repo) -> None:
    source, ids = forkable(repo)
    at = repo.fork(source.id, ids["a1"], position="at")
    assert texts(at) == ["q1", "a1"]
    assert at.get_label(ids["q1"]) == "start"  # labels of copied entries come along
    assert at.build_context().model == {"provider": "anthropic", "modelId": "claude"}
    before = repo.fork(source.id, ids["q2"])  # "before" is the default
    assert texts(before) == ["q1", "a1"]
    first = repo.fork(source.id, ids["q1"], position="before")
    assert texts(first) == []
    assert repo.summary(first.id).parent_session == source.id
    # the source is unchanged
    assert texts(source) == ["q1", "a1", "q2", "a2"]


def test_fork_below_labels_anywhere_on_the_path(repo) -> None:
    """A label is not copied by a fork; the entries that were appended after it (and so hang
    under it) are copied under the entry above it, and every label comes along."""
    session = repo.create(cwd="/w")
    ids = {}
    ids["q1"] = session.append_message(user("q1"))
    session.append_label(ids["q1"], "first question")
    ids["a1"] = session.append_message(assistant("a1"))
    session.append_label(ids["a1"], "good answer")
    session.append_label(ids["a1"], "very good answer")  # two labels in a row
    ids["q2"] = session.append_message(user("q2"))
    ids["a2"] = session.append_message(assistant("a2"))
    session.append_label(ids["a2"], "end")
    for target, position, expected in [
        ("a1", "at", ["q1", "a1"]),
        ("q2", "at", ["q1", "a1", "q2"]),
        ("q2", "before", ["q1", "a1"]),
        ("a2", "at", ["q1", "a1", "q2", "a2"]),
        (None, "before", ["q1", "a1", "q2", "a2"]),
    ]:
        fork = repo.fork(session.id, ids[target] if target else None, position=position)
        assert texts(fork) == expected, (target, position)
        entries = fork.get_entries()
        known = {e.id for e in entries}
        assert all(e.parent_id is None or e.parent_id in known for e in entries)
        assert fork.get_label(ids["q1"]) == "first question"
        assert fork.get_label(ids["a1"]) == "very good answer"
        # The fork goes on where it was cut.
        fork.append_message(user("again"))
        assert texts(repo.open(fork.id))[-1] == "again"


def test_fork_at_an_entry_pi_appended_below_a_leaf_move(repo) -> None:
    source = repo.create()
    q1 = source.append_message(user("q1"))
    source.append_message(user("old"))
    source.move_to(q1)
    lines = repo.export_jsonl(source.id).splitlines()
    move = json.loads(lines[-1])
    assert move["customType"] == "mcp-agent-sessions.leaf"
    # pi resumes the file on its last line (the leaf move) and appends below it
    header = json.loads(lines[0])
    header["id"] = "0b7c1d3e-0000-4000-8000-000000000001"
    lines[0] = json.dumps(header)
    below = {
        "type": "message",
        "id": "deadbeef",
        "parentId": move["id"],
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "q2", "timestamp": 1},
    }
    imported = repo.import_jsonl("\n".join([*lines, json.dumps(below)]) + "\n")
    at = repo.fork(imported.id, "deadbeef", position="at")
    assert texts(at) == ["q1", "q2"]
    assert at.get_entry("deadbeef").parent_id == q1
    before = repo.fork(imported.id, "deadbeef")
    assert texts(before) == ["q1"]


def test_bad_fork_targets_fail_and_create_nothing(repo) -> None:
    source, ids = forkable(repo)
    count = len(repo.list(limit=100).items)
    cases = [
        ((source.id, ids["a1"], "before"), "invalid_fork_target"),
        ((source.id, "00000000", "at"), "not_found"),
        ((source.id, ids["q1"], "sideways"), "invalid_fork_target"),
        (("missing-session", None, "before"), "not_found"),
    ]
    for args, code in cases:
        with pytest.raises(SessionError) as error:
            repo.fork(*args)
        assert error.value.code == code
    assert len(repo.list(limit=100).items) == count


# --- import and export ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_import_pi_files_of_every_version(repo, version: str) -> None:
    session = repo.import_jsonl(DATA / f"{version}.jsonl")
    assert session.header.version == 3
    exported = [json.loads(line) for line in repo.export_jsonl(session.id).splitlines()]
    assert exported[0]["version"] == 3
    assert all(re.fullmatch(r"[0-9a-f]{8}", e["id"]) for e in exported[1:])
    assert not any(
        e.get("type") == "message" and e["message"]["role"] == "hookMessage" for e in exported
    )
    assert session.build_context().messages[0].role == "compactionSummary"


def test_v3_import_then_export_is_line_for_line_equal(repo) -> None:
    text = (DATA / "v3.jsonl").read_text()
    session = repo.import_jsonl(text)
    exported = repo.export_jsonl(session.id).splitlines()
    original = [line for line in text.splitlines() if line.strip()]
    assert len(exported) == len(original)
    for ours, theirs in zip(exported, original, strict=True):
        assert json.loads(ours) == json.loads(theirs)


def test_unknown_entry_types_round_trip_and_add_nothing(repo) -> None:
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 3,
            "id": "s-unknown",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/",
        },
        {
            "type": "message",
            "id": "aaaaaaaa",
            "parentId": None,
            "timestamp": "2026-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": "hi", "timestamp": 1, "futureField": [1]},
        },
        {
            "type": "future_thing",
            "id": "bbbbbbbb",
            "parentId": "aaaaaaaa",
            "timestamp": "2026-01-01T00:00:02.000Z",
            "payload": {"x": [1, 2]},
            "flag": None,
        },
        {
            "type": "message",
            "id": "cccccccc",
            "parentId": "bbbbbbbb",
            "timestamp": "2026-01-01T00:00:03.000Z",
            "message": {"role": "user", "content": "again", "timestamp": 2},
        },
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    session = repo.import_jsonl(text)
    assert [m.text for m in session.build_context().messages] == ["hi", "again"]
    assert session.get_entry("bbbbbbbb").type == "future_thing"
    # a header id that is not a UUID is replaced by a new one; everything else is kept as is
    assert session.id != "s-unknown"
    expected = [{**lines[0], "id": session.id}, *lines[1:]]
    assert [json.loads(line) for line in repo.export_jsonl(session.id).splitlines()] == expected


def bad_file(*entries: dict) -> str:
    header = {
        "type": "session",
        "version": 3,
        "id": "bad-session",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/",
    }
    return "\n".join(json.dumps(e) for e in (header, *entries)) + "\n"


def message_entry(entry_id: str, parent: str | None) -> dict:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "message": {"role": "user", "content": entry_id, "timestamp": 1},
    }


def custom_entry(data: object) -> dict:
    return {
        "type": "custom",
        "id": "aaaaaaaa",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "customType": "note",
        "data": data,
    }


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            bad_file(message_entry("aaaaaaaa", None), message_entry("aaaaaaaa", None)),
            "duplicate entry id aaaaaaaa",
        ),
        (
            bad_file(message_entry("aaaaaaaa", "bbbbbbbb"), message_entry("bbbbbbbb", "aaaaaaaa")),
            "cycle",
        ),
        (bad_file(message_entry("aaaaaaaa", "aaaaaaaa")), "parentId chain of aaaaaaaa has a cycle"),
        (
            bad_file(
                message_entry("aaaaaaaa", None),
                {
                    "type": "message",
                    "id": "b",
                    "parentId": "aaaaaaaa",
                    "timestamp": "t",
                    "message": {"role": "user"},
                },
            ),
            "content",
        ),
        (bad_file(message_entry("aaaaaaaa", None)).replace("\n", "\n{broken\n", 1), ":2:"),
        (bad_file(custom_entry(float("nan"))), ":2: line is not valid JSON (NaN is not a JSON"),
        (bad_file(custom_entry(nested(300))), ":2: line is not valid JSON (JSON nested more"),
        (json.dumps(message_entry("aaaaaaaa", None)) + "\n", "session header"),
        ("", "empty"),
    ],
    ids=[
        "duplicate",
        "cycle",
        "own-parent",
        "invalid-message",
        "corrupt-line",
        "nan",
        "too-deep",
        "no-header",
        "empty",
    ],
)
def test_bad_imports_fail_clearly_and_import_nothing(repo, text: str, needle: str) -> None:
    before = repo.list().items
    with pytest.raises(SessionError) as error:
        repo.import_jsonl(text)
    assert error.value.code == "invalid_import"
    assert needle in str(error.value)
    assert repo.list().items == before
    assert not repo.exists("bad-session")


def test_an_entry_whose_parent_is_not_in_the_file_is_a_root_as_pi_shows_it(repo) -> None:
    # pi writes such files (branching from below a label drops the label, not the link to it)
    # and opens them: the entry is a root, and the context starts there.
    text = bad_file(
        message_entry("aaaaaaaa", None),
        message_entry("bbbbbbbb", "aaaaaaaa"),
        message_entry("cccccccc", "zzzzzzzz"),
        message_entry("dddddddd", "cccccccc"),
    )
    imported = repo.import_session(text)
    session = imported.session
    assert session.leaf_id == "dddddddd"
    assert [e.id for e in session.get_branch()] == ["cccccccc", "dddddddd"]
    assert [m.content for m in session.build_context().messages] == ["cccccccc", "dddddddd"]
    assert [node.entry.id for node in session.tree()] == ["aaaaaaaa", "cccccccc"]
    stats = session.stats()  # two leaves (bbbbbbbb, dddddddd), zzzzzzzz no branch point
    assert (stats.leaf_count, stats.branch_point_count) == (2, 0)
    assert imported.notes == [
        "<jsonl>: 1 entry's parentId points to no entry in the file (line 4: 'zzzzzzzz'): it is"
        " kept as a root, as pi shows it (the context of a branch through it starts there)"
    ]
    exported = repo.export_jsonl(session.id).splitlines()
    assert json.loads(exported[3]) == json.loads(text.splitlines()[3])  # kept as it was
    appended = session.append_message(user("more"))
    assert [e.id for e in repo.open(session.id).get_branch()][-2:] == ["dddddddd", appended]


def test_the_import_says_how_many_entries_have_no_parent_in_the_file(repo) -> None:
    """Past the first three it said "more entries whose parent is not in the file": not how
    many (one or thousands), nor what became of them."""
    lost = [message_entry(f"{n:08x}", f"gone{n}") for n in range(1, 8)]
    imported = repo.import_session(bad_file(message_entry("00000000", None), *lost))
    assert imported.notes == [
        "<jsonl>: 7 entries' parentIds point to no entry in the file (line 3: 'gone1', line 4:"
        " 'gone2', line 5: 'gone3' and 4 more): each is kept as a root, as pi shows it (the"
        " context of a branch through it starts there)"
    ]
    assert len(imported.session.tree()) == 8  # every one kept, each a root


@pytest.mark.parametrize(("parent", "resumes"), [("aaaaaaaa", ["aaaaaaaa"]), (None, [])])
def test_a_last_leaf_line_on_no_entry_resumes_where_pi_shows_the_file(
    backend, parent: str | None, resumes: list[str]
) -> None:
    # We never write one, but a file may end on a leaf line whose target is no entry: the
    # session must not keep a leaf that every read and append then fails on.
    move = {
        "type": "leaf",
        "id": "ffffffff",
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:02Z",
    }
    text = bad_file(message_entry("aaaaaaaa", None), {**move, "targetId": "zzzzzzzz"})
    imported = backend().import_session(text)
    assert any("targetId zzzzzzzz points to no entry" in note for note in imported.notes)
    for session in (imported.session, backend().open(imported.session.id)):  # and reopened
        assert session.leaf_id == (resumes[-1] if resumes else None)
        assert [e.id for e in session.get_branch()] == resumes
        assert [m.content for m in session.build_context().messages] == resumes
    appended = imported.session.append_message(user("more"))
    assert [e.id for e in backend().open(imported.session.id).get_branch()] == [*resumes, appended]


def test_a_message_of_a_role_nobody_registered_is_kept_in_the_context(repo) -> None:
    note = {"role": "note", "text": "n", "timestamp": 2, "level": {"of": "detail"}}
    own = {**message_entry("bbbbbbbb", "aaaaaaaa"), "message": note}
    session = repo.import_jsonl(bad_file(message_entry("aaaaaaaa", None), own))
    messages = session.build_context().messages
    assert [m.role for m in messages] == ["user", "note"]
    assert messages[1].to_json_dict() == note
    assert json.loads(repo.export_jsonl(session.id).splitlines()[2]) == own


def test_import_of_an_existing_session_id_is_a_conflict(repo) -> None:
    repo.import_jsonl(DATA / "v3.jsonl")
    with pytest.raises(SessionError) as error:
        repo.import_jsonl(DATA / "v3.jsonl")
    assert error.value.code == "conflict"


def test_export_then_import_into_another_backend_keeps_the_branch(repo, tmp_path: Path) -> None:
    session = repo.create()
    a = session.append_message(user("a"))
    session.append_message(user("b"))
    session.move_to(a)
    text = repo.export_jsonl(session.id)
    other = SqliteSessionRepo(tmp_path / "other.db")
    copy = other.import_jsonl(text)
    assert copy.leaf_id == a
    assert texts(copy) == ["a"]
    other.close()


@pytest.mark.parametrize("lines", [1, 2, 5, 1000])
def test_the_file_exported_in_pieces_is_the_file_whole(repo, lines: int) -> None:
    session = repo.create(name="pieces")
    a = session.append_message(user("a"))
    session.append_message(user("b"))
    session.move_to(a)
    session.append_message(user("c"))
    session.append_label(a, "start")
    session.move_to(a)  # the log no longer ends on the leaf: the file ends with a leaf move
    pieces = list(repo.export_chunks(session.id, lines))
    assert all(piece.count("\n") <= lines for piece in pieces)  # no more held at once
    whole = "".join(pieces).splitlines()
    parsed = export_text(session.header, session.get_entries(), session.leaf_id).splitlines()
    exported = repo.export_jsonl(session.id).splitlines()
    # The same lines as every entry parsed and written out; the final leaf move has an id
    # and a time of its own each time.
    assert whole[:-1] == parsed[:-1] == exported[:-1]
    for last in (whole[-1], parsed[-1], exported[-1]):
        move = json.loads(last)
        assert (move["type"], move["parentId"], move["data"]) == ("custom", a, {"targetId": a})
    copy = repo.import_jsonl("".join(pieces).replace(session.id, "f" * 8 + session.id[8:]))
    assert copy.leaf_id == a and texts(copy) == ["a"]


def test_an_export_of_no_session_fails_at_its_first_piece(repo) -> None:
    pieces = repo.export_chunks("00000000-0000-7000-8000-000000000000")
    with pytest.raises(SessionError) as error:
        next(pieces)
    assert error.value.code == "not_found"


def test_entries_in_messages_are_typed(repo) -> None:
    session = repo.create()
    session.append_message(assistant("typed"))
    entry = session.get_branch()[-1]
    assert isinstance(entry, MessageEntry)
    assert isinstance(entry.message, AssistantMessage)


def test_entries_pi_appended_below_a_leaf_move_hang_under_its_target(repo) -> None:
    """pi resumes a file at its last line; if that is one of our leaf moves, pi's next entry
    names the move as its parent."""
    session = repo.create()
    a = session.append_message(user("a"))
    session.append_message(user("b"))
    session.move_to(a)
    lines = repo.export_jsonl(session.id).splitlines()
    move = json.loads(lines[-1])
    assert move["customType"] == "mcp-agent-sessions.leaf"
    lines.append(
        json.dumps(
            message_entry("c0ffee00", move["id"])
            # written after b, as pi writes it (pi shows children by time)
            | {"timestamp": iso_now(), "message": {"role": "user", "content": "c", "timestamp": 3}}
        )
    )
    header = json.loads(lines[0])
    header["id"] = "resumed-by-pi"
    lines[0] = json.dumps(header)
    resumed = repo.import_jsonl("\n".join(lines) + "\n")
    assert resumed.leaf_id == "c0ffee00"
    assert texts(resumed) == ["a", "c"]
    assert [e.message.text for e in resumed.children(a)] == ["b", "c"]
    tree = resumed.tree()
    assert [n.entry.id for n in tree] == [a]
    assert [n.entry.message.text for n in tree[0].children] == ["b", "c"]
    stats = resumed.stats()
    assert (stats.entry_count, stats.leaf_count, stats.branch_point_count) == (3, 2, 1)
    with pytest.raises(SessionError):
        resumed.move_to(move["id"])  # a leaf move is not a place to go


def test_threads_appending_through_two_session_objects_keep_one_line(repo) -> None:
    import threading

    first = repo.create()
    second = repo.open(first.id)
    second.append_message(user("start"))

    def worker(session: Session, tag: str) -> None:
        for i in range(20):
            session.append_message(user(f"{tag}{i}"))

    threads = [
        threading.Thread(target=worker, args=(s, t)) for s, t in ((first, "a"), (second, "b"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = first.stats()
    assert stats.entry_count == 41
    assert stats.branch_point_count == 0 and stats.leaf_count == 1


def test_summary_of_one_session_matches_its_listing_row(repo) -> None:
    session = repo.create(name="summed", cwd="/w")
    session.append_message(UserMessage(content="first words", timestamp=1))
    session.append_message(UserMessage(content="more", timestamp=2))
    [row] = repo.list().items
    summary = repo.summary(session.id)
    assert summary == row
    assert (summary.name, summary.message_count, summary.first_user_message) == (
        "summed",
        2,
        "first words",
    )
    with pytest.raises(SessionError) as caught:
        repo.summary("missing")
    assert caught.value.code == "not_found"


# --- where a search matched -------------------------------------------------------------------


def hits_of(repo: BaseSessionRepo, session_id: str, query: str, limit: int = 10) -> list[tuple]:
    """Every hit of ``query`` in the session, page after page: (entry id, score, snippet)."""
    out: list[tuple] = []
    cursor = None
    while True:
        page = repo.search_session(session_id, query, limit=limit, cursor=cursor)
        out.extend((hit.entry.id, hit.score, hit.role, snippet_of(hit, query)) for hit in page.hits)
        if page.next_cursor is None:
            assert page.total == len(out)
            return out
        cursor = page.next_cursor


def snippet_of(hit: Any, query: str) -> str:
    from mcp_agent.sessions.entries import entry_text
    from mcp_agent.sessions.hits import snippet
    from mcp_agent.sessions.words import query_words

    return snippet(entry_text(hit.entry), query_words(query))


def test_a_search_in_a_session_gives_its_matching_entries_best_first_then_newest(repo) -> None:
    """Which entries of a session hold a search's words: those with more of the words first,
    then the newest first, paged with a cursor, the same in every store."""
    session = repo.create(name="garden notes")
    ids = [
        session.append_message(user("the apple tree needs water")),
        session.append_message(assistant("Water the apple tree weekly; pears too")),
        session.append_message(user("nothing of the sort here")),
        session.append_message(user("an apple a day")),
        session.append_message(assistant("Apples and water, again")),
    ]
    repo.create(name="other").append_message(user("apple water apple water"))
    hits = hits_of(repo, session.id, "apple water", limit=2)
    assert [(h[0], h[1]) for h in hits] == [(ids[4], 2), (ids[1], 2), (ids[0], 2), (ids[3], 1)]
    assert [h[2] for h in hits] == ["assistant", "assistant", "user", "user"]
    assert hits[0][3] == "«Apples» and «water», again"
    # the session's name is found in the entry that set it
    [(_, score, role, text)] = hits_of(repo, session.id, "garden")
    assert role is None and score == 1 and text == "«garden» notes"
    assert hits_of(repo, session.id, "bananas") == []
    assert hits_of(repo, session.id, "APPL") == hits_of(repo, session.id, "apple")


def test_the_first_hits_of_many_sessions_are_each_ones_first_page(repo) -> None:
    """What a listing shows of each session it found (``search_sessions``, all at once where a
    store can) is the first page of a search in that session; a session not there has none."""
    made = []
    for i in range(5):
        session = repo.create(name=f"notes {i}")
        for j in range(i + 2):
            session.append_message(user(f"apple {j}" + (" water" if j % 2 else "")))
        made.append(session.id)
    missing = "0" * 8 + "-0000-0000-0000-" + "0" * 12
    for query in ("apple water", "water", "notes apple"):
        found = repo.search_sessions([*made, missing], query, 3)
        assert set(found) == set(made)
        for session_id in made:
            page = repo.search_session(session_id, query, 3)
            assert found[session_id] == page, (query, session_id)
            assert (page.next_cursor is not None) == (page.total > 3)


def test_a_hit_says_whether_it_is_on_the_current_branch(backend) -> None:
    """A hit on the branch a run there goes on from, or on one left behind: in a session that
    is one path to its leaf, in one whose leaf was moved back, and in one that branched; the
    same in a search of the session and in a listing's first hits."""
    repo = backend()
    session = repo.create()
    a = session.append_message(user("apple one"))
    b = session.append_message(user("apple two"))
    c = session.append_message(user("apple three"))

    def on_branch() -> dict[str, bool]:
        found = {
            hit.entry.id: hit.on_branch for hit in repo.search_session(session.id, "apple", 10).hits
        }
        listed = repo.search_sessions([session.id], "apple", 10)[session.id]
        assert {hit.entry.id: hit.on_branch for hit in listed.hits} == found
        return found

    assert on_branch() == {a: True, b: True, c: True}
    session.move_to(b)  # back, nothing appended yet
    assert on_branch() == {a: True, b: True, c: False}
    d = session.append_message(user("apple four"))  # a branch off b
    assert on_branch() == {a: True, b: True, c: False, d: True}
    session.move_to(c)
    assert on_branch() == {a: True, b: True, c: True, d: False}
    session.move_to(None)
    assert on_branch() == {a: False, b: False, c: False, d: False}
    # Reopened (a SQL store's row read afresh; a file read again), the same.
    session.move_to(d)
    again = backend().search_session(session.id, "apple").hits
    assert {hit.entry.id: hit.on_branch for hit in again} == {a: True, b: True, c: False, d: True}


def test_a_search_in_a_session_matches_as_a_listing_does(repo) -> None:
    """Accents, case and CJK phrases are found in an entry as a session is found."""
    session = repo.create()
    cafe = session.append_message(user("Un Café crème à Besançon"))
    weather = session.append_message(user("東京の天気は晴れです"))
    apart = session.append_message(user("天 and later 気"))
    assert hits_of(repo, session.id, "cafe") == [(cafe, 1, "user", "Un «Café» crème à Besançon")]
    assert hits_of(repo, session.id, "天気") == [(weather, 1, "user", "東京の«天気»は晴れです")]
    assert [h[0] for h in hits_of(repo, session.id, "天")] == [apart, weather]
    assert hits_of(repo, session.id, "afe") == []


def test_a_search_in_a_session_refuses_what_it_cannot_search(repo) -> None:
    session = repo.create()
    session.append_message(user("apples"))
    for query in ("", "  ", "🎉", " ".join(f"w{i}" for i in range(40))):
        with pytest.raises(SessionError) as raised:
            repo.search_session(session.id, query)
        assert raised.value.code == "invalid_argument", query
    for cursor in ("nope", "x" * 5000, "WzEsMl0x"):
        with pytest.raises(SessionError) as raised:
            repo.search_session(session.id, "apples", cursor=cursor)
        assert raised.value.code == "invalid_argument" and "invalid cursor" in str(raised.value)
    for limit in (0, 101):
        with pytest.raises(SessionError):
            repo.search_session(session.id, "apples", limit=limit)
    # A cursor of another search is refused, not taken to skip this one's hits.
    session.append_message(user("apples and pears"))
    other = repo.create()
    other.append_message(user("apples"))
    other.append_message(user("apples again"))
    cursor = repo.search_session(session.id, "apples", limit=1).next_cursor
    assert cursor is not None
    for query, where in (("pears apples", session.id), ("apples", other.id)):
        with pytest.raises(SessionError) as raised:
            repo.search_session(where, query, cursor=cursor)
        assert "another search's" in str(raised.value)
    assert repo.search_session(session.id, "APPLES", cursor=cursor).hits
    with pytest.raises(SessionError) as raised:
        repo.search_session("0" * 8 + "-0000-0000-0000-" + "0" * 12, "apples")
    assert raised.value.code == "not_found"
