"""The watch of a SQLite session file for other processes' writes (sessions.sqlite.watch): two
repos on one file stand for two processes (each has connections of its own, as a process
does); the watched repo's own writes are not reported, the other's are."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_agent.messages import UserMessage
from mcp_agent.sessions import SqliteSessionRepo
from mcp_agent.sessions.sqlite.database import OwnWrites
from mcp_agent.sessions.sqlite.watch import DatabaseWatch, ForeignChanges


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


@pytest.fixture(name="repos")
def repos_fixture(tmp_path: Path) -> Iterator[tuple[SqliteSessionRepo, SqliteSessionRepo]]:
    mine, other = SqliteSessionRepo(tmp_path / "s.db"), SqliteSessionRepo(tmp_path / "s.db")
    yield mine, other
    mine.close()
    other.close()


@pytest.fixture(name="watch")
def watch_fixture(repos: tuple[SqliteSessionRepo, SqliteSessionRepo]) -> Iterator[DatabaseWatch]:
    watch = DatabaseWatch(repos[0].database, page=3)
    watch.rebase()
    yield watch
    watch.close()


def test_nothing_committed_is_nothing_found(watch: DatabaseWatch) -> None:
    assert watch.look() is None


def test_another_process_append_and_creation_are_found(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    _, other = repos
    made = other.create()
    found = watch.look()
    assert found is not None and found.sessions == [made.id] and found.list_changed
    made.append_message(user("hi"))
    found = watch.look()
    # An append changes the session, not the list: as this server's own appends notify.
    assert found is not None and found.sessions == [made.id] and not found.list_changed
    assert watch.look() is None


def test_a_rename_by_another_process_changes_the_list(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    """A session's name is what resources/list shows: another process's rename is a list
    change, as this server's own is; its other appends are not, nor is a name of its own."""
    mine, other = repos
    made = mine.create()
    other.open(made.id).set_name("named there")
    found = watch.look()
    assert found is not None and found.sessions == [made.id] and found.list_changed
    other.open(made.id).append_message(user("and then"))
    found = watch.look()
    assert found is not None and found.sessions == [made.id] and not found.list_changed
    mine.open(made.id).set_name("named here")
    assert watch.look() is None


def test_own_writes_are_left_out(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    mine, other = repos
    own = mine.create()
    own.append_message(user("mine"))
    mine.open(own.id).set_name("renamed here")
    assert watch.look() is None
    # Another process's write after ours is news, though ours to the same session was not.
    other.open(own.id).append_message(user("theirs"))
    found = watch.look()
    assert found is not None and found.sessions == [own.id]
    mine.delete(own.id)
    assert watch.look(watched=[own.id]) is None


def test_a_deletion_by_another_process_tells_its_watchers_once(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    mine, other = repos
    kept, doomed = mine.create(), mine.create()
    assert watch.look() is None
    other.delete(doomed.id)
    found = watch.look(watched=[kept.id, doomed.id])
    assert found is not None and found.sessions == [doomed.id] and found.list_changed
    other.create()
    found = watch.look(watched=[kept.id, doomed.id])
    assert found is not None and doomed.id not in found.sessions


def test_more_changes_than_a_page_are_one_list_change_and_the_watched_ones(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    mine, other = repos
    sessions = [mine.create() for _ in range(5)]
    assert watch.look() is None
    for session in sessions:
        other.open(session.id).append_message(user("bulk"))
    found = watch.look(watched=[sessions[1].id])
    assert found is not None and found.list_changed and found.sessions == [sessions[1].id]
    assert watch.look() is None


def test_a_commit_seen_stays_due_until_a_look_reads_it(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    """The follower asks ``committed`` first (one pragma), then gathers the watched sessions
    and looks: the look must still read what the pragma saw."""
    _, other = repos
    assert not watch.committed()
    made = other.create()
    assert watch.committed() and watch.committed()
    found = watch.look()
    assert found is not None and found.sessions == [made.id]
    assert not watch.committed()


def test_a_session_made_here_and_deleted_elsewhere_before_a_look_is_told(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo], watch: DatabaseWatch
) -> None:
    """Made here, deleted by another process, and no look between: the counts of creations
    and deletions cancelled out and nothing was told (the clean-clone CI's deletion test met
    it); a deletion here of one made here is still no news, and a creation elsewhere is."""
    mine, other = repos
    kept = mine.create()
    doomed = mine.create()
    other.delete(doomed.id)
    found = watch.look(watched=[kept.id, doomed.id])
    assert found is not None and found.list_changed and found.sessions == [doomed.id]
    assert watch.look(watched=[kept.id, doomed.id]) is None
    mine.delete(mine.create().id)
    assert watch.look(watched=[kept.id]) is None
    made_there = other.create()
    mine.delete(mine.create().id)
    found = watch.look(watched=[kept.id])
    assert found is not None and found.list_changed and made_there.id in found.sessions
    gone_old = mine.create()
    assert watch.look() is None
    ours_new = mine.create()
    other.delete(gone_old.id)
    mine.delete(ours_new.id)
    found = watch.look(watched=[gone_old.id])
    assert found is not None and found.list_changed and found.sessions == [gone_old.id]


def test_a_look_while_a_write_here_is_under_way_finds_no_change_of_it(
    repos: tuple[SqliteSessionRepo, SqliteSessionRepo],
    watch: DatabaseWatch,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A look made while this process's creation (or append) was written and not yet
    committed took the session, recorded and not in the file, for one deleted by another
    process (a list change), and at the next look, the row there, for one another created (a
    list change again; the server's 2025 subscriber heard a list change before the update of
    its own append, in CI-like load); an append's stamp recorded before its commit made the
    stamp committed before it pass for another's. Own writes are news only once committed."""
    mine, other = repos
    kept = mine.create()
    seen: list[object] = []
    wrote = OwnWrites.wrote

    def look_meanwhile(
        own: OwnWrites, session_id: str, modified: str | None, created: bool = False
    ) -> None:
        wrote(own, session_id, modified, created)
        if not seen:  # inside the writer's transaction: recorded, not committed
            seen.append(watch.look(watched=[kept.id]))

    other.open(kept.id).append_message(user("theirs"))  # a look is due
    monkeypatch.setattr(OwnWrites, "wrote", look_meanwhile)
    made = mine.create()
    assert seen == [None] or (
        isinstance(seen[0], ForeignChanges)
        and seen[0].sessions == [kept.id]
        and not seen[0].list_changed
    ), seen
    assert watch.look(watched=[kept.id, made.id]) is None
    mine.open(kept.id).append_message(user("mine"))  # committed, not looked at yet
    seen.clear()
    mine.open(kept.id).append_message(user("mine again"))  # looked at while written
    assert seen == [None], seen
    assert watch.look(watched=[kept.id, made.id]) is None
