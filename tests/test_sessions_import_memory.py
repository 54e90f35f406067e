"""Importing big pi files streams (bounded memory, all or nothing), and the SQLite parse cache
is bounded in bytes.

The big file is written to disk one line at a time and imported in a child process, whose peak
resident memory is the measure. ``MCP_AGENT_FULL=1`` makes it a million lines (about 500 MB).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_agent.sessions import (
    InMemorySessionRepo,
    JsonlSessionRepo,
    SessionError,
    SqliteSessionRepo,
)
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.sql import cache as sql_cache
from mcp_agent.sessions.sqlite import storage as sqlite_storage

FULL = os.environ.get("MCP_AGENT_FULL") == "1"
BIG_LINES = 1_000_000 if FULL else 20_000  # about 500 MB, or 12 MB
# The import's fixed costs (SQLite's caches, a batch of rows) are all taken by this many lines
# (its peak at 1,000 lines is some 6 MB under that at 3,000, then grows but slowly): the big
# file's peak is compared with this one's.
BASE_LINES = 5_000
RSS_LIMIT_MB = 300
ROOT = Path(__file__).parent.parent

SESSION_ID = "019bc0c6-9b40-7593-af81-ffe2a3c9d6ae"
WORDS = (
    "the session tree keeps every entry of a conversation with its parent so that a branch"
    " can be rebuilt from the leaf up and compacted when the context window is full"
).split()


def entry_id(index: int) -> str:
    """Distinct 8-hex ids in a scrambled order (an odd multiplier is a bijection mod 2**32)."""
    return f"{(index * 2654435761 + 12345) % 2**32:08x}"


def timestamp(index: int) -> str:
    seconds = index % 60
    minutes = index // 60 % 60
    hours = index // 3600 % 24
    day = 1 + index // 86400 % 28
    return f"2026-01-{day:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}.000Z"


def prose(index: int, words: int) -> str:
    return " ".join(WORDS[(index * 7 + k * 3) % len(WORDS)] for k in range(words))


@dataclass
class BigFile:
    path: Path
    entries: int  # lines after the header
    leaf: str


def entry_json(index: int, parent: str | None) -> dict:
    """One pi v3 entry, about 500 bytes: mostly messages, now and then other entry types."""
    base = {"id": entry_id(index), "parentId": parent, "timestamp": timestamp(index)}
    millis = 1_768_000_000_000 + index * 1000
    kind = index % 50
    if kind == 17:
        return {"type": "model_change", **base, "provider": "anthropic", "modelId": "claude"}
    if kind == 29:
        return {"type": "label", **base, "targetId": parent, "label": f"mark {index}"}
    if kind == 41 and parent is not None:
        return {
            "type": "compaction",
            **base,
            "summary": prose(index, 40),
            "firstKeptEntryId": parent,
            "tokensBefore": 12_000,
        }
    role = ("user", "assistant", "toolResult")[index % 3]
    if role == "user":
        message: dict = {"role": "user", "content": prose(index, 70), "timestamp": millis}
    elif role == "assistant":
        message = {
            "role": "assistant",
            "content": [
                {"type": "text", "text": prose(index, 40)},
                {
                    "type": "toolCall",
                    "id": f"call_{index}",
                    "name": "read",
                    "arguments": {"p": "x"},
                },
            ],
            "api": "anthropic-messages",
            "provider": "anthropic",
            "model": "claude",
            "usage": {
                "input": 100,
                "output": 20,
                "cacheRead": 0,
                "cacheWrite": 0,
                "totalTokens": 120,
                "cost": {
                    "input": 0.001,
                    "output": 0.002,
                    "cacheRead": 0,
                    "cacheWrite": 0,
                    "total": 0.003,
                },
            },
            "stopReason": "toolUse",
            "timestamp": millis,
        }
    else:
        message = {
            "role": "toolResult",
            "toolCallId": f"call_{index - 1}",
            "toolName": "read",
            "content": [{"type": "text", "text": prose(index, 60)}],
            "isError": False,
            "timestamp": millis,
        }
    return {"type": "message", **base, "message": message}


def parent_of(index: int) -> int | None:
    """Mostly the previous entry; every 1000th entry branches off from 500 entries back."""
    if index == 0:
        return None
    if index % 1000 == 0:
        return index - 500
    return index - 1


def big_lines(entries: int) -> Iterator[str]:
    header = {
        "type": "session",
        "version": 3,
        "id": SESSION_ID,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/work",
    }
    yield json.dumps(header)
    for index in range(entries):
        parent = parent_of(index)
        yield json.dumps(entry_json(index, None if parent is None else entry_id(parent)))


def write_big_file(path: Path, entries: int, replace: dict[int, str] | None = None) -> BigFile:
    """Written line by line, never whole in memory. ``replace`` maps line numbers (1-based,
    the header is line 1) to the text written there instead."""
    replace = replace or {}
    with open(path, "w", encoding="utf-8") as handle:
        for number, line in enumerate(big_lines(entries), start=1):
            handle.write(replace.get(number, line) + "\n")
    return BigFile(path, entries, entry_id(entries - 1))


def expected_counts(entries: int) -> tuple[int, int]:
    """(messages, total tokens) of a big file of ``entries`` entries."""
    messages = tokens = 0
    for index in range(entries):
        kind = index % 50
        if kind in (17, 29) or (kind == 41 and index > 0):
            continue
        messages += 1
        if index % 3 == 1:
            tokens += 120
    return messages, tokens


def line_of(index: int) -> int:
    """The line number of entry ``index`` (the header is line 1)."""
    return index + 2


# --- a big file, imported into SQLite in a child process --------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from mcp_agent.sessions import SqliteSessionRepo

    repo = SqliteSessionRepo(sys.argv[2])
    session = repo.import_jsonl(Path(sys.argv[1]))
    # VmHWM, this process's own peak: ru_maxrss would carry over the peak of the process
    # that forked it (Linux keeps it across exec), here pytest's after hundreds of tests.
    status = Path("/proc/self/status").read_text().splitlines()
    peak_kib = int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
    print(json.dumps({"id": session.id, "leaf": session.leaf_id, "peak_mb": peak_kib / 1024}))
    repo.close()
    """
)


def import_in_a_child(path: Path, db: Path) -> dict:
    """What CHILD printed after importing ``path`` into ``db``."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM in /proc")
def test_a_big_file_imports_into_sqlite_in_bounded_memory(tmp_path: Path) -> None:
    small = write_big_file(tmp_path / "small.jsonl", BASE_LINES)
    baseline = import_in_a_child(small.path, tmp_path / "small.db")["peak_mb"]
    big = write_big_file(tmp_path / "big.jsonl", BIG_LINES)
    db = tmp_path / "big.db"
    result = import_in_a_child(big.path, db)
    size_mb = big.path.stat().st_size / 2**20
    more_mb = size_mb - small.path.stat().st_size / 2**20
    # The peak grows by less than half the text the big file has more than the small one:
    # holding the file's text, or its entries parsed, whole would cost more than that text.
    assert result["peak_mb"] - baseline < more_mb / 2, (result, baseline, f"{more_mb:.0f} MB")
    assert result["peak_mb"] < RSS_LIMIT_MB, (result, f"file of {size_mb:.0f} MB")
    assert result["id"] == SESSION_ID
    assert result["leaf"] == big.leaf

    # Every entry, in file order, with its parent; the row's counters and leaf.
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT id, parent_id FROM entries WHERE session_id = ? ORDER BY seq", (SESSION_ID,)
        )
        count = 0
        for index, (found_id, found_parent) in enumerate(rows):
            parent = parent_of(index)
            assert found_id == entry_id(index), index
            assert found_parent == (None if parent is None else entry_id(parent)), index
            count += 1
        assert count == BIG_LINES
        leaf, entry_count, message_count, total_tokens, next_seq = conn.execute(
            "SELECT leaf, entry_count, message_count, total_tokens, next_seq FROM sessions"
            " WHERE id = ?",
            (SESSION_ID,),
        ).fetchone()
    finally:
        conn.close()
    messages, tokens = expected_counts(BIG_LINES)
    assert (leaf, entry_count, next_seq) == (big.leaf, BIG_LINES, BIG_LINES)
    assert (message_count, total_tokens) == (messages, tokens)

    repo = SqliteSessionRepo(db)
    try:
        session = repo.open(SESSION_ID)
        assert session.leaf_id == big.leaf
        last = session.get_entry(big.leaf)
        assert last is not None and last.parent_id == entry_id(BIG_LINES - 2)
        assert session.get_label(entry_id(28)) == "mark 29"
    finally:
        repo.close()


def stream_peak_bytes(entries: int) -> int:
    """Python's peak allocation while a stream of ``entries`` entries is read and dropped.
    Their text is made before tracing starts (it is the input, not what the reader keeps, and
    made under tracing it doubled the time); each line is parsed as the stream reads it."""
    text = list(big_lines(entries))
    lines = ((number, json.loads(line)) for number, line in enumerate(text, 1))
    tracemalloc.start()
    try:
        stream = SessionStream(lines, "<big>")
        for _ in stream:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_file_keeps_nothing_per_entry_in_memory() -> None:
    # The checks that need every entry (ids, parents, cycles) live in a temporary database,
    # so three times the entries cost no more Python memory; ids kept in Python would cost
    # about 200 bytes an entry (1.6 MB more here).
    small, big = stream_peak_bytes(4_000), stream_peak_bytes(12_000)
    assert big - small < 400_000, (small, big)


# --- a bad line anywhere stores nothing, in every backend -------------------------------------

MIDDLE_LINES = 5_000  # more than two SQLite import batches


def open_repo(kind: str, tmp: Path) -> InMemorySessionRepo | JsonlSessionRepo | SqliteSessionRepo:
    if kind == "sqlite":
        return SqliteSessionRepo(tmp / "s.db")
    if kind == "jsonl":
        return JsonlSessionRepo(tmp / "jsonl")
    return InMemorySessionRepo()


def bad_entry(index: int, **changes: object) -> str:
    parent = parent_of(index)
    data = entry_json(index, None if parent is None else entry_id(parent))
    data.update(changes)
    return json.dumps(data)


LAST = MIDDLE_LINES - 1  # the last entry's index
BAD_FILES = {
    # name: (line replaced -> text, what the error names)
    "not-json": ({line_of(LAST - 3): "{not json"}, f":{line_of(LAST - 3)}: line is not valid JSON"),
    "not-an-object": ({line_of(LAST - 3): "[1, 2]"}, f":{line_of(LAST - 3)}: line is not a JSON"),
    "invalid-entry": (
        {line_of(LAST - 3): bad_entry(LAST - 3, timestamp=None)},
        f":{line_of(LAST - 3)}: ",
    ),
    "duplicate": (
        {line_of(LAST): bad_entry(LAST, id=entry_id(7))},
        f":{line_of(LAST)}: duplicate entry id {entry_id(7)} (also ",
    ),
    "cycle": (
        {
            line_of(10): bad_entry(10, parentId=entry_id(LAST)),
            line_of(LAST): bad_entry(LAST, parentId=entry_id(11)),
        },
        f":{line_of(10)}: parentId chain of {entry_id(10)} has a cycle",
    ),
}


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "memory"])
@pytest.mark.parametrize("bad", sorted(BAD_FILES))
def test_a_bad_line_near_the_end_imports_nothing(tmp_path: Path, kind: str, bad: str) -> None:
    replace, needle = BAD_FILES[bad]
    big = write_big_file(tmp_path / "bad.jsonl", MIDDLE_LINES, replace)
    repo = open_repo(kind, tmp_path)
    try:
        keep = repo.create(name="already here")
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(big.path)
        assert error.value.code == "invalid_import"
        assert str(big.path) + needle in error.value.message
        assert not repo.exists(SESSION_ID)
        assert [s.id for s in repo.list().items] == [keep.id]
    finally:
        repo.close()
    if kind == "sqlite":
        conn = sqlite3.connect(tmp_path / "s.db")
        try:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
            assert conn.execute(
                "SELECT count(*) FROM entries WHERE session_id = ?", (SESSION_ID,)
            ).fetchone() == (0,)
        finally:
            conn.close()
    if kind == "jsonl":
        # no file for the session, and no temporary file left behind
        assert sorted(p.name for p in (tmp_path / "jsonl").iterdir()) == [f"{keep.id}.jsonl"]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "memory"])
def test_a_good_file_imports_whole_in_every_backend(tmp_path: Path, kind: str) -> None:
    big = write_big_file(tmp_path / "good.jsonl", MIDDLE_LINES)
    repo = open_repo(kind, tmp_path)
    try:
        session = repo.import_jsonl(big.path)
        assert session.leaf_id == big.leaf
        assert [e.id for e in session.get_entries()] == [entry_id(i) for i in range(MIDDLE_LINES)]
        messages, tokens = expected_counts(MIDDLE_LINES)
        stats = session.stats()
        assert (stats.entry_count, stats.message_count) == (MIDDLE_LINES, messages)
        assert stats.total_tokens == tokens
        assert session.get_label(entry_id(28)) == "mark 29"
        summary = repo.summary(session.id)
        assert summary.entry_count == MIDDLE_LINES and summary.total_tokens == tokens
        assert repo.export_jsonl(session.id).count("\n") == MIDDLE_LINES + 1
    finally:
        repo.close()


def test_a_torn_last_line_is_still_skipped_and_said_so(tmp_path: Path) -> None:
    big = write_big_file(tmp_path / "torn.jsonl", 3000, {line_of(2999): '{"type":"mess'})
    # Torn: cut off before its line break.
    with big.path.open("r+b") as handle:
        handle.truncate(big.path.stat().st_size - 1)
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        imported = repo.import_session(big.path)
        session = imported.session
        assert [
            f"torn.jsonl:{line_of(2999)}: skipped the last line" in n for n in imported.notes
        ] == [True]
        assert session.leaf_id == entry_id(2998)
        assert session.stats().entry_count == 2999
    finally:
        repo.close()


def test_a_complete_last_line_that_is_not_json_fails_the_import(tmp_path: Path) -> None:
    big = write_big_file(tmp_path / "garbage.jsonl", 3000, {line_of(2999): "garbage garbage"})
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(big.path)
        assert f"garbage.jsonl:{line_of(2999)}: line is not valid JSON" in str(error.value)
        assert repo.list().items == []
    finally:
        repo.close()


# --- problems are reported as a reader of the whole file reported them ------------------------


def test_the_most_basic_problem_is_reported_wherever_it_is(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")

    def error_of(replace: dict[int, str]) -> str:
        big = write_big_file(tmp_path / "f.jsonl", 3000, replace)
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(big.path)
        assert not repo.exists(SESSION_ID)
        return error.value.message

    try:
        # a line that is not JSON, before an entry that does not parse
        message = error_of({line_of(5): bad_entry(5, timestamp=None), line_of(2900): "{x"})
        assert f":{line_of(2900)}: line is not valid JSON" in message
        # an entry that does not parse, before a duplicate id found earlier
        message = error_of(
            {line_of(9): bad_entry(9, id=entry_id(3)), line_of(2900): bad_entry(2900, id=7)}
        )
        assert f":{line_of(2900)}: message entry" in message
        # a duplicate id, before a parent that is missing
        message = error_of(
            {
                line_of(9): bad_entry(9, parentId="0badf00d"),
                line_of(2900): bad_entry(2900, id=entry_id(3)),
            }
        )
        assert f":{line_of(2900)}: duplicate entry id {entry_id(3)} (also " in message
        assert message.endswith(f":{line_of(3)})")
        # a header that is not one, before a broken line at the end
        message = error_of({1: bad_entry(0), line_of(2900): "{x"})
        assert f":{line_of(2900)}: line is not valid JSON" in message
        message = error_of({1: bad_entry(0)})
        assert message.endswith(":1: first line is not a session header")
    finally:
        repo.close()


def test_bytes_that_are_not_utf8_make_the_whole_file_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    write_big_file(path, 3000, {line_of(3): "{broken"})
    with open(path, "ab") as handle:
        handle.write(b'{"caf\xe9": 1}\r\n')
    data = path.read_bytes()
    offset = data.index(b"\xe9")  # the one byte that is no UTF-8, far into the file
    line = data[:offset].count(b"\n") + 1
    expected = (
        f"cannot read {path}: line {line} is not UTF-8 text (byte"
        f" 0xe9 at offset {offset:,} of the file); a pi session file is JSON lines in UTF-8"
    )
    repo = InMemorySessionRepo()
    with pytest.raises(SessionError) as raised:
        repo.import_jsonl(path)
    assert raised.value.code == "invalid_import"
    assert raised.value.message == expected


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "memory"])
def test_a_conflict_is_reported_after_the_files_own_problems(tmp_path: Path, kind: str) -> None:
    good = write_big_file(tmp_path / "good.jsonl", 3000)
    repo = open_repo(kind, tmp_path)
    try:
        repo.import_jsonl(good.path)
        bad = write_big_file(tmp_path / "bad.jsonl", 3000, {line_of(2900): "{x"})
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(bad.path)
        assert error.value.code == "invalid_import"
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(good.path)
        assert error.value.code == "conflict"
        assert repo.summary(SESSION_ID).entry_count == 3000
    finally:
        repo.close()


def test_a_text_is_split_into_lines_as_it_is_read(tmp_path: Path) -> None:
    text = "\n".join(big_lines(3000)) + "\n"
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.import_jsonl(text)
        assert session.leaf_id == entry_id(2999)
        lines = text.split("\n")
        lines[line_of(2000) - 1] = "{x"
        with pytest.raises(SessionError) as error:
            repo.import_jsonl("\n".join(lines))
        assert error.value.code == "invalid_import"  # not a conflict: the file comes first
        assert f"<jsonl>:{line_of(2000)}: line is not valid JSON" in error.value.message
    finally:
        repo.close()


def huge_usage(index: int) -> str:
    """An assistant entry whose input tokens alone fit SQLite, but not three of them."""
    data = json.loads(bad_entry(index))
    data["message"]["usage"]["input"] = 2**62
    return json.dumps(data)


def test_counts_too_large_to_store_are_refused_as_a_whole(tmp_path: Path) -> None:
    # one in each of three import batches: each batch fits, their sum does not
    huge = {line_of(i): huge_usage(i) for i in (1, 2500, 4501)}
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        big = write_big_file(tmp_path / "huge.jsonl", MIDDLE_LINES, huge)
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(big.path)
        assert error.value.code == "invalid_entry" and "too large" in error.value.message
        assert not repo.exists(SESSION_ID)
        # a problem in the file further on is reported instead
        big = write_big_file(tmp_path / "huge.jsonl", MIDDLE_LINES, huge | {line_of(4990): "{x"})
        with pytest.raises(SessionError) as error:
            repo.import_jsonl(big.path)
        assert error.value.code == "invalid_import"
        assert not repo.exists(SESSION_ID)
    finally:
        repo.close()


# --- the SQLite parse cache is bounded in bytes -----------------------------------------------


def large_session_text(session_id: str, entries: int, chars: int) -> str:
    header = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/",
    }
    lines = [json.dumps(header)]
    for index in range(entries):
        text = f"{index} " + "x" * chars
        lines.append(
            json.dumps(
                {
                    "type": "message",
                    "id": entry_id(index),
                    "parentId": entry_id(index - 1) if index else None,
                    "timestamp": timestamp(index),
                    "message": {"role": "user", "content": text, "timestamp": index},
                }
            )
        )
    return "\n".join(lines) + "\n"


def test_reading_every_entry_keeps_the_parse_cache_under_its_byte_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 4 * 2**20
    monkeypatch.setattr(sql_cache, "ENTRY_CACHE_BYTES", bound)
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        big = repo.import_jsonl(large_session_text("big-one", 300, 40_000))  # 12 MB of JSON
        storage = big.storage
        assert isinstance(storage, sqlite_storage.SqliteSessionStorage)
        cache = storage._cache.cache
        assert cache.max_bytes == bound
        entries = storage.get_entries()
        assert len(entries) == 300
        assert 0 < cache.bytes <= bound
        assert storage._cache.bytes == cache.bytes
        # least recently used goes first: the newest entries read are the ones kept
        assert entry_id(299) in storage._cache and entry_id(0) not in storage._cache
        # a branch read (the whole line) and appends keep within the bound too
        assert len(big.get_branch()) == 300
        for _ in range(20):
            storage.append_entry(
                storage.get_entry(entry_id(5)).model_copy(  # type: ignore[union-attr]
                    update={"id": storage.create_entry_id(), "parent_id": big.leaf_id}
                )
            )
        assert 0 < cache.bytes <= bound
    finally:
        repo.close()


def test_the_parse_cache_is_shared_fairly_between_open_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 4 * 2**20
    monkeypatch.setattr(sql_cache, "ENTRY_CACHE_BYTES", bound)
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        small = repo.import_jsonl(large_session_text("small-one", 50, 2_000))
        big = repo.import_jsonl(large_session_text("big-one", 300, 40_000))
        small_storage, big_storage = small.storage, big.storage
        assert isinstance(small_storage, sqlite_storage.SqliteSessionStorage)
        assert isinstance(big_storage, sqlite_storage.SqliteSessionStorage)
        assert small_storage._cache.cache is big_storage._cache.cache  # one budget
        small.build_context()
        small_bytes = small_storage._cache.bytes
        assert len(small_storage._cache) == 50
        big_storage.get_entries()  # a full read of a big session ...
        cache = big_storage._cache.cache
        assert cache.bytes <= bound
        # ... gives back its own older entries, not the small session's
        assert small_storage._cache.bytes == small_bytes
        # a storage that is gone gives its share back
        del small, small_storage
        repo._opened.clear()
        import gc

        gc.collect()
        assert big_storage._cache.get("none") is None  # the next use of the cache lets it go
        assert cache.bytes == big_storage._cache.bytes
    finally:
        repo.close()
