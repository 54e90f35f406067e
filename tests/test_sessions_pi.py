"""pi interop: migrations, golden oracle output, and pi's own code run on files we write."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from mcp_support import find_pi
from narrow import narrow
from pi_support import pi_script

from mcp_agent.compaction import CompactionError, prepare_compaction
from mcp_agent.messages import (
    AssistantMessage,
    BashExecutionMessage,
    ImageContent,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
    UserMessage,
    convert_to_llm,
)
from mcp_agent.sessions import (
    CompactionEntry,
    InMemorySessionRepo,
    InMemorySessionStorage,
    JsonlSessionRepo,
    Session,
    SessionError,
    SqliteSessionRepo,
    build_session_context,
    jsonl,
    parse_session_text,
)
from mcp_agent.sessions.outline import TreeLike, flat_tree, outline_tree
from mcp_agent.sessions.pi import export_text, migrate_rows

DATA = Path(__file__).parent / "data" / "pi"
ROOT = Path(__file__).parent.parent


def counting_ids() -> Callable[[Callable[[str], bool]], str]:
    """Ids 00000001, 00000002, ... as the oracle's --deterministic-ids makes them."""
    counter = itertools.count(1)
    return lambda taken: f"{next(counter):08x}"


def context_json(storage: InMemorySessionStorage, leaf: str | None) -> dict:
    context = build_session_context(storage.get_branch(leaf))
    data = context.to_json_dict()
    data.pop("activeToolNames", None)  # ours only; pi has no active tools
    return data


GOLDEN = [
    ("v1", "v1.detids", None),
    ("v2", "v2", None),
    ("v3", "v3", None),
    ("v3", "v3.leaf-6c37aca9", "6c37aca9"),
    ("v3", "v3.leaf-09bb0942", "09bb0942"),
]


@pytest.mark.parametrize(("sample", "golden", "leaf"), GOLDEN, ids=[g for _, g, _ in GOLDEN])
def test_matches_pis_recorded_output(sample: str, golden: str, leaf: str | None) -> None:
    """Golden files were produced by pi 0.73.1's own parse/migrate/buildSessionContext."""
    expected = json.loads((DATA / "expected" / f"{golden}.json").read_text())
    parsed = parse_session_text((DATA / f"{sample}.jsonl").read_text(), sample, counting_ids())
    assert parsed.header.to_json_dict() == expected["header"]
    assert [e.to_json_dict() for e in parsed.entries] == expected["entries"]
    storage = InMemorySessionStorage(parsed.header, parsed.entries)
    leaf_id = leaf or parsed.leaf_id
    assert leaf_id == expected["leafId"]
    assert context_json(storage, leaf_id) == expected["context"]
    llm = convert_to_llm(build_session_context(storage.get_branch(leaf_id)).messages)
    assert [m.to_json_dict() for m in llm] == expected["llmMessages"]


def test_sqlite_builds_the_same_context_as_pi(tmp_path: Path) -> None:
    expected = json.loads((DATA / "expected" / "v3.leaf-6c37aca9.json").read_text())
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.import_jsonl(DATA / "v3.jsonl")
    session.move_to("6c37aca9")
    reopened = SqliteSessionRepo(tmp_path / "s.db").open(session.id)
    data = reopened.build_context().to_json_dict()
    data.pop("activeToolNames", None)
    assert data == expected["context"]


# --- migrations -------------------------------------------------------------------------------


def v1_rows(*entries: dict) -> list[dict]:
    header = {"type": "session", "id": "s", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"}
    return [header, *entries]


def test_v1_entries_become_a_line_and_first_kept_index_an_id() -> None:
    rows = v1_rows(
        {
            "type": "message",
            "timestamp": "t1",
            "message": {"role": "user", "content": "a", "timestamp": 1},
        },
        {
            "type": "message",
            "timestamp": "t2",
            "message": {"role": "user", "content": "b", "timestamp": 2},
        },
        {
            "type": "compaction",
            "timestamp": "t3",
            "summary": "s",
            "firstKeptEntryIndex": 2,
            "tokensBefore": 9,
        },
        {
            "type": "compaction",
            "timestamp": "t4",
            "summary": "s",
            "firstKeptEntryIndex": 0,
            "tokensBefore": 9,
        },
        {
            "type": "compaction",
            "timestamp": "t5",
            "summary": "s",
            "firstKeptEntryIndex": 99,
            "tokensBefore": 9,
        },
        {
            "type": "compaction",
            "timestamp": "t6",
            "summary": "s",
            "firstKeptEntryIndex": 6,
            "tokensBefore": 9,
        },
    )
    assert migrate_rows(rows, counting_ids()) == 1
    assert rows[0]["version"] == 3
    assert [r["id"] for r in rows[1:]] == [f"{i:08x}" for i in range(1, 7)]
    assert [r["parentId"] for r in rows[1:]] == [None, *[f"{i:08x}" for i in range(1, 6)]]
    assert rows[3]["firstKeptEntryId"] == "00000002"  # index 2 = second entry (header is 0)
    for row in rows[4:6]:  # the header, out of range: nothing kept
        assert "firstKeptEntryId" not in row
    # pi gives the entry its id before resolving the index, so naming itself works (checked
    # against pi 0.73.1)
    assert rows[6]["firstKeptEntryId"] == rows[6]["id"]
    assert not any("firstKeptEntryIndex" in row for row in rows)


def test_v2_hook_messages_become_custom_and_v3_is_untouched() -> None:
    hook = {
        "role": "hookMessage",
        "customType": "x",
        "content": "c",
        "display": True,
        "timestamp": 1,
    }
    rows: list[dict[str, Any]] = [
        {"type": "session", "version": 2, "id": "s", "timestamp": "t", "cwd": "/"},
        {"type": "message", "id": "aaaaaaaa", "parentId": None, "timestamp": "t", "message": hook},
    ]
    assert migrate_rows(rows) == 2
    assert rows[0]["version"] == 3
    assert rows[1]["message"]["role"] == "custom"
    v3 = [{"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"}]
    assert migrate_rows(v3) == 3 and v3[0]["version"] == 3


def test_v1_import_in_every_repo(tmp_path: Path) -> None:
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    ):
        session = repo.import_jsonl(DATA / "v1.jsonl")
        branch = session.get_branch()
        assert len(branch) == 19  # a line: the leaf's path holds every entry
        compactions = session.find_entries("compaction")
        assert all(narrow(c, CompactionEntry).first_kept_entry_id for c in compactions)


def test_export_adds_a_leaf_line_only_when_the_log_would_resume_elsewhere() -> None:
    parsed = parse_session_text((DATA / "v3.jsonl").read_text())
    same = export_text(parsed.header, parsed.entries, parsed.leaf_id).splitlines()
    assert len(same) == 1 + len(parsed.entries)
    moved = export_text(parsed.header, parsed.entries, "6c37aca9").splitlines()
    last = json.loads(moved[-1])
    assert last["type"] == "custom" and last["customType"] == "mcp-agent-sessions.leaf"
    assert last["data"] == {"targetId": "6c37aca9"} and last["parentId"] == "6c37aca9"
    assert parse_session_text("\n".join(moved)).leaf_id == "6c37aca9"


def test_a_torn_last_line_is_skipped_and_said_so_once(tmp_path: Path) -> None:
    text = (DATA / "v3.jsonl").read_text().rstrip("\n") + '\n{"type":"message","id":"ab'
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said in the result, not as a Python warning
        parsed = parse_session_text(text, "x.jsonl")
        assert len(parsed.entries) == 40
        with SqliteSessionRepo(tmp_path / "s.db") as repo:
            imported = repo.import_session(text)
            assert imported.session.stats().entry_count == 40
    assert len(imported.notes) == 1 and "<jsonl>:42: skipped the last line" in imported.notes[0]


def test_every_cut_of_a_last_line_is_a_torn_write() -> None:
    """Wherever a crash cut the last line (inside a string, an escape, a number, a literal),
    it is skipped as torn."""
    whole = (DATA / "v3.jsonl").read_text().rstrip("\n")
    head, line = whole.rsplit("\n", 1)
    line = line[:-1] + ',"x":[-1.5e3,true,false,null,"a\\u00e9\\"b"]}'
    assert json.loads(line)["x"][-1] == 'a\u00e9"b'
    for cut in range(1, len(line)):
        parsed = parse_session_text(f"{head}\n{line[:cut]}", "x.jsonl")
        assert len(parsed.entries) == 39, line[:cut]


def test_a_last_line_cut_inside_a_character_is_a_torn_write_in_a_file(tmp_path: Path) -> None:
    """A crash cuts a file at a byte, maybe inside a character of several bytes: imported
    from the file, that last line is torn and skipped too (pi reads the file so), not the
    whole file unreadable."""
    whole = (DATA / "v3.jsonl").read_bytes().rstrip(b"\n")
    head, line = whole.rsplit(b"\n", 1)
    line = line[:-1] + ',"x":"caf\u00e9 \U0001f600"}'.encode()
    start = line.index("\u00e9".encode())
    path = tmp_path / "cut.jsonl"
    for cut in range(start, len(line)):
        path.write_bytes(head + b"\n" + line[:cut])
        imported = InMemorySessionRepo().import_session(path)
        assert len(imported.session.get_entries()) == 39, cut
        assert len(imported.notes) == 1 and "skipped the last line" in imported.notes[0], cut
    path.write_bytes(head + b"\n" + line[: start + 1])  # between the two bytes of the é
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        assert repo.import_session(path).session.stats().entry_count == 39
    if PI is not None:
        assert len(run_pi(path)["entries"]) == 39
    path.write_bytes(head + b"\n" + line[: start + 1] + b"\n")  # a whole line is never torn
    with pytest.raises(SessionError) as refused:
        InMemorySessionRepo().import_session(path)
    assert "line 41 is not UTF-8 text (byte 0xc3 at offset " in refused.value.message


def test_a_file_that_is_not_text_is_refused_naming_the_line_and_bytes(tmp_path: Path) -> None:
    """An image given for a session file is refused in words a user can act on (the line and
    the bytes at fault, and what a session file is), not in Python's codec wording, and
    nothing is stored."""
    path = tmp_path / "photo.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        with pytest.raises(SessionError) as refused:
            repo.import_session(path)
        assert repo.list().items == []
    message = refused.value.message
    assert "line 1 is not UTF-8 text (byte 0x89 at offset 0 of the file)" in message
    assert "a pi session file is JSON lines in UTF-8" in message
    assert "codec" not in message


@pytest.mark.parametrize(
    ("tail", "kept"),
    [(b"\x00" * 4096, 40), (b'{"type":"message","id":"ab' + b"\x00" * 4096, 40)],
    ids=["zeros", "torn line and zeros"],
)
def test_zeros_a_crash_left_at_the_end_of_a_file_are_a_torn_write(
    tail: bytes, kept: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system that lost a file's last blocks in a crash reads them back as NUL bytes
    (pi, which does not fsync, leaves such files; pi reads them, skipping that line): the
    import skips them with the torn line they may end, and so does a folder store."""
    header = json.loads((DATA / "v3.jsonl").read_text().splitlines()[0])
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / f"{header['id']}.jsonl"
    path.write_bytes((DATA / "v3.jsonl").read_bytes() + tail)
    imported = InMemorySessionRepo().import_session(path)
    assert len(imported.session.get_entries()) == kept
    assert len(imported.notes) == 1 and ":42: skipped the last line" in imported.notes[0]
    opened = JsonlSessionRepo(folder).open(header["id"])
    assert len(opened.get_entries()) == kept
    monkeypatch.setattr(jsonl, "TORN_WAIT", 0.001)
    opened.append_message(UserMessage(content="after", timestamp=1))
    assert b"\x00" not in path.read_bytes()  # the store's append cut it off
    assert len(JsonlSessionRepo(folder).open(header["id"]).get_entries()) == kept + 1
    if PI is not None:
        path.write_bytes((DATA / "v3.jsonl").read_bytes() + tail)
        assert len(run_pi(path)["entries"]) == kept


NOT_VALID = "x.jsonl:42: line is not valid JSON"


@pytest.mark.parametrize(
    ("last", "says"),
    [
        ("garbage garbage\n", "x.jsonl:42"),
        ('{"type":"message","id":"ab\n', "x.jsonl:42"),
        ("[1]\n", "x.jsonl:42"),
        # Without a line break too: the text is all there, so it is damage, not a torn write.
        ('{"type":"custom","id":"ab12cd34","parentId":null,"data":NaN}', NOT_VALID),
        (
            '{"type":"custom","id":"ab12cd34","parentId":null,"data":'
            + "[" * 300
            + "]" * 300
            + "}",
            NOT_VALID,
        ),
        ('{"type":"custom","id":"ab12cd34","parentId":null} junk', NOT_VALID),
        # Not a torn write a later one continued: junk before a whole entry, and a line cut
        # off after a content block (a tool call has an id, but it is no entry).
        ('junk{"type":"custom","id":"ab12cd34","parentId":null,"customType":"x"}\n', NOT_VALID),
        (
            '{"type":"message","id":"ab12cd34","parentId":null,"message":{"role":"assistant",'
            '"content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{}}\n',
            NOT_VALID,
        ),
    ],
)
def test_a_complete_line_that_is_not_a_json_object_fails_the_whole_import(
    tmp_path: Path, last: str, says: str
) -> None:
    text = (DATA / "v3.jsonl").read_text().rstrip("\n") + "\n" + last
    with pytest.raises(SessionError) as error:
        parse_session_text(text, "x.jsonl")
    assert error.value.code == "invalid_import" and says in str(error.value)
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        with pytest.raises(SessionError):
            repo.import_session(text)
        assert repo.list().items == []
    with pytest.raises(SessionError):
        parse_session_text(text + text.splitlines()[1], "x.jsonl")


# --- pi itself, when Node and pi are installed ------------------------------------------------


PI = find_pi()
needs_pi = pytest.mark.skipif(PI is None, reason="Node or pi is not installed (.ci/peers)")


def run_pi(path: Path, leaves: list[str] | None = None) -> dict:
    """pi's entries for ``path`` and, per leaf (default: pi's own choice), its context."""
    return pi_script(DATA / "oracle.mjs").ask({"file": str(path), "leaves": leaves or []})


def run_pi_many(files: list[tuple[Path, list[str] | None]]) -> list[dict]:
    """``run_pi`` of each of ``files`` (a path and its leaves, None for pi's own choice)."""
    return [run_pi(path, leaves) for path, leaves in files]


def _cut(whole: bytes, where: str) -> bytes:
    """``whole`` (a file ending in a line break) cut as a crash cuts it: inside its last
    line's text, inside a character of several bytes, or just before its line break."""
    if where == "before the line break":
        return whole[:-1]
    if where == "in a character":
        return whole[: whole.rindex("\u00e9".encode()) + 1]
    return whole[:-40]


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize("where", ["in a string", "in a character", "before the line break"])
def test_a_torn_line_pi_wrote_on_after_is_skipped_as_pi_skips_it(
    where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pi, resuming a file whose last line a crash cut off, appends its next entry right
    after the cut: that line is the torn start of one entry and the whole of another. pi
    skips the line (both entries with it) and reads the rest; we refused the whole file
    ("line is not valid JSON"), so pi's session could be neither imported nor listed."""
    header = json.loads((DATA / "v3.jsonl").read_text().splitlines()[0])
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / f"{header['id']}.jsonl"
    rows = [json.loads(line) for line in (DATA / "v3.jsonl").read_text().splitlines()]
    last = rows[-1]
    message = {"role": "user", "content": "caf\u00e9 \U0001f600 the end", "timestamp": 1}
    stamp = last["timestamp"]
    rows.append({"type": "message", "id": "ab12cd34", "parentId": last["id"], "timestamp": stamp})
    rows[-1]["message"] = message
    pis = [json.dumps(row, ensure_ascii=False, separators=(",", ":")) for row in rows]
    whole = "".join(line + "\n" for line in pis).encode()  # as pi writes its lines
    path.write_bytes(_cut(whole, where))
    pi_script(DATA / "folders.mjs").ask({"command": "continue", "dir": str(path), "seed": None})
    glued = path.read_bytes().split(b"\n")[len(rows) - 1]
    assert b'{"type":"message","id":' in glued[1:] and glued.startswith(b'{"type":"message"')
    theirs = run_pi(path)
    assert len(theirs["entries"]) == len(rows) - 1  # the torn entry and pi's first are lost
    expected = theirs["results"][0]["context"]
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    ):
        imported = repo.import_session(path)
        ours = imported.session.build_context().to_json_dict()
        ours.pop("activeToolNames", None)
        assert ours == expected, type(repo).__name__
        assert [e.to_json_dict() for e in imported.session.get_entries()] == theirs["entries"]
        said = [note for note in imported.notes if f":{len(rows)}: skipped" in note]
        assert len(said) == 1 and "continued" in said[0], imported.notes
        repo.close()
    kept = JsonlSessionRepo(folder)  # pi's file in a folder store: listed and opened as is
    caplog.clear()
    assert [item.id for item in kept.list().items] == [header["id"]]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f":{len(rows)}: skipped" in said for said in warned), warned
    opened = kept.open(header["id"])
    assert [e.to_json_dict() for e in opened.get_entries()] == theirs["entries"]


def pi_prepares(path: Path, keep: int, leaves: list[str]) -> list[dict[str, Any] | None]:
    """What pi's prepareCompaction makes of the branch at each leaf of ``path`` (None where
    pi refuses), keeping ``keep`` tokens (tests/data/pi/compaction.mjs)."""
    assert PI is not None
    node, peers = PI
    args = [node, str(DATA / "compaction.mjs"), str(peers), str(path), str(keep), *leaves]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(done.stdout))


@needs_pi
@pytest.mark.node
def test_a_compaction_asked_for_is_made_and_refused_where_pi_makes_and_refuses_it(
    tmp_path: Path,
) -> None:
    """pi's /compact compacts a branch shorter than what it keeps (its default 20,000 tokens:
    it summarises nothing and keeps the whole branch); it refuses only an empty branch and
    one that ends in a compaction. Ours refused the short one ("nothing to compact")."""
    keep = 20_000
    parsed = parse_session_text((DATA / "v3.jsonl").read_text())
    storage = InMemorySessionStorage(parsed.header, parsed.entries)
    file = tmp_path / "v3.jsonl"
    file.write_text(export_text(parsed.header, parsed.entries, parsed.leaf_id))
    leaves = [entry.id for entry in parsed.entries]
    made = 0
    for leaf, theirs in zip(leaves, pi_prepares(file, keep, leaves), strict=True):
        try:
            ours = prepare_compaction(storage.get_branch(leaf), keep, manual=True)
        except CompactionError:
            assert theirs is None, leaf
            continue
        made += 1
        assert theirs is not None, leaf
        # pi calls a cut at a turn's first entry split too, with nothing before it: ours not.
        theirs["isSplitTurn"] = theirs["isSplitTurn"] and theirs["turnPrefix"] > 0
        assert theirs == {
            "firstKeptEntryId": ours.first_kept_entry_id,
            "summarized": len(ours.messages_to_summarize),
            "turnPrefix": len(ours.turn_prefix_messages),
            "isSplitTurn": ours.is_split_turn,
        }, leaf
    assert made == len(leaves) - len(storage.find_entries("compaction")) > 0


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize("sample", ["v1", "v2", "v3"])
def test_pi_and_we_agree_on_the_samples(sample: str, tmp_path: Path) -> None:
    text = (DATA / f"{sample}.jsonl").read_text()
    parsed = parse_session_text(text)
    storage = InMemorySessionStorage(parsed.header, parsed.entries)
    # A v1 file gets random ids from each reader, so compare our export (ids fixed) instead.
    ours = tmp_path / "ours.jsonl"
    ours.write_text(export_text(parsed.header, parsed.entries, parsed.leaf_id))
    leaves = [e.id for e in parsed.entries]
    for leaf, result in zip(leaves, run_pi(ours, leaves)["results"], strict=True):
        assert context_json(storage, leaf) == result["context"], leaf
        llm = convert_to_llm(build_session_context(storage.get_branch(leaf)).messages)
        assert [m.to_json_dict() for m in llm] == result["llmMessages"], leaf
    assert run_pi(ours)["results"][0]["leafId"] == parsed.leaf_id


@needs_pi
@pytest.mark.node
def test_pi_and_we_agree_on_a_hook_message_in_a_version_3_file(tmp_path: Path) -> None:
    """Only a v2 file's hookMessage is renamed custom (by the migration); in a v3 file it is
    a role nobody registered: kept in the context and the export, never sent to a model."""
    rows = [json.loads(line) for line in (DATA / "v2.jsonl").read_text().splitlines()]
    assert any(r.get("message", {}).get("role") == "hookMessage" for r in rows)
    rows[0]["version"] = 3
    path = tmp_path / "v3-hook.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    parsed = parse_session_text(path.read_text())
    storage = InMemorySessionStorage(parsed.header, parsed.entries)
    leaves = [e.id for e in parsed.entries]
    for leaf, result in zip(leaves, run_pi(path, leaves)["results"], strict=True):
        assert context_json(storage, leaf) == result["context"], leaf
        llm = convert_to_llm(build_session_context(storage.get_branch(leaf)).messages)
        assert [m.to_json_dict() for m in llm] == result["llmMessages"], leaf
    exported = export_text(parsed.header, parsed.entries, parsed.leaf_id)
    assert '"role":"hookMessage"' in exported.replace(" ", "")


def _two_roots_and_a_compaction(version: object, index: object) -> str:
    """A file whose reading turns on its header's version: two roots (as v3, the second is
    the leaf's branch; as v1, one chain) and a compaction keeping from ``index`` (v1)."""
    header: dict[str, Any] = {"type": "session", "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")
    if version != "missing":
        header["version"] = version
    rows = [header]
    for n, text in enumerate(["a", "b", "c", "d"]):
        message = {"role": "user", "content": text, "timestamp": n}
        rows.append({"type": "message", "id": f"u000000{n}", "parentId": None, "message": message})
    rows.append(
        {
            "type": "compaction",
            "id": "c0000001",
            "parentId": "u0000003",
            "summary": "S",
            "firstKeptEntryIndex": index,
            "firstKeptEntryId": "u0000003",
            "tokensBefore": 9,
        }
    )
    for row in rows[1:]:
        row["timestamp"] = "2026-01-15T08:30:01.000Z"
    return "".join(json.dumps(row) + "\n" for row in rows)


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize(
    ("version", "index"),
    [
        ("1", 2),
        (1.0, 2.0),
        (None, 2),
        ("missing", 2.5),
        (True, "2"),
        (" 1 ", -1),
        ("2", 2),
        (2.0, 2),
        (3.0, 2),
        ("abc", 2),
        ([], 2),
        ([2], 2),
        ({"v": 1}, 2),
        (0, True),
    ],
)
def test_pi_and_we_agree_on_versions_and_indexes_that_are_not_whole_numbers(
    version: object, index: object, tmp_path: Path
) -> None:
    """pi compares a header's version, and takes a v1 compaction's index, as JavaScript does."""
    path = tmp_path / "odd.jsonl"
    path.write_text(_two_roots_and_a_compaction(version, index))
    parsed = parse_session_text(path.read_text())
    storage = InMemorySessionStorage(parsed.header, parsed.entries)
    theirs = run_pi(path)["results"][0]
    assert context_json(storage, parsed.leaf_id) == theirs["context"]


def test_half_a_surrogate_pair_becomes_u_fffd_on_import_and_is_said_once(
    tmp_path: Path,
) -> None:
    """pi's JavaScript holds half a UTF-16 pair (a text cut inside an emoji); no UTF-8 text
    can, so the file is imported with U+FFFD in its place, once said, instead of refused."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")
    first = {"role": "user", "content": "cut \ud83d", "timestamp": 1}
    second = {"role": "user", "content": "whole \ud83d\ude00 and \udc00 too", "timestamp": 2}
    stamp = "2026-01-15T08:30:01.000Z"
    entries = [
        {"type": "message", "id": "u0000001", "parentId": None, "message": first},
        {"type": "message", "id": "u0000002", "parentId": "u0000001", "message": second},
    ]
    text = "".join(json.dumps(row) + "\n" for row in [header, *entries]).replace(
        '"message":', f'"timestamp": "{stamp}", "message":'
    )
    assert "\\ud83d" in text  # the escapes, as pi's JSON.stringify writes them
    path = tmp_path / "cut.jsonl"
    path.write_text(text)
    for source in (text, path):
        repo = SqliteSessionRepo(tmp_path / f"{type(source).__name__}.db")
        imported = repo.import_session(source)
        said = [n for n in imported.notes if "unpaired surrogate" in n]
        assert len(said) == 1 and ":2: the unpaired surrogate escape \\ud83d" in said[0], said
        texts = [narrow(m, UserMessage).content for m in imported.session.build_context().messages]
        assert texts == ["cut \ufffd", "whole \U0001f600 and \ufffd too"]
        repo.close()
    folder = tmp_path / "sessions"  # a folder store reads it alike (the file stays as it is)
    folder.mkdir()
    (folder / f"{header['id']}.jsonl").write_text(text)
    kept = JsonlSessionRepo(folder)
    session = kept.open(str(header["id"]))
    texts = [narrow(m, UserMessage).content for m in session.build_context().messages]
    assert texts == ["cut \ufffd", "whole \U0001f600 and \ufffd too"]
    assert "\ufffd" in kept.export_jsonl(session.id)


def _line_endings(text: str, kind: str) -> str:
    if kind == "bom and crlf":
        return "\ufeff" + text.replace("\n", "\r\n")
    return text.replace("\n", "\r")  # "cr": old Mac line ends, which pi does not split at


@pytest.mark.parametrize("kind", ["bom and crlf", "cr"])
def test_line_ends_and_a_byte_order_mark_read_alike_from_text_a_file_and_a_folder(
    kind: str, tmp_path: Path
) -> None:
    """pi trims the file (a byte order mark with it) and splits it at \\n only: a \\r before
    it is JSON whitespace; lines ended by \\r alone are one line, which does not parse. Our
    three readers (text, a file to import, a folder store's file) agree with that and with
    each other."""
    text = _line_endings((DATA / "v3.jsonl").read_text(), kind)
    folder = tmp_path / "sessions"
    folder.mkdir()
    header = json.loads((DATA / "v3.jsonl").read_text().splitlines()[0])
    path = folder / f"{header['id']}.jsonl"
    path.write_bytes(text.encode())
    readers: list[Callable[[], Any]] = [
        lambda: parse_session_text(text).entries,
        lambda: InMemorySessionRepo().import_session(path).session.get_entries(),
        lambda: JsonlSessionRepo(folder).open(header["id"]).get_entries(),
    ]
    if kind == "cr":
        for read in readers:
            with pytest.raises(SessionError) as refused:
                read()
            assert ":1: " in refused.value.message and "JSON" in refused.value.message
        return
    expected = [
        e.to_json_dict() for e in parse_session_text((DATA / "v3.jsonl").read_text()).entries
    ]
    for read in readers:
        assert [e.to_json_dict() for e in read()] == expected
    if PI is not None:
        assert [e["id"] for e in run_pi(path)["entries"]] == [e["id"] for e in expected]


# The entry types pi 0.73 knows (its SessionEntry union).
PI_ENTRY_TYPES = {
    "message",
    "thinking_level_change",
    "model_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
}


def random_session(seed: int) -> Session:
    """A session exercising every entry type, several branches and leaf moves."""
    rng = random.Random(seed)
    session = Session(InMemorySessionStorage())
    session.append_active_tools_change(["bash", "read"])  # as every agent's run records
    for step in range(60):
        ids = [e.id for e in session.get_entries() if e.type != "leaf"]
        choice = rng.random()
        if choice < 0.3 or not ids:
            contents: list[str | list[UserContent]] = [
                "plain",
                [TextContent(text="blocks"), ImageContent(data="aGk=", mime_type="image/png")],
            ]
            content = rng.choice(contents)
            session.append_message(UserMessage(content=content, timestamp=step))
        elif choice < 0.5:
            message = AssistantMessage(
                content=[
                    TextContent(text=f"a{step}"),
                    ToolCall(id=f"t{step}", name="bash", arguments={"c": 1}),
                ],
                provider=rng.choice(["openai", "anthropic"]),
                model=f"m{step}",
                timestamp=step,
            )
            session.append_message(message)
            session.append_message(
                ToolResultMessage(
                    tool_call_id=f"t{step}",
                    tool_name="bash",
                    content=[TextContent(text="ok")],
                    timestamp=step,
                )
            )
        elif choice < 0.55:
            session.append_message(
                BashExecutionMessage(
                    command="ls", output="x", exit_code=rng.choice([0, 1]), timestamp=step
                )
            )
        elif choice < 0.6:
            session.append_thinking_level_change(rng.choice(["low", "high"]))
        elif choice < 0.65:
            session.append_model_change("google", f"g{step}")
        elif choice < 0.7:
            session.append_custom_message("note", f"note {step}", display=rng.random() < 0.5)
        elif choice < 0.75:
            session.append_custom("state", {"step": step})
        elif choice < 0.8:
            session.append_label(rng.choice(ids), rng.choice(["x", None]))
        elif choice < 0.85:
            session.append_compaction(f"summary {step}", rng.choice(ids), step * 10)
        elif choice < 0.9:
            session.set_name(f"name {step}")
        elif choice < 0.95:
            session.move_to(rng.choice(ids))
        else:
            session.move_to(rng.choice(ids), {"summary": f"branch {step}"})
    return session


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize("seed", range(3))
def test_pi_resumes_files_we_write_on_the_same_branch(seed: int, tmp_path: Path) -> None:
    """pi reads every line of the files we write as an entry it knows (its /tree showed our
    leaf moves and active tools changes as nodes of a type it did not know, blank): each is
    a custom entry of ours, which pi hides there; we read it back as ours."""
    session = random_session(seed)
    types = {entry.type for entry in session.get_entries()}
    assert {"leaf", "active_tools_change"} <= types
    repo = JsonlSessionRepo(tmp_path)
    copy = repo.import_jsonl(export_text(session.header, session.get_entries(), session.leaf_id))
    ours = copy.build_context().to_json_dict()
    ours.pop("activeToolNames", None)
    file = tmp_path / f"{copy.id}.jsonl"
    expected = run_pi(file)  # pi's default: resume at the last line
    assert ours == expected["results"][0]["context"]
    assert [json.loads(line) for line in file.read_text().splitlines()[1:]] == expected["entries"]
    assert {entry["type"] for entry in expected["entries"]} <= PI_ENTRY_TYPES
    again = JsonlSessionRepo(tmp_path).open(copy.id)
    assert again.get_entries() == session.get_entries() and again.leaf_id == session.leaf_id
    with SqliteSessionRepo(tmp_path / "s.db") as database:  # its export, from the stored JSON
        database.import_jsonl(file.read_text())
        assert database.export_jsonl(copy.id) == file.read_text()


def depth_first_tree(roots: Sequence[TreeLike]) -> list[dict[str, Any]]:
    """A tree as pi's oracle prints it: its nodes depth first, each {id, label, children}."""
    found: list[dict[str, Any]] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        found.append(
            {"id": node.id, "label": node.label, "children": [c.id for c in node.children]}
        )
        stack.extend(reversed(node.children))
    return found


@needs_pi
@pytest.mark.node
def test_pi_and_we_agree_on_the_tree_of_parents_that_come_later_or_are_missing(
    tmp_path: Path,
) -> None:
    """pi links an entry to its parent wherever the parent's line is in the file, and shows an
    entry whose parent is not in the file as a root: so do our trees, and the leaves and
    branch points counted."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")

    def entry(entry_id: str, parent: str | None, **fields: Any) -> dict[str, Any]:
        base = {"id": entry_id, "parentId": parent, "timestamp": "2026-01-15T08:30:01.000Z"}
        return {**base, **fields}

    def user(entry_id: str, parent: str | None, text: str) -> dict[str, Any]:
        message = {"role": "user", "content": text, "timestamp": 1}
        return entry(entry_id, parent, type="message", message=message)

    rows = [
        header,
        user("c0000002", "r0000001", "a child before its parent"),
        user("r0000001", None, "the root"),
        user("c0000003", "r0000001", "a child after it"),
        user("d0000005", "o0000004", "below an orphan, before it"),
        user("o0000004", "gone0000", "an orphan"),
        entry("l0000006", "c0000003", type="label", targetId="c0000002", label="early"),
        user("o0000007", "gone0000", "another orphan, of the same missing parent"),
    ]
    path = tmp_path / "later.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    theirs = run_pi(path)["manager"]["tree"]
    assert [node["id"] for node in theirs][:2] == ["r0000001", "c0000002"]  # linked, by pi
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    ):
        session = repo.import_session(path).session
        assert depth_first_tree(session.tree()) == theirs, type(repo).__name__
        assert depth_first_tree(outline_tree(session)) == theirs, type(repo).__name__
        flat = {node["id"]: node for node in flat_tree(session)}
        for node in theirs:
            assert flat[node["id"]]["children"] == node["children"]
            for child in node["children"]:
                assert flat[child]["parentId"] == node["id"]
        stats = session.stats()  # the figures of pi's tree, also where the database counts them
        assert stats.leaf_count == sum(1 for node in theirs if not node["children"])
        assert stats.branch_point_count == sum(1 for node in theirs if len(node["children"]) > 1)
        repo.close()


@needs_pi
@pytest.mark.node
def test_custom_messages_without_display_or_with_null_details_read_and_export_as_pi(
    tmp_path: Path,
) -> None:
    """An extension's custom message may lack ``display`` (pi's TUI then hides it) or carry
    ``details: null``: the context is pi's, and the export keeps the entries as they were, so
    a hidden message does not come back shown."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")
    stamp = "2026-01-15T08:30:01.000Z"
    rows: list[dict[str, Any]] = [
        header,
        {"type": "custom_message", "id": "m0000001", "parentId": None, "timestamp": stamp},
        {"type": "custom_message", "id": "m0000002", "parentId": "m0000001", "timestamp": stamp},
        {"type": "custom_message", "id": "m0000003", "parentId": "m0000002", "timestamp": stamp},
    ]
    rows[1].update(customType="ext", content="no display")
    rows[2].update(customType="ext", content="details null", display=False, details=None)
    rows[3].update(customType="ext", content=[{"type": "text", "text": "t"}], display=True)
    path = tmp_path / "custom.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    theirs = run_pi(path)
    assert "display" not in theirs["entries"][0]
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    ):
        session = repo.import_session(path).session
        ours = session.build_context().to_json_dict()
        ours.pop("activeToolNames", None)
        assert ours == theirs["results"][0]["context"], type(repo).__name__
        assert [e.to_json_dict() for e in session.get_entries()] == theirs["entries"]
        exported = tmp_path / f"{type(repo).__name__}.jsonl"
        exported.write_text(repo.export_jsonl(session.id))
        assert run_pi(exported)["entries"] == theirs["entries"]
        repo.close()


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize(
    "name", ["  plain  ", "\ufeffbom\ufeff", "\x1fcontrol\x85", "\u3000wide\u2028", "\ufeff \t"]
)
def test_pi_and_we_agree_on_a_session_name_trimmed_as_javascript_trims(
    name: str, tmp_path: Path
) -> None:
    """pi shows a session_info entry's name trimmed by JavaScript's trim(), which removes a
    byte order mark and keeps U+001C-U+001F and U+0085: ours trimmed with Python's strip(),
    which does neither, so an imported session was listed by another name than pi's."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    info = {"type": "session_info", "id": "n0000001", "parentId": None, "name": name}
    info["timestamp"] = header["timestamp"] = "2026-01-15T08:30:00.000Z"
    path = tmp_path / "named.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(info) + "\n")
    theirs = run_pi(path)["manager"]["name"]
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    ):
        session = repo.import_session(path).session
        assert session.name == theirs, type(repo).__name__
        assert [row.name for row in repo.list().items] == [theirs], type(repo).__name__
        repo.close()


@needs_pi
@pytest.mark.node
def test_pi_and_we_agree_on_the_order_of_an_entrys_children_by_their_times(
    tmp_path: Path,
) -> None:
    """pi's getTree shows an entry's children oldest first (JavaScript's sort by ``new
    Date(timestamp)``; a time that does not read is NaN, which the sort takes for equal to
    anything); roots stay in the file's order. Ours listed children in the order appended, so
    a branch made after a clock was set back, or written with another zone's offset, was
    shown in another place than in pi's /tree."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")

    def user(entry_id: str, parent: str | None, stamp: str) -> dict[str, Any]:
        message = {"role": "user", "content": f"at {stamp}", "timestamp": 1}
        entry = {"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp}
        return {**entry, "message": message}

    def at(millis: int) -> str:
        return f"2026-01-15T08:30:01.{millis:03d}Z"

    rows = [
        header,
        user("r0000001", None, at(500)),
        user("r0000002", None, at(100)),  # a later root, older: roots are not sorted
        # mixed, with times that do not read (placed as V8's sort places NaN)
        *(
            user(f"a000000{n}", "r0000001", stamp)
            for n, stamp in enumerate(
                [at(5), at(3), "yesterday", at(1), "2026-01-15T09:30:01.002+01:00", at(4)], 1
            )
        ),
        # a strictly descending run, then a time that does not read, then the oldest
        *(
            user(f"b000000{n}", "r0000002", stamp)
            for n, stamp in enumerate([at(9), at(8), at(7), "", at(1)], 1)
        ),
        # well-formed times written after a clock was set back
        *(user(f"c000000{n}", "a0000001", at(m)) for n, m in enumerate([30, 10, 20, 10], 1)),
    ]
    path = tmp_path / "times.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    theirs = run_pi(path)["manager"]["tree"]
    assert theirs[0]["id"] == "r0000001"
    assert theirs[0]["children"][0] != "a0000001"  # not the file's order
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    ):
        session = repo.import_session(path).session
        kind = type(repo).__name__
        assert depth_first_tree(session.tree()) == theirs, kind
        assert depth_first_tree(outline_tree(session)) == theirs, kind
        flat = {node["id"]: node["children"] for node in flat_tree(session)}
        assert all(flat[node["id"]] == node["children"] for node in theirs), kind
        repo.close()


@needs_pi
@pytest.mark.node
def test_a_message_without_a_time_reads_and_exports_without_one_as_pi_reads_it(
    tmp_path: Path,
) -> None:
    """A message its file gives no ``timestamp`` (pi takes it as it is) came with the time it
    was read: in the context (a folder store's changed at each reading), in the store and in
    the export, which then told pi another message than the file's."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000a1"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")
    usage = {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}
    cost = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    answer: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": "x"}]}
    answer.update(
        api="a", provider="p", model="m", stopReason="stop", usage={**usage, "cost": cost}
    )
    result: dict[str, Any] = {"role": "toolResult", "toolCallId": "c", "toolName": "t"}
    result["isError"] = False
    result["content"] = [{"type": "text", "text": "r"}]
    messages = [{"role": "user", "content": "no time"}, answer, result]
    rows = [header] + [
        {"type": "message", "id": f"m000000{n}", "parentId": f"m000000{n - 1}" if n > 1 else None}
        | {"timestamp": f"2026-01-15T08:30:0{n}.000Z", "message": message}
        for n, message in enumerate(messages, 1)
    ]
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / f"{header['id']}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    theirs = run_pi(path)
    assert all("timestamp" not in m for m in theirs["results"][0]["context"]["messages"])
    for repo in (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
        JsonlSessionRepo(folder),
    ):
        kind = type(repo).__name__
        if repo.exists(str(header["id"])):
            session = repo.open(str(header["id"]))
        else:
            session = repo.import_session(path).session
        for reopened in (session, repo.open(session.id)):
            ours = reopened.build_context().to_json_dict()
            ours.pop("activeToolNames", None)
            assert ours == theirs["results"][0]["context"], kind
            assert [e.to_json_dict() for e in reopened.get_entries()] == theirs["entries"], kind
        exported = tmp_path / f"{kind}.jsonl"
        exported.write_text(repo.export_jsonl(session.id))
        assert run_pi(exported)["entries"] == theirs["entries"], kind
        repo.close()
