"""What only the JSONL backend promises: pi files, fsync per entry, torn lines, corruption."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from mcp_support import poll
from narrow import narrow, present

from mcp_agent.messages import UserMessage
from mcp_agent.sessions import (
    InMemorySessionRepo,
    InMemorySessionStorage,
    JsonlSessionRepo,
    JsonlSessionStorage,
    Session,
    SessionEntry,
    SessionError,
    jsonl,
)
from mcp_agent.sessions.repo import listed_hits

DATA = Path(__file__).parent / "data" / "pi"

T = TypeVar("T")


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_file_is_a_pi_session_written_one_fsynced_line_per_entry(
    tmp_path: Path, monkeypatch
) -> None:
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create(cwd="/w")
    path = tmp_path / f"{session.id}.jsonl"
    assert lines(path) == [session.header.to_json_dict()]
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    a = session.append_message(user("a"))
    session.append_message(user("b"))
    session.move_to(a)
    assert len(synced) == 3
    written = lines(path)
    assert [e["type"] for e in written] == ["session", "message", "message", "custom"]
    assert written[3]["customType"] == "mcp-agent-sessions.leaf"  # a leaf move, as pi keeps it
    assert written[3]["parentId"] == a and written[3]["data"] == {"targetId": a}
    assert path.read_text().endswith("\n")
    assert repo.export_jsonl(session.id) == path.read_text()


def test_a_torn_last_line_is_left_unread_and_cut_off_by_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "TORN_WAIT", 0.001)
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    session.append_message(user("b"))
    repo.close()
    path = tmp_path / f"{session.id}.jsonl"
    whole = path.read_bytes()
    # a crash in the middle of writing a line with a multi-byte character
    torn = whole + '{"type":"message","id":"12345678","message":{"content":"é'.encode()[:-1]
    path.write_bytes(torn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # logged, not a Python warning
        reopened = JsonlSessionRepo(tmp_path).open(session.id)
    assert [narrow(m, UserMessage).text for m in reopened.build_context().messages] == ["a", "b"]
    assert path.read_bytes() == torn  # a read changes nothing: pi may be writing that line
    reopened.append_message(user("c"))
    assert path.read_bytes().startswith(whole) and lines(path)[-1]["message"]["content"] == "c"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = JsonlSessionRepo(tmp_path).open(session.id)
    assert [narrow(m, UserMessage).text for m in again.build_context().messages] == ["a", "b", "c"]


def test_a_line_pi_is_writing_is_neither_cut_off_by_a_read_nor_followed_by_an_append(
    tmp_path: Path,
) -> None:
    """pi takes no lock. A read while it was writing a long line took the line for a crash's
    torn one and rewrote the file without it: pi's line went to the file no longer at the
    path, lost, and its next entry became a root."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    first = session.append_message(user("a"))
    path = repo.path_for(session.id)
    line = json.dumps(
        {
            "type": "message",
            "id": "0000000b",
            "parentId": first,
            "timestamp": "2026-01-15T08:30:01.000Z",
            "message": {"role": "user", "content": "b" * 100_000, "timestamp": 1},
        }
    ).encode()
    with open(path, "ab") as pi:  # no lock, as pi writes
        pi.write(line[:50_000])
        pi.flush()
        reader = JsonlSessionRepo(tmp_path)
        assert [e.id for e in reader.open(session.id).get_entries()] == [first]
        appended: list[str] = []
        writer = threading.Thread(
            target=lambda: appended.append(reader.open(session.id).append_message(user("c")))
        )
        writer.start()
        writer.join(timeout=0.2)  # it waits for the line to be whole
        pi.write(line[50_000:] + b"\n")
    writer.join(timeout=30)
    written = lines(path)
    assert [e.get("id") for e in written[1:]] == [first, "0000000b", appended[0]]
    assert written[-1]["parentId"] == "0000000b"


def test_a_complete_last_line_that_is_not_json_is_damage_not_a_torn_write(
    tmp_path: Path,
) -> None:
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    repo.close()
    path = tmp_path / f"{session.id}.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b"garbage garbage\n")
    with pytest.raises(SessionError) as error:
        JsonlSessionRepo(tmp_path).open(session.id)
    assert error.value.code == "corrupt" and ".jsonl:3: line is not" in str(error.value)
    assert path.read_bytes() == whole + b"garbage garbage\n"  # left as it was


@pytest.mark.parametrize("last", [b"garbage garbage", b"[1]", b'{"type": "custom"} junk'])
def test_a_whole_last_line_without_its_line_break_is_damage_and_stays(
    tmp_path: Path, last: bytes
) -> None:
    """Only the start of a JSON text is a torn write (cut off); a whole line that is not an
    object is someone's text, never cut."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    repo.close()
    path = tmp_path / f"{session.id}.jsonl"
    damaged = path.read_bytes() + last
    path.write_bytes(damaged)
    with pytest.raises(SessionError) as error:
        JsonlSessionRepo(tmp_path).open(session.id)
    assert error.value.code == "corrupt" and ".jsonl:3: line is not" in str(error.value)
    assert path.read_bytes() == damaged


def test_a_failed_append_leaves_no_partial_line_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that takes the start of a line, then is full (tests/test_disk_full.py has a
    real one): the start is cut off, and nothing of the line is written later."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    storage = session.storage
    assert isinstance(storage, JsonlSessionStorage)
    real_write = os.write
    calls = 0

    def full_after_half(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        monkeypatch.setattr(os, "write", real_write)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_after_half)
    with pytest.raises(SessionError) as refused:  # said, not an OSError a client never reads
        session.append_message(user("lost"))
    assert refused.value.code == "storage"
    assert refused.value.message.startswith(f"no room left to write {storage.path}")
    session.append_message(user("b"))
    repo.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = JsonlSessionRepo(tmp_path).open(session.id)
    assert [narrow(m, UserMessage).text for m in again.build_context().messages] == ["a", "b"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_appending_to_many_sessions_holds_no_descriptor_for_each(tmp_path: Path) -> None:
    """Each session appended to kept its file open for as long as the repo kept the session
    (a server: for good): a server with ulimit -n 400 refused every write ("Too many open
    files") after 381 sessions, and could accept no connection either."""
    repo = JsonlSessionRepo(tmp_path)
    before = len(os.listdir("/proc/self/fd"))
    sessions = [repo.create() for _ in range(40)]
    for session in sessions:
        session.append_message(user("a"))
    assert len(os.listdir("/proc/self/fd")) - before < 10
    assert [len(repo.open(s.id).get_entries()) for s in sessions] == [1] * 40
    repo.close()


def test_damage_before_the_last_line_names_file_and_line(tmp_path: Path) -> None:
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    for text in "abc":
        session.append_message(user(text))
    repo.close()
    path = tmp_path / f"{session.id}.jsonl"
    content = path.read_text().splitlines()
    content[2] = content[2][:20]
    path.write_text("\n".join(content) + "\n")
    with pytest.raises(SessionError) as error:
        JsonlSessionRepo(tmp_path).open(session.id)
    assert error.value.code == "corrupt"
    assert f"{path}:3:" in str(error.value)


# A custom entry but for its data, which the tests give.
CUSTOM = '{"type":"custom","id":"ab12cd34","parentId":null,"timestamp":"t","customType":"x","data":'


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("\u00a0\u3000", None),  # blank to pi (trim) and to an import: skipped
        (CUSTOM + "NaN}", "NaN"),
        (CUSTOM + "[" * 5000 + "]" * 5000 + "}", "nested"),
    ],
)
def test_a_folder_store_reads_a_line_as_an_import_does(
    tmp_path: Path, line: str, says: str | None
) -> None:
    """One reader of lines: a line pi skips as blank is skipped, and JSON that pi's
    JSON.parse refuses (NaN), or too deep to read, is damage said as such (not a Python
    RecursionError, not an entry pi does not see)."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    first = session.append_message(user("a"))
    repo.close()
    path = tmp_path / f"{session.id}.jsonl"
    after = {"type": "custom", "id": "0000000b", "parentId": first, "customType": "x"}
    after["timestamp"] = "2026-01-15T08:30:01.000Z"
    path.write_text(path.read_text() + line + "\n" + json.dumps(after) + "\n")
    readers = [
        lambda: JsonlSessionRepo(tmp_path).open(session.id).get_entries(),
        lambda: InMemorySessionRepo().import_session(path).session.get_entries(),
    ]
    for read in readers:
        if says is None:
            assert [e.id for e in read()] == [first, "0000000b"]
            continue
        with pytest.raises(SessionError) as refused:
            read()
        assert f"{path}:3: " in refused.value.message and says in refused.value.message


def test_an_entry_whose_parent_is_not_in_a_file_is_a_root(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": "s",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/",
    }
    entry = {
        "type": "custom",
        "customType": "x",
        "id": "aaaaaaaa",
        "parentId": "ffffffff",
        "timestamp": "t",
    }
    path.write_text(json.dumps(header) + "\n" + json.dumps(entry) + "\n")
    storage = JsonlSessionStorage(path)  # pi opens it: the entry is a root
    assert [e.id for e in storage.get_branch("aaaaaaaa")] == ["aaaaaaaa"]


def test_old_pi_files_are_migrated_and_rewritten_on_open(tmp_path: Path) -> None:
    path = tmp_path / "ef51229d-724f-4bd9-af39-6eae2bc8222f.jsonl"
    shutil.copy(DATA / "v1.jsonl", path)
    session = JsonlSessionRepo(tmp_path).open(path.stem)
    written = lines(path)
    assert written[0]["version"] == 3
    assert all("id" in e and "parentId" in e for e in written[1:])
    assert len(session.get_branch()) == 19


def test_a_file_without_a_final_newline_gets_one_before_the_next_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text((DATA / "v3.jsonl").read_text().rstrip("\n"))
    session = Session(JsonlSessionStorage(path))
    session.append_message(user("more"))
    assert lines(path)[-1]["message"]["content"] == "more"
    assert len(lines(path)) == 42


def test_opening_twice_shares_one_index_and_sees_outside_changes(tmp_path: Path) -> None:
    repo = JsonlSessionRepo(tmp_path)
    first = repo.create()
    second = repo.open(first.id)
    a = first.append_message(user("a"))
    assert second.leaf_id == a
    b = second.append_message(user("b"))
    assert present(second.get_entry(b)).parent_id == a
    # another program (pi, say) appends a line
    path = tmp_path / f"{first.id}.jsonl"
    line = {
        "type": "message",
        "id": "0badcafe",
        "parentId": b,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "from pi", "timestamp": 5},
    }
    with open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    os.utime(path, ns=(0, 1))  # make the change visible even within one clock tick
    third = repo.open(first.id)
    assert third.leaf_id == "0badcafe"


def test_an_open_while_an_append_is_under_way_waits_for_it_instead_of_reloading(
    tmp_path: Path, monkeypatch
) -> None:
    # The server opens a session on one worker thread while another appends to it: the
    # file has changed but its stamp not yet, which is no other program's change.
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    opened: list[Session] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the append has written its line: another thread opens
        if not opened:
            other = threading.Thread(target=lambda: opened.append(repo.open(session.id)))
            other.start()
            other.join(0.3)  # it waits for the append (or, before, closed its file under it)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    appended = session.append_message(user("a"))  # before: OSError, the line cut off again
    monkeypatch.undo()
    poll(lambda: opened, "the other thread never opened the session")
    assert opened[0].storage is session.storage  # the same index, not one read again
    assert [e.id for e in JsonlSessionRepo(tmp_path).open(session.id).get_branch()] == [appended]


def test_a_delete_waits_for_an_append_under_way_and_later_appends_are_refused(
    tmp_path: Path, monkeypatch
) -> None:
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    path = tmp_path / f"{session.id}.jsonl"
    deleting: list[threading.Thread] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the append has written its line: another thread deletes
        if not deleting:
            deleting.append(threading.Thread(target=repo.delete, args=(session.id,)))
            deleting[0].start()
            deleting[0].join(0.3)  # it waits for the append (or, before, closed its file)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    session.append_message(user("a"))  # before: OSError (its file closed under it)
    monkeypatch.undo()
    deleting[0].join(10)
    assert not path.exists()
    with pytest.raises(SessionError) as error:
        session.append_message(user("b"))  # before: a file of this one line, no header
    assert error.value.code == "not_found" and "was deleted" in error.value.message
    assert not path.exists()
    assert repo.list().items == []


def test_new_file_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    storage = JsonlSessionStorage.create(path)
    with pytest.raises(SessionError) as error:
        JsonlSessionStorage(path, storage.get_metadata())
    assert error.value.code == "conflict"


@pytest.mark.parametrize("bad", ["../escape", "a/b", ".hidden", ""])
def test_session_ids_cannot_escape_the_directory(tmp_path: Path, bad: str) -> None:
    repo = JsonlSessionRepo(tmp_path / "d")
    with pytest.raises(SessionError) as error:
        repo.open(bad)
    assert error.value.code == "not_found"


# A second program of ours on the same folder (an IDE window's own server): it appends to a
# session it opened once, each append built on the leaf as it last saw it.
WRITER = """
import sys
from mcp_agent.messages import UserMessage
from mcp_agent.sessions import JsonlSessionRepo
session = JsonlSessionRepo(sys.argv[1]).open(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
for n in range(int(sys.argv[3])):
    session.append_message(UserMessage(content=f"{sys.argv[4]}{n}", timestamp=1))
"""


def test_two_processes_appending_to_one_file_keep_one_conversation(tmp_path: Path) -> None:
    """Each process appended from its own stale leaf: the file forked at every turn of the
    other, and a resume (the leaf's branch) left out the other's messages."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("start"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), session.id, "40", tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        for tag in "ab"
    ]
    for writer in writers:  # both have read the file before either appends
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write(b"go\n")
        writer.stdin.close()
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0]
    again = JsonlSessionRepo(tmp_path).open(session.id)
    texts = [narrow(m, UserMessage).text for m in again.build_context().messages]
    assert len(texts) == 81 and texts[0] == "start"
    for tag in "ab":
        assert [text for text in texts if text[0] == tag] == [f"{tag}{n}" for n in range(40)]
    parents = [entry.parent_id for entry in again.get_entries()]
    assert len(parents) == len(set(parents))  # no entry has two children: no fork


def test_a_line_another_process_is_writing_is_waited_for_not_cut_off(tmp_path: Path) -> None:
    """A read while another process of ours had written half a line took it for a crash's torn
    line and rewrote the file without it: the other's append, acknowledged once its line was
    whole, went to the file no longer at the path, and was lost."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    path = repo.path_for(session.id)
    line = json.dumps(
        {
            "type": "message",
            "id": "0000000b",
            "parentId": session.leaf_id,
            "timestamp": "2026-01-15T08:30:01.000Z",
            "message": {"role": "user", "content": "b", "timestamp": 1},
        }
    ).encode()
    opened: list[Session] = []
    with open(path, "ab") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # the other process's append, half done
        other.write(line[:20])
        other.flush()
        reader = threading.Thread(
            target=lambda: opened.append(JsonlSessionRepo(tmp_path).open(session.id))
        )
        reader.start()
        reader.join(timeout=0.3)  # it must still be waiting: the lock is held
        other.write(line[20:] + b"\n")
        other.flush()
        fcntl.flock(other, fcntl.LOCK_UN)
    reader.join(timeout=30)
    assert [e.id for e in opened[0].get_entries()][-1] == "0000000b"
    assert lines(path)[-1]["id"] == "0000000b"


def test_sessions_opened_twice_share_one_index_and_see_another_process(tmp_path: Path) -> None:
    repo = JsonlSessionRepo(tmp_path)
    held = repo.create()
    held.append_message(user("a"))
    theirs = JsonlSessionRepo(tmp_path).open(held.id)  # another process
    theirs.append_message(user("b"))
    again = repo.open(held.id)
    assert again.storage is held.storage  # taken up in place: the holder sees it too
    assert held.leaf_id == theirs.leaf_id
    theirs.append_message(user("c"))
    held.append_message(user("d"))  # without opening again: taken up by the append
    texts = [narrow(m, UserMessage).text for m in repo.open(held.id).build_context().messages]
    assert texts == ["a", "b", "c", "d"]


def test_the_sessions_kept_in_memory_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session a server opened stayed indexed in memory for good: a server on a big pi
    folder grew to the size of every file it had read."""
    monkeypatch.setattr(jsonl, "OPEN_SESSIONS", 3)
    repo = JsonlSessionRepo(tmp_path)
    held = repo.create()
    held.append_message(user("held"))
    ids = []
    for n in range(10):
        session = repo.create()
        session.append_message(user(str(n)))
        ids.append(session.id)
        del session
    for session_id in ids:
        repo.open(session_id)
    assert len(repo._open) == 3
    assert repo.open(held.id).storage is held.storage  # let go, but still held: shared
    monkeypatch.setattr(jsonl, "OPEN_BYTES", 1)
    repo.open(ids[0])
    assert list(repo._open) == [ids[0]]  # the one used last is always kept
    texts = [narrow(m, UserMessage).text for m in repo.open(ids[5]).build_context().messages]
    assert texts == ["5"]


def test_the_words_a_listing_keeps_for_queries_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing kept every word of every file it had read (each tool output) for queries: a
    big pi folder's were gigabytes. Past the bound a query reads the file again."""
    monkeypatch.setattr(jsonl, "LISTED_CHARS", 40)
    repo = JsonlSessionRepo(tmp_path)
    for word in ["apple", "banana", "cherry"]:
        repo.create().append_message(user(f"{word} " + "x" * 20))
    for _ in range(2):  # the second time from what the first kept
        assert len(repo.list().items) == 3
        for word in ["apple", "banana", "cherry"]:
            found = repo.list(query=word).items
            assert [repo.open(s.id).build_context().messages[0] for s in found] == [
                user(f"{word} " + "x" * 20)
            ]
        kept = [texts for _, _, texts in repo._listing.values() if texts is not None]
        assert 0 < sum(len(text) for texts in kept for text in texts) <= 40


def test_an_append_made_while_a_torn_file_is_rewritten_is_taken_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite that cuts a torn line stamped the file at the path after renaming it into
    place: another process's append in between (to the new file, whose lock nobody held) was
    counted as read. Its entry stayed out of the index, and the next append forked the file
    and left it off the leaf's branch."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    path = repo.path_for(session.id)
    with open(path, "ab") as crashed:
        crashed.write(b'{"type":"message","id":"torn"')  # a process killed mid-append
    fsync_directory = jsonl._fsync_directory

    def rename_done_then_they_append(directory: Path) -> None:
        monkeypatch.setattr(jsonl, "_fsync_directory", fsync_directory)
        JsonlSessionRepo(tmp_path).open(session.id).append_message(user("b"))  # another process
        fsync_directory(directory)

    monkeypatch.setattr(jsonl, "_fsync_directory", rename_done_then_they_append)
    ours = JsonlSessionRepo(tmp_path).open(session.id)  # cuts the torn line
    ours.append_message(user("c"))
    texts = [narrow(m, UserMessage).text for m in ours.build_context().messages]
    assert texts == ["a", "b", "c"]
    parents = [entry.parent_id for entry in JsonlSessionRepo(tmp_path).open(ours.id).get_entries()]
    assert len(parents) == len(set(parents))  # no fork


def test_a_read_while_the_file_is_taken_up_again_sees_a_whole_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session taken up again in place (another process wrote) was indexed anew into the
    index readers use, without a lock: a run's context or a page read on another thread
    meanwhile held only the entries indexed so far, or none."""
    repo = JsonlSessionRepo(tmp_path)
    held = repo.create()
    for text in "abc":
        held.append_message(user(text))
    JsonlSessionRepo(tmp_path).open(held.id).append_message(user("d"))  # another process
    seen: list[int] = []
    index = InMemorySessionStorage._index

    def index_and_read(self: InMemorySessionStorage, entry: SessionEntry) -> None:
        index(self, entry)
        seen.append(len(held.build_context().messages))  # another thread's read, meanwhile

    monkeypatch.setattr(InMemorySessionStorage, "_index", index_and_read)
    assert repo.open(held.id).storage is held.storage  # taken up in place
    monkeypatch.undo()
    assert seen and min(seen) == 3
    assert len(held.build_context().messages) == 4


def test_a_delete_waits_for_a_rewrite_under_way_rather_than_have_it_put_the_file_back(
    tmp_path: Path,
) -> None:
    """Another process cutting a torn line (or migrating an old file) holds the file's lock
    while it writes the new one, then renames it into place: a delete in between, which took
    no lock, was said done, and the rename put the session back."""
    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(user("a"))
    path = repo.path_for(session.id)
    rewritten = path.with_suffix(".new")
    shutil.copy(path, rewritten)
    with open(path, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # the other process's rewrite, under way
        deleting = threading.Thread(target=repo.delete, args=[session.id])
        deleting.start()
        deleting.join(timeout=0.3)
        os.replace(rewritten, path)
        fcntl.flock(other, fcntl.LOCK_UN)
    deleting.join(timeout=30)
    assert not path.exists()
    assert not JsonlSessionRepo(tmp_path).exists(session.id)


def test_a_move_to_where_the_leaf_was_after_another_process_moved_it_is_written(
    tmp_path: Path,
) -> None:
    """A held session (a run's) moving the leaf back to where it last saw it, after another
    process had moved it on, wrote nothing: the move was lost."""
    repo = JsonlSessionRepo(tmp_path)
    held = repo.create()
    a = held.append_message(user("a"))
    b = held.append_message(user("b"))
    theirs = JsonlSessionRepo(tmp_path).open(held.id)  # another process
    theirs.move_to(a)
    held.move_to(b)
    assert JsonlSessionRepo(tmp_path).open(held.id).leaf_id == b


def test_a_listing_finds_the_newest_message_past_long_lines_and_a_torn_one(
    tmp_path: Path,
) -> None:
    """The order's time is the newest message of the user or the assistant: past tool output
    of megabytes, entries that are no message, and a torn last line."""
    from mcp_agent.messages import TextContent, ToolResultMessage, UserContent

    repo = JsonlSessionRepo(tmp_path)
    session = repo.create()
    session.append_message(UserMessage(content="question", timestamp=5_000))
    output: list[UserContent] = [TextContent(text="x" * 3_000_000)]
    result = ToolResultMessage(tool_call_id="c", tool_name="t", content=output, timestamp=9_000)
    session.append_message(result)
    session.set_name("named later")
    with repo.path_for(session.id).open("a") as handle:
        handle.write('{"type":"message","message":{"role":"user","content":"cut')
    fresh = JsonlSessionRepo(tmp_path)
    assert fresh.list().items[0].modified == "1970-01-01T00:00:05.000000Z"


def _activity_lines(data: int) -> list[dict[str, object]]:
    return [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00Z"},
        {"type": "message", "id": "a", "timestamp": "2026-01-02T00:00:00Z",
         "message": {"role": "user", "content": "q", "timestamp": 7_000}},
        {"type": "custom", "id": "b", "customType": "x", "data": "y" * data},
        {"type": "message", "id": "c", "message": {"role": "toolResult", "content": []}},
        {"type": "message", "id": "d", "timestamp": "2026-01-03T00:00:00Z",
         "message": {"role": "assistant", "content": [], "timestamp": 5_000}},
        {"type": "message", "id": "e", "timestamp": "1970-01-01T00:00:06Z",
         "message": {"role": "user", "content": "no time of its own"}},
    ]  # fmt: skip


def test_the_newest_message_is_found_in_every_kind_of_file(tmp_path: Path) -> None:
    from mcp_agent.sessions.activity import last_activity

    lines = _activity_lines(2_000)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert last_activity(path, "changed")[0] == "1970-01-01T00:00:07.000000Z"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[:1] + lines[3:]))
    assert last_activity(path, "changed")[0] == "1970-01-01T00:00:06.000000Z"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[:1] + lines[2:4]))
    assert last_activity(path, "changed")[0] == "2026-01-01T00:00:00.000000Z"
    path.write_text(json.dumps(lines[0]))  # a header alone, no newline
    assert last_activity(path, "changed")[0] == "2026-01-01T00:00:00.000000Z"
    path.write_text("")
    assert last_activity(path, "changed")[0] == "changed"


def test_a_file_read_on_as_it_grows_gives_what_one_reading_of_it_gives(tmp_path: Path) -> None:
    """Read at every length it passes through (a line torn anywhere), then read on from there
    once whole: the answer of one reading of the whole file. A file written anew (another
    file in its place) is read from its start."""
    from mcp_agent.sessions.activity import last_activity

    text = "".join(json.dumps(line) + "\n" for line in _activity_lines(20))
    path = tmp_path / "s.jsonl"
    path.write_text(text)
    whole = last_activity(path, "changed")
    assert whole[1].scanned == len(text)
    for cut in range(len(text)):
        path.write_text(text[:cut])
        _, part = last_activity(path, "changed")
        with path.open("a") as handle:
            handle.write(text[cut:])
        assert last_activity(path, "changed", part) == whole, cut
    _, read = last_activity(path, "changed")
    other = tmp_path / "other.jsonl"
    other.write_text(text.replace("7000", "8000") + text[text.index("\n") + 1 :])
    other.replace(path)
    assert last_activity(path, "changed", read)[0] == "1970-01-01T00:00:08.000000Z"


def test_a_fork_reads_when_its_parent_is_damaged(tmp_path: Path) -> None:
    """Whether a fork is a sub-agent's session made before headers said so is read from its
    parent's links; a damaged parent says nothing, and the fork still reads (it failed with
    the parent's error: `sessions show FORK` and session_get of it)."""
    from mcp_agent.sessions.repo import linked_origin

    repo = JsonlSessionRepo(tmp_path)
    parent = repo.create()
    first = parent.append_message(user("a"))
    parent.append_message(user("b"))
    fork = repo.fork(parent.id, first, "at")
    path = repo.path_for(parent.id)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([lines[0], "{not json\n", *lines[1:]]))
    fresh = JsonlSessionRepo(tmp_path)
    with pytest.raises(SessionError):
        fresh.open_read(parent.id)
    assert linked_origin(fresh, fresh.open_read(fork.id).header) is None


def test_a_file_read_at_length_holds_up_no_other_open_or_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search read every file under the repo's one lock (186 MB: 23 s), and an open read
    its whole file under it too: every other client's open, append and listing waited that
    long. Files are now read outside it; here the reads of one search and of one open are held
    until the others are done."""
    from mcp_agent.sessions import jsonl

    repo = JsonlSessionRepo(tmp_path / "sessions")
    held_one = repo.create(name="big")
    held_one.append_message(user("a long session"))
    other = repo.create(name="other")
    other.append_message(user("hello"))
    repo.close()
    repo = JsonlSessionRepo(tmp_path / "sessions")
    release, reading = threading.Event(), threading.Event()
    big_path = repo.path_for(held_one.id)

    def held(read: Callable[[Path], T]) -> Callable[[Path], T]:
        def slow(path: Path) -> T:
            if path == big_path:
                reading.set()
                release.wait(60)
            return read(path)

        return slow

    monkeypatch.setattr(jsonl, "read_session_file", held(jsonl.read_session_file))
    monkeypatch.setattr(jsonl, "load_session_file", held(jsonl.load_session_file))
    for slow_call in (lambda: repo.list(query="nothing"), lambda: repo.open(held_one.id)):
        release.clear()
        reading.clear()
        slow = threading.Thread(target=slow_call)
        slow.start()
        assert reading.wait(60), "the held file was never read"
        done = threading.Event()

        def others(done: threading.Event) -> None:
            repo.open(other.id).append_message(user("meanwhile"))
            assert repo.summary(other.id).message_count >= 2
            done.set()

        meanwhile = threading.Thread(target=others, args=(done,))
        meanwhile.start()
        finished_first = done.wait(30)
        release.set()
        slow.join()
        meanwhile.join()
        assert finished_first, "another session's open waited for the held file's read"
    repo.close()


def test_a_listing_with_a_query_reads_each_file_it_shows_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing with a query read each file to find the sessions that match, then read each
    one it showed again for its first hits: twice the reading, and every listing again once
    the folder's sessions passed what a repo keeps open (40 of 2.6 MB: 26 to 45 s a page).
    The first hits are found as the listing reads the file, and taken while it is unchanged."""
    repo = JsonlSessionRepo(tmp_path, layout="flat")
    made = []
    for i in range(4):
        session = repo.create(name=f"notes {i}")
        session.append_message(UserMessage(content=f"apple {i} water", timestamp=1))
        session.append_message(UserMessage(content="apple again", timestamp=1))
        made.append(session.id)
    reads: list[Path] = []
    real = jsonl.load_session_file

    def load(path: Path) -> tuple[object, tuple[int, int], bool]:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(jsonl, "load_session_file", load)
    for _ in range(2):
        fresh = JsonlSessionRepo(tmp_path, layout="flat")
        page = fresh.list(query="apple water")
        assert sorted(item.id for item in page.items) == sorted(made)
        found = listed_hits(fresh, [item.id for item in page.items], "apple water")
        assert reads == []
        for session_id in made:
            assert found[session_id] == repo.search_session(session_id, "apple water", 3)
    # A file changed since it was listed: its hits are found in it as it is now.
    repo.open(made[0]).append_message(UserMessage(content="water apple", timestamp=1))
    found = listed_hits(fresh, made, "apple water")
    assert found[made[0]].total == 3 and found[made[0]] == repo.search_session(
        made[0], "apple water", 3
    )


def test_the_hits_a_listing_keeps_are_bounded_by_their_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing keeps the first hits it found, each hit's entry whole: one may be a tool's
    output of megabytes, so what it keeps is bounded by their text as well as by their count;
    a page past the bound is found again from the file, the same."""
    monkeypatch.setattr(jsonl, "KEPT_HIT_CHARS", 2_000)
    repo = JsonlSessionRepo(tmp_path, layout="flat")
    made = []
    for i in range(6):
        session = repo.create(name=f"notes {i}")
        session.append_message(UserMessage(content=f"apple {i} " + "x" * 600, timestamp=1))
        made.append(session.id)
    big = repo.create(name="big")
    big.append_message(UserMessage(content="apple " + "y" * 5_000, timestamp=1))
    page = repo.list(query="apple")
    assert len(page.items) == 7
    assert 0 < repo._hit_chars <= 2_000
    assert repo._hit_chars == sum(chars for _, chars in repo._hits.values())
    found = listed_hits(repo, [*made, big.id], "apple")
    for session_id in [*made, big.id]:
        assert found[session_id] == repo.search_session(session_id, "apple", 3)


def test_reading_a_file_logs_what_the_reading_skipped_not_the_parses_notes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The lines' reader and the parse share one list of notes (a file holding only a torn
    line is said by it); the reader logs only its own, the torn last line not at all (it is
    said where the file is loaded): an orphan's note was logged on every read in its place."""
    sid = "0199aaaa-0000-7000-8000-0000000000b2"
    path = tmp_path / f"2026-01-15T08-30-00-000Z_{sid}.jsonl"
    header = {"type": "session", "version": 3, "id": sid, "cwd": "/p"}
    header["timestamp"] = "2026-01-15T08:30:00.000Z"

    def entry(entry_id: str, parent: str | None) -> str:
        message = {"role": "user", "content": "hi", "timestamp": 1}
        return json.dumps(
            {"type": "message", "id": entry_id, "parentId": parent, "message": message}
            | {"timestamp": "2026-01-15T08:30:01.000Z"}
        )

    lines = [json.dumps(header), entry("a0000001", None), entry("o0000002", "gone0000")]
    caplog.set_level("INFO", logger=jsonl.__name__)
    for torn in (entry("t0000003", "a0000001")[:40], ""):
        caplog.clear()
        path.write_text("\n".join(lines) + "\n" + torn)
        parsed, was_torn = jsonl.read_session_file(path)
        assert was_torn == bool(torn) and len(parsed.entries) == 2
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert warned == [], warned
