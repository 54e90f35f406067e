"""``create_described``: a new session and its listing row, as ``summary`` reads it after the
creation (session_create answers it). The SQL stores read the row in the creation's own
transaction; every field must be the one a read after the commit gives."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_agent.messages import UserMessage
from mcp_agent.sessions.jsonl import JsonlSessionRepo
from mcp_agent.sessions.repo import InMemorySessionRepo, SessionRepo
from mcp_agent.sessions.sqlite import SqliteSessionRepo

ARGUMENTS: list[dict[str, Any]] = [
    {},
    {"name": "a name"},
    {"name": '  spaced é 名前 "quoted"  ', "cwd": "/some/where"},
    {"cwd": "/x", "metadata": {"k": 1, "nested": {"a": [1, 2]}}},
    {"name": "sub", "metadata": {"startedBy": {"sessionId": "parent", "runId": "r1"}}},
]


def _all_fields(summary: Any) -> dict[str, Any]:
    # incarnation is left out of the dataclass's equality: compared here too.
    return {**dataclasses.asdict(summary), "incarnation": summary.incarnation}


def _check(repo: SessionRepo) -> None:
    for arguments in ARGUMENTS:
        session, described = repo.create_described(**arguments)
        read = repo.summary(session.id)
        assert _all_fields(described) == _all_fields(read), arguments
        assert json.dumps(_all_fields(described)) == json.dumps(_all_fields(read))
        # The session handed back is the one stored: an append through it is read back.
        entry_id = session.append_message(UserMessage(content="hello"))
        assert repo.open(session.id).get_entry(entry_id) is not None
        assert repo.summary(session.id).entry_count == read.entry_count + 1


@pytest.fixture
def sqlite_repo(tmp_path: Path) -> Iterator[SqliteSessionRepo]:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    yield repo
    repo.close()


def test_sqlite_create_described_is_the_row_read_after(sqlite_repo: SqliteSessionRepo) -> None:
    _check(sqlite_repo)


def test_other_stores_create_described_is_the_row_read_after(tmp_path: Path) -> None:
    _check(InMemorySessionRepo())
    _check(JsonlSessionRepo(tmp_path / "folder"))


def test_postgres_create_described_is_the_row_read_after(postgres_url: str) -> None:
    from mcp_agent.sessions.postgres import PostgresSessionRepo

    with PostgresSessionRepo(postgres_url) as repo:
        _check(repo)
