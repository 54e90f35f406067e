"""pi parity of entry times: entries without one, times that do not read, times without an
offset; pi's own reading (tests/data/pi/oracle.mjs) against ours in every store."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sessions_pi import DATA, PI, depth_first_tree, needs_pi, run_pi

from mcp_agent.messages import convert_to_llm
from mcp_agent.sessions import (
    InMemorySessionRepo,
    JsonlSessionRepo,
    Session,
    SessionRepo,
    SqliteSessionRepo,
)
from mcp_agent.sessions.entries import iso_to_ms, sortable_time

SESSION_ID = "0199aaaa-0000-7000-8000-0000000000a1"


def odd_times_file(folder: Path, stamp: Any, drop: bool = False, drop_header: bool = False) -> Path:
    """A session file whose entries after the first have ``stamp`` for their time (none with
    ``drop``; ``drop_header``: nor its header): a compaction, a branch summary, a custom
    message, a label and a message."""
    header = {"type": "session", "version": 3, "id": SESSION_ID, "cwd": "/p"}
    header["timestamp"] = "2026-01-15T08:30:00.000Z"
    first = {"role": "user", "content": "hi", "timestamp": 1}
    rows: list[dict[str, Any]] = [
        header,
        {"type": "message", "id": "u0000001", "parentId": None, "message": first},
        {"type": "message", "id": "u0000003", "parentId": "u0000001"},  # a sibling, by time
        {"type": "compaction", "id": "c0000001", "parentId": "u0000001", "summary": "S"},
        {"type": "branch_summary", "id": "b0000001", "parentId": "c0000001", "summary": "B"},
        {"type": "custom_message", "id": "m0000001", "parentId": "b0000001", "content": "cm"},
        {"type": "label", "id": "l0000001", "parentId": "m0000001", "targetId": "u0000001"},
        {"type": "message", "id": "u0000002", "parentId": "l0000001"},
    ]
    rows[1]["timestamp"] = "2026-01-15T08:30:01.000Z"
    rows[2]["message"] = {"role": "user", "content": "other", "timestamp": 3}
    rows[2]["timestamp"] = "2026-01-15T08:30:01.500Z"
    rows[3].update(firstKeptEntryId="u0000001", tokensBefore=9)
    rows[4]["fromId"] = "u0000001"
    rows[5].update(customType="x", display=True)
    rows[6]["label"] = "L"
    rows[7]["message"] = {"role": "user", "content": "again", "timestamp": 2}
    if not drop:
        for row in rows[3:]:
            row["timestamp"] = stamp
    elif drop_header:
        del header["timestamp"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{SESSION_ID}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def readings(path: Path, tmp_path: Path) -> Iterator[tuple[str, SessionRepo, Session]]:
    """``path`` as each store reads it: imported in memory, imported into SQLite and opened
    again, and as a folder store's file (``--sessions-dir``)."""
    memory = InMemorySessionRepo()
    yield "memory", memory, memory.import_session(path).session
    with SqliteSessionRepo(tmp_path / "s.db") as database:
        database.import_session(path)
    with SqliteSessionRepo(tmp_path / "s.db") as database:
        yield "sqlite", database, database.open(SESSION_ID)
    with JsonlSessionRepo(path.parent) as folder:
        yield "folder", folder, folder.open(SESSION_ID)


def context_of(session: Session) -> dict[str, Any]:
    ours = session.build_context().to_json_dict()
    ours.pop("activeToolNames", None)
    return ours


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize("stamp", ["missing", "yesterday", ""])
def test_entries_without_a_time_read_and_export_as_pi_reads_them(
    stamp: str, tmp_path: Path
) -> None:
    """pi reads an entry its file gives no ``timestamp`` as it is; every store refused the
    whole file ('timestamp: Field required'). Each now reads it as pi does (its entries, its
    tree, pi's context) and writes it back without a time: pi reads our export as the file.
    A summary's or custom message's time that does not read (none, or text that is no time)
    is NaN to pi, null in its context and its messages for the model, where ours said 0."""
    drop = stamp == "missing"
    path = odd_times_file(tmp_path / "sessions", stamp, drop=drop, drop_header=drop)
    theirs = run_pi(path)
    expected = theirs["results"][0]["context"]
    assert [m["timestamp"] for m in expected["messages"]] == [None, 1, None, None, 2]
    for kind, repo, session in readings(path, tmp_path):
        assert [e.to_json_dict() for e in session.get_entries()] == theirs["entries"], kind
        assert session.leaf_id == theirs["manager"]["leafId"], kind
        assert depth_first_tree(session.tree()) == theirs["manager"]["tree"], kind
        context = session.build_context()
        assert context_of(session) == expected, kind
        llm = [m.to_json_dict() for m in convert_to_llm(context.messages)]
        assert llm == theirs["results"][0]["llmMessages"], kind
        exported = tmp_path / f"{kind}.jsonl"
        exported.write_text(repo.export_jsonl(session.id))
        assert run_pi(exported)["entries"] == theirs["entries"], kind
        header = json.loads(exported.read_text().splitlines()[0])
        assert ("timestamp" in header) is not drop, kind  # as the file's header, pi's too
        assert [row.id for row in repo.list().items] == [SESSION_ID], kind


@pytest.fixture
def new_york() -> Iterator[str]:
    """This process in New York's zone (pi's Node started in it too): a zone not UTC."""
    zone = "America/New_York"
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield zone
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@needs_pi
@pytest.mark.node
@pytest.mark.parametrize("stamp", ["2026-01-15T05:30:02.000", "2026-01-15 05:30:02"])
def test_a_time_without_an_offset_is_read_in_the_machines_zone_as_pi_reads_it(
    stamp: str, new_york: str, tmp_path: Path
) -> None:
    """pi reads a date and time without an offset (``new Date``) in the machine's zone; ours
    read it in UTC: a summary's time in the context was hours off pi's, and an entry stood
    elsewhere among its siblings than in pi's /tree (here before its sibling of 08:30 UTC,
    where pi, in New York, puts it after)."""
    assert PI is not None
    path = odd_times_file(tmp_path / "sessions", stamp)
    node, peers = PI
    done = subprocess.run(
        [node, str(DATA / "oracle.mjs"), str(peers), str(path)],
        env={**os.environ, "TZ": new_york},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = json.loads(done.stdout)
    expected = theirs["results"][0]["context"]
    assert expected["messages"][0]["timestamp"] == 1768473002000  # 10:30:02 UTC
    assert theirs["manager"]["tree"][0]["children"] == ["u0000003", "c0000001"]
    for kind, _repo, session in readings(path, tmp_path):
        assert context_of(session) == expected, kind
        assert depth_first_tree(session.tree()) == theirs["manager"]["tree"], kind


@pytest.mark.parametrize("stamp", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"])
def test_a_time_with_an_offset_past_the_years_python_holds_is_read(
    stamp: str, tmp_path: Path
) -> None:
    """A time with an offset whose UTC falls out of Python's years (pi's Date reads it) made
    an import, the SQLite store and a folder store's listing die ('date value out of range'),
    the whole file refused with a traceback; it is now read, its time kept as written."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    header = {"type": "session", "version": 3, "id": SESSION_ID, "cwd": "/p", "timestamp": stamp}
    message = {"role": "user", "content": "hi", "timestamp": 1}
    entry = {"type": "message", "id": "u0000001", "parentId": None, "message": message}
    entry["timestamp"] = stamp
    path = folder / f"{SESSION_ID}.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(entry) + "\n")
    for kind, repo, session in readings(path, tmp_path):
        assert session.header.timestamp == stamp, kind
        assert [e.timestamp for e in session.get_entries()] == [stamp], kind
        (row,) = repo.list().items
        assert (row.id, row.created) == (SESSION_ID, stamp), kind
        assert json.loads(repo.export_jsonl(SESSION_ID).splitlines()[0]) == header, kind


def test_a_time_before_the_year_1000_is_given_in_pis_form_and_sorts_first(
    tmp_path: Path,
) -> None:
    """A session created in the year 999 (pi reads it) was listed as created
    '999-01-01T00:00:00.000000Z' (strftime's %Y unpadded): not pi's form, and sorted as text
    after every later year. It is now '0999-01-01T00:00:00.000Z', before them."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    stamp = "0999-01-01T00:00:00Z"
    header = {"type": "session", "version": 3, "id": SESSION_ID, "cwd": "/p", "timestamp": stamp}
    path = folder / f"{SESSION_ID}.jsonl"
    path.write_text(json.dumps(header) + "\n")
    for kind, repo, _session in readings(path, tmp_path):
        (row,) = repo.list().items
        assert row.to_json_dict()["created"] == "0999-01-01T00:00:00.000Z", kind
    assert sortable_time(stamp) < sortable_time("2026-01-15T08:30:00Z")


@pytest.mark.parametrize(
    ("stamp", "utc"),
    [
        ("2026-03-08T02:30:00", "2026-03-08T07:30:00.000Z"),  # skipped: before it, EST
        ("2026-11-01T01:30:00", "2026-11-01T05:30:00.000Z"),  # twice: the first, EDT
        ("2026-07-01T12:00:00", "2026-07-01T16:00:00.000Z"),
    ],
)
def test_a_local_time_the_clocks_skipped_or_repeated_is_read_as_javascript_does(
    stamp: str, utc: str, new_york: str
) -> None:
    """A time without an offset in the hour New York's clocks skip (02:30 on 8 March) was
    read with the offset after the change, an hour before the moment pi's ``new Date`` gives
    (ECMAScript takes the offset before it): a summary's time and an entry's place among its
    siblings were off pi's. In the hour they repeat, both take the first."""
    ms = iso_to_ms(stamp)
    assert ms == iso_to_ms(utc)
    assert sortable_time(stamp) == sortable_time(utc)
