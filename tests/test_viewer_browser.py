"""The session viewer in a real browser: Debian's Chromium driven by Playwright (nothing is
downloaded: the browser is the system's). The page of a real ``serve --transport http``
process, signed in with the one-time token link; and the MCP App inside a minimal host that
speaks the MCP Apps protocol over postMessage and forwards the view's tool calls to the same
server. The screenshots in the README are taken here (``docs/`` with MCP_AGENT_SCREENSHOTS=1)."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import (  # browser_fixture: the browser fixture
    NEEDS_BROWSER,
    Browser,
    Page,
    base,
    browser_fixture,  # noqa: F401
    expect,
    pause_clock,
)
from mcp_support import Served, poll
from viewer_support import (
    SESSION_NUMBERS,
    chain_session,
    delete_every_session,
    entry_read_limits,
    mcp_request,
    mcp_tool,
    picnic_db,
)

from mcp_agent.messages import UserMessage as User
from mcp_agent.sessions import SqliteSessionRepo

ROOT = Path(__file__).resolve().parent.parent
# The README's screenshots are taken here: into docs/ with MCP_AGENT_SCREENSHOTS=1, else into a
# scratch folder (a test run leaves the checkout as it was).
SHOTS = (
    ROOT / "docs"
    if os.environ.get("MCP_AGENT_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="viewer-shots-"))
)
PEERS = Path(os.environ.get("MCP_AGENT_PEERS", ROOT / ".ci" / "node"))
# The MCP Apps spec as JSON Schema, shipped in the ext-apps package (.ci/peers installs it).
APPS_SCHEMA = PEERS / "node_modules/@modelcontextprotocol/ext-apps/dist/src/generated/schema.json"


pytestmark = NEEDS_BROWSER

TOKEN = "viewer-test-token-0123456789abcdef"


def token_server(tmp: Path) -> Served:
    """A server on ``tmp/http.db`` that takes TOKEN, its model scripted:echo."""
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    return Served(tmp, "--token-file", str(token_file), "--model", "scripted:echo")


@pytest.fixture(name="shared", scope="module")
def shared_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    """One server for the module's tests that leave it running (a start is seconds of a
    loaded machine); ``served`` empties its database before each of them."""
    tmp = tmp_path_factory.mktemp("viewer")
    with token_server(tmp) as server:
        yield server, tmp / "http.db"


@pytest.fixture(name="served")
def served_fixture(
    browser: Browser, shared: tuple[Served, Path]
) -> Iterator[tuple[Served, str, dict[str, str]]]:
    """The module's server, its database holding the picnic session alone (as if new)."""
    server, db = shared
    assert server.process.poll() is None, "a test stopped the shared server"
    delete_every_session(server.url, db, TOKEN)
    session_id, ids = picnic_db(db)
    try:
        yield server, session_id, ids
    finally:
        for context in browser.contexts:  # a test that failed left its pages listening
            context.close()


@pytest.fixture(name="open_shared", scope="module")
def open_shared_fixture(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Served, Path]]:
    """One server without auth for the module's tests of long sessions."""
    tmp = tmp_path_factory.mktemp("viewer-open")
    with Served(tmp, "--no-auth") as server:
        yield server, tmp / "http.db"


@pytest.fixture(name="open_served")
def open_served_fixture(
    browser: Browser, open_shared: tuple[Served, Path]
) -> Iterator[tuple[Served, Path]]:
    """The module's server without auth, its database empty (as if new)."""
    server, db = open_shared
    assert server.process.poll() is None, "a test stopped the shared server"
    delete_every_session(server.url, db, token="")
    try:
        yield server, db
    finally:
        for context in browser.contexts:
            context.close()


@pytest.fixture(name="own_served")
def own_served_fixture(tmp_path: Path) -> Iterator[tuple[Served, str, dict[str, str]]]:
    """A server of the test's own, for a test that stops it."""
    session_id, ids = picnic_db(tmp_path / "http.db")
    server = token_server(tmp_path)
    try:
        yield server, session_id, ids
    finally:
        server.stop()


def leaf_of(server: Served, session_id: str) -> str:
    got = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id, limit=1)
    return str(got["structuredContent"]["leafId"])


def screenshot(page: Page, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    expect(page.locator("#toast")).to_be_hidden(timeout=10_000)
    page.screenshot(path=str(SHOTS / name))
    assert (SHOTS / name).read_bytes().startswith(b"\x89PNG")


def test_the_page_needs_the_token(browser: Browser, served: tuple[Served, str, Any]) -> None:
    server, _, _ = served
    context = browser.new_context()
    page = context.new_page()
    answer = page.goto(base(server) + "/")
    assert answer is not None and answer.status == 200  # the page alone holds no data
    expect(page.get_by_role("heading", level=1)).to_have_text("Not signed in")
    expect(page.locator("#tree")).to_contain_text("open the link with #token=")
    expect(page.locator("#sessions")).not_to_contain_text("Picnic plans")
    page.goto(base(server) + "/#token=not-the-token")  # pasted into the tab
    expect(page.get_by_role("heading", level=1)).to_have_text("Signed out")
    expect(page.locator("#tree")).to_contain_text("mcp-agent-sessions serve printed")
    assert page.evaluate("localStorage.length") == 0  # a token refused is not kept
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("Not signed in")
    assert context.cookies() == []
    # /mcp itself: no token, no answer
    refused = mcp_request(server.url, "tools/call", {"name": "session_list", "arguments": {}})
    assert refused.status_code == 401
    # The link pasted: the list, and no "Not signed in" over it.
    page.goto(f"{base(server)}/#token={TOKEN}")
    expect(page.locator("#sessions")).to_contain_text("Picnic plans")
    expect(page.get_by_role("heading", level=1)).to_have_text("No session open")
    context.close()


def test_a_page_refused_stops_asking_until_it_is_signed_in(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A page without a valid token asked for the list and listened again every 1.5 s for
    good, saying only "not signed in" in the list: refused (401), it says what to do and asks
    nothing more until a token comes, here from another tab signed in with the link."""
    server, session_id, _ = served
    context = browser.new_context()
    page = context.new_page()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.clock.install()
    page.goto(f"{base(server)}/#token=an-earlier-start-s-token&session={session_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Signed out")
    expect(page.locator("#tree")).to_contain_text(
        "Open the link with #token= that mcp-agent-sessions serve printed"
    )
    expect(page.locator("#live")).to_have_attribute("title", "not signed in")
    before = len(asked)
    page.clock.run_for(60_000)  # a minute of the page's timers: no retry
    page.evaluate("fetch('/index.html', {method: 'HEAD'})")  # a request, to know they arrive

    def seen() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return len(asked) > before

    poll(seen, "the page's own request was not seen")
    assert [url for url in asked[before:] if url.endswith("/mcp")] == []
    # Signed in in another tab: this one picks up the token and opens what it showed.
    other = context.new_page()
    other.goto(f"{base(server)}/#token={TOKEN}")
    expect(other.locator("#sessions")).to_contain_text("Picnic plans")
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    expect(page.locator("#live")).to_have_class("live on")
    context.close()


def test_a_tab_left_open_over_a_restart_keeps_the_new_token_of_another(
    browser: Browser, tmp_path: Path
) -> None:
    """The server restarted with a new token, whose link the reader opened in a new tab: the
    tab left open, refused with the old token, took the new one out of storage, so the new tab
    was signed out at its next load. It leaves it, and takes it itself."""
    session_id, _ = picnic_db(tmp_path / "http.db")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    server = Served(tmp_path, "--token-file", str(token_file))
    context = browser.new_context()
    try:
        old = context.new_page()
        old.clock.install()
        old.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
        expect(old.locator("#live")).to_have_class("live on")
        # its timers (the retries of its listening) wait until the new tab has its token
        pause_clock(old)
        server.stop()
        token_file.write_text(TOKEN + "-new")
        server = Served(tmp_path, "--token-file", str(token_file), port=server.port)
        new = context.new_page()
        new.goto(f"{base(server)}/#token={TOKEN}-new")
        expect(new.locator("#sessions")).to_contain_text("Picnic plans")
        old.clock.run_for(10_000)  # the old tab asks again, with the old token: refused
        expect(old.get_by_role("heading", level=1)).to_have_text("Picnic plans")
        expect(old.locator("#live")).to_have_class("live on")
        assert new.evaluate("localStorage.getItem('mcp-agent-sessions token')") == TOKEN + "-new"
        new.reload()
        expect(new.locator("#sessions")).to_contain_text("Picnic plans")
    finally:
        context.close()
        server.stop()


def test_the_token_link_signs_in_and_leaves_the_address_bar(
    browser: Browser, served: tuple[Served, str, Any]
) -> None:
    server, session_id, _ = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}")
    expect(page.locator("#sessions")).to_contain_text("Picnic plans")
    assert TOKEN not in page.url and page.url.rstrip("/#") == base(server)
    # live with the list alone, and said so (it said "not connected", to no screen reader)
    live = page.get_by_role("img", name="live: changes appear as they happen")
    expect(live).to_have_attribute("title", "live: changes appear as they happen")
    assert context.cookies() == []  # no cookie, which every port of the host would be sent
    # A session opened from the list is a step of the tab's history: Back goes to the page
    # as it was (each step replaced the last, so Back left the page).
    listed = page.locator("#sessions .session", has_text="Picnic plans")
    listed.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    assert page.url.endswith(f"/#session={session_id}")
    expect(listed).to_have_attribute("aria-selected", "true")  # said, not only coloured
    listens: list[list[str]] = []  # the sessions each stream listens for

    def listened(request: Any) -> None:
        if request.headers.get("mcp-method") == "subscriptions/listen":
            asked = request.post_data_json["params"]["notifications"]
            listens.append(asked.get("resourceSubscriptions", []))

    page.on("request", listened)
    page.go_back()
    expect(page.get_by_role("heading", level=1)).to_have_text("No session open")
    expect(listed).to_have_attribute("aria-selected", "false")
    expect(page.locator("#tree")).to_have_text("Pick a session from the list.")
    page.go_forward()
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    # one stream a step (each started one more before its own, signed in again for nothing)
    uri = f"session://{session_id}"

    def streamed() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return len(listens) >= 2 and listens[-1] == [uri]

    poll(streamed, "no stream for the session")
    assert listens == [[], [uri]], listens
    # Another tab of the same origin is signed in (the origin's own storage) ...
    again = context.new_page()
    again.goto(f"{base(server)}/#session={session_id}")
    expect(again.locator("#sessions")).to_contain_text("Picnic plans")
    # A link to another session pasted into the open tab is followed.
    other = mcp_tool(server.url, TOKEN, "session_create", name="Grocery list")
    again.evaluate(f"location.hash = '#session={other['structuredContent']['id']}'")
    expect(again.get_by_role("heading", level=1)).to_contain_text("Grocery list")
    # ... and the older link form goes to the fragment, with the session it names, in its
    # query or in its own fragment (which a redirect to /#token=… replaced: the list alone).
    older = context.new_page()
    older.goto(f"{base(server)}/?token={TOKEN}#session={other['structuredContent']['id']}")
    expect(older.get_by_role("heading", level=1)).to_have_text("Grocery list")
    older.goto(f"{base(server)}/?token={TOKEN}&session={session_id}")
    expect(older.locator("#sessions")).to_contain_text("Picnic plans")
    expect(older.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    assert TOKEN not in older.url and older.url.endswith(f"/#session={session_id}")
    # Its id is copied whole (a double click selected a part of it, between two hyphens).
    older.locator("#session-id").dblclick()
    assert older.evaluate("getSelection().toString()") == session_id
    context.close()


def test_back_forward_and_reload_keep_the_entry_the_reader_had_open(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """Back to a session, or a reload, showed the session with no entry open: the entry the
    reader had opened, and its place in the tree, were lost. The address names it too, so
    Back, Forward and a reload open it again, its row selected."""
    server, session_id, ids = served
    other = mcp_tool(server.url, TOKEN, "session_create", name="Grocery list")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}")
    page.locator("#sessions .session", has_text="Picnic plans").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    page.locator(f"#tree .row[data-id='{ids['call']}']").click()
    expect(page.locator("#detail-body")).to_contain_text("weather")
    page.locator("#sessions .session", has_text="Grocery list").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Grocery list")
    assert other["structuredContent"]["id"] in page.url

    def kept() -> None:
        expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
        expect(page.locator("#detail-body")).to_contain_text("weather")
        row = page.locator(f"#tree .row[data-id='{ids['call']}']")
        expect(row).to_have_attribute("aria-selected", "true")
        expect(row).to_be_in_viewport()

    page.go_back()
    kept()
    page.go_forward()
    expect(page.get_by_role("heading", level=1)).to_have_text("Grocery list")
    expect(page.locator("#detail")).to_be_hidden()
    page.go_back()
    kept()
    page.reload()
    kept()
    # a link to an entry the session does not hold: the session alone, the address without it
    page = context.new_page()
    held: list[Any] = []

    def hold(route: Any) -> None:
        arguments = (
            json.loads(route.request.post_data or "{}").get("params", {}).get("arguments", {})
        )
        if arguments.get("entry_id") == "nope0000":
            held.append(route)
        else:
            route.continue_()

    # its answer held until the session is drawn (as a loaded server may answer): the address
    # is cut after that
    page.route("**/mcp", hold)
    page.goto(f"{base(server)}/#session={session_id}&entry=nope0000")
    expect(page.locator("#tree .row").first).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    until_held(page, held, "the entry the address names")
    held[0].continue_()
    # (asked of the page: ``page.url`` is the address last heard from it, and nothing is heard
    # while a test sleeps: a poll of it never saw a cut made after the heading was drawn)
    expect(page).to_have_url(f"{base(server)}/#session={session_id}")
    expect(page.locator("#detail")).to_be_hidden()
    expect(page.locator("#toast")).to_be_hidden()
    context.close()


def test_the_entry_a_link_names_opens_once_a_refused_first_read_is_read_again(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A link's first read refused (a busy server) was said in place of the session, and the
    entry the link named was forgotten: the next read (at the next change) showed the session
    with no entry open, the address still naming one."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    refused: list[str] = []

    def refuse_first_read(route: Any) -> None:
        body = json.loads(route.request.post_data or "{}")
        arguments = body.get("params", {}).get("arguments", {})
        if arguments.get("view") == "outline" and not refused:
            refused.append(arguments["session_id"])
            busy = f"session {session_id} is busy: a write holds it; try again"
            result = {"isError": True, "content": [{"type": "text", "text": busy}]}
            route.fulfill(json={"jsonrpc": "2.0", "id": body["id"], "result": result})
        else:
            route.continue_()

    page.route("**/mcp", refuse_first_read)
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}&entry={ids['call']}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Could not read this session")
    assert refused == [session_id]
    mcp_tool(
        server.url,
        TOKEN,
        "session_append",
        session_id=session_id,
        entry={"type": "message", "role": "user", "content": "Bring a blanket too"},
    )
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    expect(page.locator("#detail-body")).to_contain_text("weather")
    expect(page.locator(f"#tree .row[data-id='{ids['call']}']")).to_have_attribute(
        "aria-selected", "true"
    )
    expect(page).to_have_url(f"{base(server)}/#session={session_id}&entry={ids['call']}")
    context.close()


def test_the_page_shows_the_session_and_acts_on_it(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    server, session_id, ids = served
    other = mcp_tool(server.url, TOKEN, "session_create", name="Grocery list")
    mcp_tool(
        server.url,
        TOKEN,
        "session_append",
        session_id=other["structuredContent"]["id"],
        entry={"type": "message", "role": "user", "content": "Milk, eggs and bread"},
    )
    context = browser.new_context(viewport={"width": 1280, "height": 760})
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}")
    sessions = page.locator("#sessions")
    expect(sessions).to_contain_text("Picnic plans")
    expect(sessions).to_contain_text("Grocery list")
    # newest first
    listed = mcp_tool(server.url, TOKEN, "session_list")["structuredContent"]["sessions"]
    said = [(s["name"], s["modified"]) for s in listed]
    assert [name for name, _ in said] == ["Grocery list", "Picnic plans"], said
    expect(sessions.locator(".session-name")).to_have_text(["Grocery list", "Picnic plans"])
    expect(page.locator("#live")).to_have_class("live on")
    # search looks in the messages' text
    page.locator("#search").fill("eggs bread")
    expect(sessions.locator(".session-name")).to_have_text(["Grocery list"])
    page.locator("#search").fill("")
    expect(sessions.locator(".session-name")).to_have_count(2)

    sessions.get_by_text("Picnic plans").click()
    tree = page.locator("#tree")
    expect(page.locator("#session-name")).to_have_text("Picnic plans")
    # the other branch, unopened, under the entry it branches from; labels; the leaf
    head = tree.locator(f".row[data-id='{ids['sandwiches']}']")
    expect(head).to_contain_text("Add sandwiches")
    expect(head).to_have_class("row off-branch")
    expect(tree.locator(f".row[data-id='{ids['plan']}'] .chip")).to_have_text("#weather-ok")
    expect(tree.locator(f".row[data-id='{ids['leaf']}'] .leaf-mark")).to_be_visible()
    expect(tree.locator(".fold")).to_have_count(1)
    expect(tree.locator(".fold")).to_contain_text("more entries")
    expect(tree.locator(f".row[data-id='{ids['compaction']}']")).to_contain_text("compaction")

    # a fold opens in place
    tree.locator(".fold").click()
    expect(tree).to_contain_text("Item 3 added to the basket.")

    # open the branch; pick its answer and move the leaf there
    head.locator(".toggle").click()
    answer_row = tree.locator(f".row[data-id='{ids['sandwiches_answer']}']")
    expect(answer_row).to_contain_text("Cucumber and egg sandwiches")
    answer_row.click()
    expect(page.locator("#detail-body")).to_contain_text("Cucumber and egg sandwiches.")
    page.locator("#act-move").click()
    poll(
        lambda: leaf_of(server, session_id) == ids["sandwiches_answer"] or None,
        "the leaf never moved to the clicked entry",
    )
    expect(answer_row.locator(".leaf-mark")).to_be_visible()

    # an append by another client appears without a reload
    mcp_tool(
        server.url,
        TOKEN,
        "session_append",
        session_id=session_id,
        entry={"type": "message", "role": "user", "content": "Bring a blanket too"},
    )
    expect(tree).to_contain_text("Bring a blanket too")
    row = tree.locator(".row", has_text="Bring a blanket too")
    expect(row.locator(".leaf-mark")).to_be_visible()
    # continue the session with a prompt: the agent's answer arrives as it is written
    page.locator("#prompt-text").fill("Shall we take the bikes?")
    page.locator("#prompt-send").click()
    last = tree.locator(".row").last
    expect(last.locator(".kind")).to_have_text("assistant", timeout=30_000)
    expect(last).to_contain_text("Shall we take the bikes?")  # scripted:echo
    expect(last.locator(".leaf-mark")).to_be_visible()

    # label an entry from the page
    tree.locator(f".row[data-id='{ids['ask']}']").click()
    page.locator("#act-label").click()
    page.locator("#label-text").fill("start")
    page.locator("#label-form button").click()
    expect(tree.locator(f".row[data-id='{ids['ask']}'] .chip")).to_have_text("#start")
    nodes = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id, view="tree", limit=0)[
        "structuredContent"
    ]["nodes"]
    assert next(n for n in nodes if n["id"] == ids["ask"])["label"] == "start"

    # the branch left behind is now the one to open
    left = tree.locator(f".row[data-id='{ids['summary']}']")
    expect(left).to_have_class("row off-branch")
    expect(left).to_contain_text("branch summary")
    left.locator(".toggle").click()
    expect(tree.locator(f".row[data-id='{ids['compaction']}']")).to_be_visible()
    tree.locator(f".row[data-id='{ids['call']}']").click()
    expect(page.locator("#detail-body")).to_contain_text("weather")
    screenshot(page, "viewer-page.png")

    # fork at the selected entry: the new session opens, its header names the parent
    page.locator("#act-fork").click()
    expect(page.locator("#session-facts")).to_contain_text(f"forked from {session_id[:8]}")
    expect(sessions.locator(".session")).to_have_count(3)
    context.close()


def test_the_list_shows_the_newest_search_whatever_answers_last(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A search answered after a later one (a wider search is slower) showed the sessions of
    words no longer in the box: only the newest list asked for is shown."""
    server, _, _ = served
    other = mcp_tool(server.url, TOKEN, "session_create", name="Grocery list")
    entry = {"type": "message", "role": "user", "content": "Milk and eggs"}
    mcp_tool(
        server.url,
        TOKEN,
        "session_append",
        session_id=other["structuredContent"]["id"],
        entry=entry,
    )
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}")
    names = page.locator("#sessions .session-name")
    expect(names).to_have_count(2)
    held: list[Any] = []

    def hold(route: Any) -> None:
        body = json.loads(route.request.post_data or "{}")
        if body.get("params", {}).get("arguments", {}).get("query") == "picnic":
            held.append(route)
        else:
            route.continue_()

    page.route("**/mcp", hold)
    page.locator("#search").fill("picnic")

    def sent() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return bool(held)

    poll(sent, "the first search was never sent")
    page.locator("#search").fill("milk")
    expect(names).to_have_text(["Grocery list"])
    with page.expect_event("requestfinished", lambda request: request is held[0].request):
        held[0].continue_()
    page.wait_for_timeout(300)  # the late answer read by the page
    expect(names).to_have_text(["Grocery list"])
    context.close()


def test_a_live_update_keeps_the_sessions_more_sessions_showed(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """The list read again at a change (every append of an agent's run) read its first page
    alone: what "More sessions" showed fell off at each change."""
    server, session_id, _ = served
    for index in range(55):
        mcp_tool(server.url, TOKEN, "session_create", name=f"Errand {index}")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    sessions = page.locator("#sessions .session")
    expect(sessions).to_have_count(50)
    page.locator("#more-sessions").focus()
    page.keyboard.press("Enter")
    expect(sessions).to_have_count(56)
    expect(sessions.nth(50)).to_be_focused()  # the first it showed (the button hid: the body)
    expect(page.locator("#more-sessions")).to_be_hidden()
    errand = sessions.filter(has=page.get_by_text("Errand 3", exact=True))
    errand.focus()
    entry = {"type": "message", "role": "user", "content": "One more thing"}
    mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=entry)
    # the list read again: the session just written to comes first
    expect(page.locator("#sessions .session-name").first).to_have_text("Picnic plans")
    expect(errand).to_be_focused()  # the focus stays where it was (it went to the body)
    expect(sessions).to_have_count(56)
    expect(page.locator("#more-sessions")).to_be_hidden()
    # a new search starts from its first page
    page.locator("#search").fill("errand")
    expect(sessions).to_have_count(50)
    expect(page.locator("#more-sessions")).to_be_visible()
    context.close()


def test_more_sessions_pressed_while_the_list_is_read_again_is_not_lost(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """ "More sessions" pressed while the list was being read again (at a change, at the
    stream's opening: on a loaded machine, often just as the page came) did nothing, without
    a word: the press is now kept until the list has come, and then shows the rest."""
    server, session_id, _ = served
    for index in range(55):
        mcp_tool(server.url, TOKEN, "session_create", name=f"Errand {index}")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    sessions = page.locator("#sessions .session")
    expect(sessions).to_have_count(50)
    expect(page.locator("#live")).to_have_class(re.compile(r"\bon\b"))  # no re-read to come
    held: list[Any] = []

    def hold(route: Any) -> None:
        body = json.loads(route.request.post_data or "{}")
        arguments = body.get("params", {}).get("arguments", {})
        listing = body.get("params", {}).get("name") == "session_list"
        if listing and "cursor" not in arguments and not held:
            held.append(route)  # the list read again from its start
        else:
            route.continue_()

    page.route("**/mcp", hold)
    entry = {"type": "message", "role": "user", "content": "One more thing"}
    mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=entry)

    def sent() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return bool(held)

    poll(sent, "the list was never read again")
    page.locator("#more-sessions").focus()
    page.keyboard.press("Enter")
    held[0].continue_()
    expect(sessions).to_have_count(56)
    expect(page.locator("#more-sessions")).to_be_hidden()
    context.close()


def test_the_page_says_when_the_agent_has_answered(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A prompt sent from the page said "The agent is working…" (a status, which a screen
    reader hears) and then nothing when the run ended well: the answer came into the tree
    unheard, and a reader who cannot see it did not know when to look. The end is said too."""
    server, session_id, _ = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    expect(page.get_by_role("tree", name="Picnic plans")).to_be_visible()
    page.get_by_role("textbox", name="Prompt").focus()
    page.keyboard.type("Shall we bring a kite?")
    page.keyboard.press("Control+Enter")
    # (after "The agent is working…", which a quick run may replace before it is seen)
    status = page.get_by_role("status").filter(has_text="The agent is done")
    expect(status).to_have_text("The agent is done: its answer is the new leaf.", timeout=30_000)
    leaf = page.locator("#tree .row").last
    expect(leaf).to_contain_text("Shall we bring a kite?")  # scripted:echo
    expect(leaf.locator(".leaf-mark")).to_be_visible()
    context.close()


def test_a_server_that_stopped_is_said_to_not_answer(
    browser: Browser, own_served: tuple[Served, str, dict[str, str]]
) -> None:
    """The page said the browser's words, "Failed to fetch", in the list and a toast, while its
    server was stopped or restarting: it says the server does not answer, and what to check."""
    server, session_id, _ = own_served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    expect(page.locator("#live")).to_have_class("live on")
    server.stop()
    said = "the server does not answer"
    expect(page.locator("#connection")).to_contain_text(said)
    expect(page.locator("#connection")).to_contain_text("mcp-agent-sessions serve still running")
    context.close()


def test_seven_tabs_share_one_stream_and_stay_live(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """Each tab of the page held a connection for its listening, and a browser opens six to a
    host: a seventh tab, and every click in the six, waited for good. The tabs share one
    stream, held by one of them and passed on when it closes."""
    server, session_id, _ = served
    context = browser.new_context()
    tabs = []
    for _ in range(7):
        tab = context.new_page()
        tab.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
        expect(tab.get_by_role("heading", level=1)).to_have_text("Picnic plans")
        tabs.append(tab)
    for text in ("Bring a blanket", "And a kite"):
        mcp_tool(
            server.url,
            TOKEN,
            "session_append",
            session_id=session_id,
            entry={"type": "message", "role": "user", "content": text},
        )
        for tab in tabs:
            expect(tab.locator("#tree")).to_contain_text(text, timeout=15_000)
        tabs.pop(0).close()  # the one that listens for all, first: another takes over
    context.close()


def test_the_shared_stream_comes_back_when_its_tab_signs_in_again(
    browser: Browser, tmp_path: Path
) -> None:
    """The tab holding the tabs' stream, signed out, kept it, listening no more: the other
    tabs, signed in, heard nothing for good; it gives the stream to another. It could not
    listen again once the stream dropped (a restart); signed in again, it listened for the
    same sessions as before, which it took for the stream it had: every tab stayed deaf."""
    session_id, _ = picnic_db(tmp_path / "http.db")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    server = Served(tmp_path, "--token-file", str(token_file))
    context = browser.new_context()
    try:
        tabs = [context.new_page(), context.new_page()]
        for tab in tabs:  # the first holds the stream
            tab.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
            expect(tab.locator("#live")).to_have_class("live on")
        tabs[0].evaluate("location.hash = '#token=not-the-token'")
        expect(tabs[0].get_by_role("heading", level=1)).to_have_text("Signed out")
        append = {"type": "message", "role": "user", "content": "Heard by the other tab"}
        mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=append)
        expect(tabs[1].locator("#tree")).to_contain_text("Heard by the other tab")
        server.stop()
        server = Served(tmp_path, "--token-file", str(token_file), port=server.port)
        tabs[0].evaluate(f"location.hash = '#token={TOKEN}'")
        expect(tabs[0].get_by_role("heading", level=1)).to_have_text("Picnic plans")
        mcp_tool(
            server.url,
            TOKEN,
            "session_append",
            session_id=session_id,
            entry={"type": "message", "role": "user", "content": "Heard again"},
        )
        for tab in tabs:
            expect(tab.locator("#tree")).to_contain_text("Heard again", timeout=15_000)
    finally:
        context.close()
        server.stop()


def test_the_tree_goes_by_keyboard(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """The tree says it is one (role="tree"): arrows move between its rows, Right opens a
    branch and Left closes it, Enter or Space reads the entry (arrows did nothing at all)."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    tree = page.locator("#tree")
    rows = tree.locator(".row")
    expect(tree.locator(f".row[data-id='{ids['leaf']}']")).to_be_visible()
    # named after its session (a screen reader said "tree", no more)
    expect(page.get_by_role("tree", name="Picnic plans")).to_be_visible()

    def focused() -> str:
        return str(page.evaluate("document.activeElement.dataset.id"))

    # One row takes Tab, as in a tree (each row did): the one last focused; a branch's toggle
    # takes none (Right and Left do its work; each was a tab stop), nor does a fold (the
    # arrows reach it: in a long session, its folds were 50 and more Tabs to get past).
    expect(tree.locator(".row[tabindex='0']")).to_have_count(1)
    stops = tree.locator("*").evaluate_all(
        "all => all.filter((e) => e.tabIndex >= 0).map((e) => e.className.split(' ')[0])"
    )
    assert stops == ["row"], stops
    tree.locator(f".row[data-id='{ids['leaf']}']").focus()
    page.keyboard.press("ArrowUp")
    assert focused() == ids["last_ask"]
    expect(tree.locator(".row[tabindex='0']")).to_have_count(1)
    expect(tree.locator(f".row[data-id='{ids['last_ask']}']")).to_have_attribute("tabindex", "0")
    page.keyboard.press("Home")
    assert focused() == rows.first.get_attribute("data-id")
    page.keyboard.press("ArrowDown")
    assert focused() == rows.nth(1).get_attribute("data-id")
    page.keyboard.press("End")
    assert focused() == ids["leaf"]
    head = tree.locator(f".row[data-id='{ids['sandwiches']}']")
    expect(head).to_have_attribute("aria-expanded", "false")
    head.focus()
    page.keyboard.press("ArrowRight")
    expect(tree.locator(f".row[data-id='{ids['sandwiches_answer']}']")).to_be_visible()
    expect(head).to_have_attribute("aria-expanded", "true")
    assert focused() == ids["sandwiches"]
    page.keyboard.press("ArrowDown")
    assert focused() == ids["sandwiches_answer"]
    # the branch's rows are said to be one level down (all were heard as the chain's)
    expect(tree.locator(f".row[data-id='{ids['sandwiches_answer']}']")).to_have_attribute(
        "aria-level", "2"
    )
    expect(tree.locator(f".row[data-id='{ids['plan']}']")).to_have_attribute("aria-level", "1")
    page.keyboard.press(" ")
    expect(page.locator("#detail-body")).to_contain_text("Cucumber and egg sandwiches.")
    # the entry on show is said to be selected, to a screen reader too
    selected = tree.locator(".row[aria-selected='true']")
    expect(selected).to_have_count(1)
    expect(selected).to_have_attribute("data-id", ids["sandwiches_answer"])
    expect(tree.locator(".row[aria-selected='false']")).to_have_count(rows.count() - 1)
    head.focus()
    page.keyboard.press("ArrowLeft")
    expect(tree.locator(f".row[data-id='{ids['sandwiches_answer']}']")).to_have_count(0)
    assert focused() == ids["sandwiches"]
    expect(tree.locator(".row[tabindex='0']")).to_have_count(1)  # redrawn, the stop kept
    expect(head).to_have_attribute("tabindex", "0")
    # The fold is reached by the arrows and opened with Enter: the focus goes to its first row.
    tree.locator(f".row[data-id='{ids['summary']}']").focus()
    page.keyboard.press("ArrowDown")
    expect(tree.locator(".fold")).to_be_focused()
    page.keyboard.press("Enter")
    expect(tree.locator(".fold")).to_have_count(0)
    first = tree.locator(".folds .row").first
    expect(first).to_be_focused()
    page.keyboard.press("ArrowUp")
    assert focused() == ids["summary"]
    context.close()


def test_escape_closes_the_label_form_unsaved(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """Escape did nothing in the label form: it closes it, saves nothing and gives the focus
    back to the Label button."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    page.locator(f"#tree .row[data-id='{ids['ask']}']").click()
    expect(page.locator("#detail-body")).to_contain_text("Plan a picnic for Saturday")
    page.locator("#act-label").click()
    expect(page.locator("#label-text")).to_be_focused()
    page.keyboard.type("not-this")
    page.keyboard.press("Escape")
    expect(page.locator("#label-form")).to_be_hidden()
    expect(page.locator("#act-label")).to_be_focused()
    nodes = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id, view="tree", limit=0)
    ask = next(n for n in nodes["structuredContent"]["nodes"] if n["id"] == ids["ask"])
    assert ask.get("label") is None
    context.close()


def test_the_label_form_opened_before_the_clicked_entry_is_read_stays_open(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A Label click made before the clicked row's entry was read (a loaded server) opened the
    form, and the entry's late answer closed it under the user's typing."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    tree = page.locator("#tree")
    tree.locator(f".row[data-id='{ids['plan']}']").click()
    expect(page.locator("#detail")).to_be_visible()
    held: list[Any] = []

    def hold(route: Any) -> None:
        arguments = (
            json.loads(route.request.post_data or "{}").get("params", {}).get("arguments", {})
        )
        if arguments.get("entry_id") == ids["ask"]:
            held.append(route)
        else:
            route.continue_()

    page.route("**/mcp", hold)
    tree.locator(f".row[data-id='{ids['ask']}']").click()

    def sent() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return bool(held)

    poll(sent, "the clicked entry was never asked for")
    page.locator("#act-label").click()
    expect(page.locator("#label-text")).to_be_focused()
    with page.expect_event("requestfinished", lambda request: request is held[0].request):
        held[0].continue_()
    expect(page.locator("#detail-body")).to_contain_text("Plan a picnic for Saturday")
    expect(page.locator("#label-form")).to_be_visible()
    page.locator("#label-text").fill("start")
    page.locator("#label-form button").click()
    expect(tree.locator(f".row[data-id='{ids['ask']}'] .chip")).to_have_text("#start")
    context.close()


def test_the_focus_stays_on_its_row_through_live_updates_and_unfolds(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A keyboard reader keeps their place: each live update (every append an agent makes)
    drew the tree anew and left the focus on the page's body, so arrows did nothing and Tab
    went back to the page's top; so did a fold opened with Enter."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    tree = page.locator("#tree")
    expect(tree.locator(f".row[data-id='{ids['leaf']}']")).to_be_visible()

    def focused() -> str:
        return str(
            page.evaluate("document.activeElement.dataset.id || document.activeElement.tagName")
        )

    tree.locator(f".row[data-id='{ids['leaf']}']").focus()
    page.keyboard.press("ArrowUp")
    assert focused() == ids["last_ask"]
    for text in ("One more thing", "And another"):
        entry = {"type": "message", "role": "user", "content": text}
        mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=entry)
        expect(tree.locator(".row", has_text=text)).to_be_visible()
        assert focused() == ids["last_ask"]
    page.keyboard.press("ArrowUp")  # the arrows go on from there
    assert focused() != ids["last_ask"] and focused() != "BODY"
    # a fold opened from the keyboard: the focus stays in the tree
    tree.locator(".fold").focus()
    page.keyboard.press("Enter")
    expect(tree.locator(".fold")).to_have_count(0)
    assert page.evaluate("document.getElementById('tree').contains(document.activeElement)")
    context.close()


# The ids of the sessions made from files: one a session, as the tests share a server.


def long_side_branch(path: Path, chain: int, aside: bool = True) -> tuple[str, str]:
    """A session whose side branch (off the root) is ``chain`` entries long, each with a side
    entry of its own, so its outline has two rows per entry; the session's id and the side
    branch's head. ``aside=False``: that branch is the current one (no other off the root).
    Each is a session never seen before (the tests share a server): an id of its own."""
    header_id = f"01a00000-0000-7000-8000-{next(SESSION_NUMBERS):012d}"
    lines = [{"type": "session", "version": 3, "id": header_id}]
    lines[0] |= {"timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}

    def message(entry_id: str, parent: str | None, text: str) -> None:
        lines.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": {"role": "user", "content": text, "timestamp": 1},
            }
        )

    message("r0000000", None, "the root")
    for index in range(chain):  # the side entry first: a chain goes on with the newest child
        message(f"c{index:07d}", f"c{index - 1:07d}" if index else "r0000000", f"step {index}")
        message(f"s{index:07d}", f"c{index:07d}", f"aside {index}")
    if aside:
        message("m0000000", "r0000000", "the main branch")  # the last line: the leaf
    file = path.with_suffix(".jsonl")
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with SqliteSessionRepo(path) as repo:
        return repo.import_jsonl(file).id, "c0000000"


def test_a_branch_longer_than_what_is_read_at_once_shows_its_earlier_rows_on_demand(
    browser: Browser, open_served: tuple[Served, Path]
) -> None:
    # 600 entries with a side entry each: 1,200 rows, past the 1,000 read when it opens
    server, db = open_served
    session_id, head_id = long_side_branch(db, 600)
    page = browser.new_page()
    page.goto(f"{base(server)}/#session={session_id}")
    tree = page.locator("#tree")
    head = tree.locator(f".row[data-id='{head_id}']")
    head.locator(".toggle").click()
    newest = tree.locator(".row[data-id='c0000599']")
    expect(newest).to_be_visible(timeout=30_000)
    earlier = tree.locator(f".earlier[data-branch='{head_id}']")
    expect(earlier).to_have_text("Show earlier entries of this branch")
    expect(tree.locator(".row[data-id='c0000010']")).to_have_count(0)
    # a page (about 40 KB) a click, until the branch's head
    for _ in range(5):
        if not earlier.count():
            break
        before = tree.locator(".row").count()
        earlier.click()
        expect(tree.locator(".row")).not_to_have_count(before, timeout=30_000)
    expect(tree.locator(".row[data-id='c0000010']")).to_be_visible()
    expect(earlier).to_have_count(0)
    expect(tree.locator(f".row[data-id='{head_id}']")).to_have_count(1)
    # every entry and its side entry once, in order
    ids = tree.locator(".row").evaluate_all("rows => rows.map((row) => row.dataset.id)")
    steps = [i for i in ids if i[0] == "c"]
    assert steps == [f"c{index:07d}" for index in range(600)]
    assert len([i for i in ids if i[0] == "s"]) == 600
    # a live update keeps what was shown: the branch is read again as far as it was
    appended = mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)
    expect(tree.locator(f".row[data-id='{entry_id(appended)}']")).to_be_visible()
    expect(tree.locator(".row[data-id='c0000010']")).to_be_visible()
    expect(earlier).to_have_count(0)
    # closed and opened again: read again, from the newest
    tree.locator(f".row[data-id='{head_id}'] .toggle").click()
    expect(newest).to_have_count(0)
    page.close()


NOTE = {"type": "message", "role": "user", "content": "news"}


def entry_id(appended: dict[str, Any]) -> str:
    return str(appended["structuredContent"]["entryId"])


@pytest.fixture(name="long_branch")
def long_branch_fixture(
    browser: Browser, open_served: tuple[Served, Path]
) -> Iterator[tuple[Served, str, Page]]:
    """The current branch 400 entries long, a side entry each (about 800 rows, 300 read when
    the session opens), open in a page of a server without auth, its newest row shown."""
    server, db = open_served
    session_id, _ = long_side_branch(db, 400, aside=False)
    page = browser.new_page()
    page.goto(f"{base(server)}/#session={session_id}")
    expect(page.locator("#tree .row[data-id='c0000399']")).to_be_visible(timeout=30_000)
    yield server, session_id, page
    page.close()


def test_earlier_rows_of_the_outline_stay_shown_through_live_updates(
    long_branch: tuple[Served, str, Page],
) -> None:
    server, session_id, page = long_branch
    tree = page.locator("#tree")
    rows = tree.locator(".row")
    first_page = rows.count()
    assert first_page < 400  # a page, not the whole outline
    tree.locator(".earlier").click()  # a second page: 600 rows of about 800
    expect(rows).not_to_have_count(first_page)
    earliest = str(rows.first.get_attribute("data-id"))
    appended = mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)
    expect(tree.locator(f".row[data-id='{entry_id(appended)}']")).to_be_visible()
    # The update read as far back as was shown, and the row it added: the earliest row
    # shown before stays (it was lost: the update read the newest page alone, and then
    # as many rows as were shown, one short of it).
    expect(tree.locator(f".row[data-id='{earliest}']")).to_be_visible()


def test_a_live_update_changes_only_the_rows_that_changed(
    long_branch: tuple[Served, str, Page],
) -> None:
    """Each live update (every append an agent makes) drew the whole tree anew: 200 to 400 ms
    at 1,000 rows on a loaded machine, the focused row lost and put back, the selection and
    the scroll set again. An update now changes only the rows that changed: every row drawn
    before is the same element after (the focus, the scroll and the selection untouched),
    and the page adds and removes a handful of elements, not the tree's thousands."""
    server, session_id, page = long_branch
    tree = page.locator("#tree")
    picked = tree.locator(".row[data-id='c0000300']")
    picked.click()
    expect(page.locator("#detail-body")).to_contain_text("step 300")
    expect(picked).to_be_focused()
    before = page.evaluate(
        """() => {
        const tree = document.getElementById('tree');
        for (const row of tree.querySelectorAll('.row')) row.drawnBefore = true;
        tree.scrollTop = tree.scrollHeight / 2;
        window.treeChanges = 0;
        window.attributeChanges = 0;
        new MutationObserver((records) => {
          for (const record of records) {
            window.treeChanges += record.addedNodes.length + record.removedNodes.length;
            if (record.type === 'attributes') window.attributeChanges++;
          }
        }).observe(tree, { childList: true, subtree: true, attributes: true });
        // what made a formatter at each call (half a millisecond and more each)
        window.formatted = 0;
        for (const [kind, names] of [[Date, ['toLocaleString', 'toLocaleDateString',
            'toLocaleTimeString']], [Number, ['toLocaleString']]]) {
          for (const name of names) {
            const made = kind.prototype[name];
            kind.prototype[name] = function (...args) {
              window.formatted++;
              return made.apply(this, args);
            };
          }
        }
        window.focusedBefore = document.activeElement;
        return { rows: tree.querySelectorAll('.row').length, scroll: tree.scrollTop };
    }"""
    )
    assert before["scroll"] > 0
    for count in (1, 2):
        appended = mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)
        expect(tree.locator(f".row[data-id='{entry_id(appended)}']")).to_be_visible()
        after = page.evaluate(
            """() => {
            const tree = document.getElementById('tree');
            const rows = [...tree.querySelectorAll('.row')];
            return {
              redrawn: rows.filter((row) => !row.drawnBefore).length,
              changes: window.treeChanges,
              attributeChanges: window.attributeChanges,
              formatted: window.formatted,
              focusKept: document.activeElement === window.focusedBefore,
              scroll: tree.scrollTop,
            };
        }"""
        )
        assert after["redrawn"] == count, after  # the new rows alone are new elements
        assert after["changes"] <= 10 * count, after  # not the tree's 600 rows again
        # nor every row's attributes set again, nor a formatter made for each row
        assert after["attributeChanges"] <= 10 * count, after
        assert after["formatted"] <= 10 * count, after
        assert after["focusKept"], after
        assert after["scroll"] == before["scroll"], after
    expect(picked).to_have_attribute("aria-selected", "true")
    expect(tree.locator(".row[aria-selected='true']")).to_have_count(1)


# --- the MCP App in a host -------------------------------------------------------------------

# A minimal host: the view in a sandboxed frame (scripts only, an origin of its own), the MCP
# Apps protocol over postMessage, and the view's tools/call handed to the test (the host's MCP
# client) through an exposed function. Every message is logged for the test to read.
HOST_PAGE = """<!doctype html><meta charset=utf-8>
<style>body{margin:0;background:#eef0f4;font:14px system-ui}
.chat{max-width:980px;margin:24px auto;padding:0 16px}
.bubble{background:#fff;border-radius:12px;padding:10px 14px;margin:0 0 12px;
box-shadow:0 1px 2px rgba(0,0,0,.06);color:#333}
iframe{width:100%;border:1px solid #dde1e8;border-radius:12px;background:#fff;height:300px;display:block}</style>
<div class=chat><div class=bubble>Show me the picnic session.</div>
<div class=bubble>Here it is (session_get):</div><iframe id=view sandbox=allow-scripts></iframe></div>
<script>
window.hostLog = [];
const frame = document.getElementById('view');
function reply(id, result) { frame.contentWindow.postMessage({jsonrpc: '2.0', id, result}, '*'); }
window.addEventListener('message', async (event) => {
  if (event.source !== frame.contentWindow) return;
  const message = event.data;
  window.hostLog.push(message);
  if (message.method === 'ui/initialize') {
    reply(message.id, {protocolVersion: '2026-01-26', hostInfo: {name: 'test host', version: '1'},
      hostCapabilities: window.hostCapabilities || {serverTools: {}}, hostContext: window.hostContext});
  } else if (message.method === 'ui/notifications/initialized') {
    frame.contentWindow.postMessage({jsonrpc: '2.0', method: 'ui/notifications/tool-input',
      params: {arguments: window.toolInput}}, '*');
    frame.contentWindow.postMessage({jsonrpc: '2.0', method: 'ui/notifications/tool-result',
      params: window.toolResult}, '*');
  } else if (message.method === 'ui/notifications/size-changed') {
    frame.style.height = Math.min(message.params.height, 640) + 'px';
  } else if (message.method === 'tools/call') {
    const result = await window.hostCallTool(message.params.name, message.params.arguments);
    reply(message.id, result);
  }
});
</script>"""


def in_host(
    browser: Browser,
    server: Served,
    arguments: dict[str, Any],
    result: dict[str, Any],
    call_tool: Any,
    host_context: dict[str, Any] | None = None,
) -> Page:
    """The host page with the App (as ``session_get`` links it) in its frame, handed the tool's
    ``arguments`` and ``result`` and ``host_context`` (a light theme, inline, by default);
    ``call_tool(name, arguments)`` answers the view's calls."""
    tools = mcp_request(server.url, "tools/list", {}, TOKEN).json()["result"]["tools"]
    uri = next(t for t in tools if t["name"] == "session_get")["_meta"]["ui"]["resourceUri"]
    read = mcp_request(server.url, "resources/read", {"uri": uri}, TOKEN, **{"Mcp-Name": uri})
    [content] = read.json()["result"]["contents"]
    assert content["mimeType"] == "text/html;profile=mcp-app"
    page = browser.new_page(viewport={"width": 1020, "height": 580})
    page.expose_function("hostCallTool", call_tool)
    page.set_content(HOST_PAGE)
    context = host_context or {"theme": "light", "displayMode": "inline"}
    page.evaluate(
        "([input, result, context, html]) => { window.toolInput = input;"
        " window.toolResult = result; window.hostContext = context;"
        " document.getElementById('view').srcdoc = html; }",
        [arguments, result, context, content["text"]],
    )
    return page


def test_the_app_in_a_host_renders_a_result_and_calls_tools_through_it(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    server, session_id, ids = served
    arguments = {"session_id": session_id}
    result = mcp_tool(server.url, TOKEN, "session_get", **arguments)
    calls: list[str] = []

    def host_call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
        calls.append(name)
        response = mcp_request(server.url, "tools/call", {"name": name, "arguments": args}, TOKEN)
        answer: dict[str, Any] = response.json()["result"]
        return answer

    page = in_host(browser, server, arguments, result, host_call_tool)
    view = page.frame_locator("#view")
    tree = view.locator("#tree")
    expect(view.locator("#session-name")).to_have_text("Picnic plans")
    expect(tree.locator(f".row[data-id='{ids['sandwiches']}']")).to_contain_text("Add sandwiches")
    expect(tree.locator(f".row[data-id='{ids['plan']}'] .chip")).to_have_text("#weather-ok")
    expect(tree.locator(f".row[data-id='{ids['leaf']}'] .leaf-mark")).to_be_visible()
    log = page.evaluate("window.hostLog")
    init = log[0]
    assert init["method"] == "ui/initialize" and init["params"]["protocolVersion"] == "2026-01-26"
    assert log[1]["method"] == "ui/notifications/initialized"

    tree.locator(f".row[data-id='{ids['summary']}']").click()
    expect(view.locator("#detail-body")).to_contain_text("the user would rather bring fruit")
    view.locator("#act-move").click()
    poll(
        lambda: leaf_of(server, session_id) == ids["summary"] or None,
        "the view's click never moved the leaf",
    )
    assert "session_move_to" in calls
    moves = [m for m in page.evaluate("window.hostLog") if m.get("method") == "tools/call"]
    assert any(m["params"]["name"] == "session_move_to" for m in moves)
    expect(tree.locator(f".row[data-id='{ids['summary']}'] .leaf-mark")).to_be_visible()
    sizes = [
        m for m in page.evaluate("window.hostLog") if m.get("method", "").endswith("size-changed")
    ]
    assert sizes and sizes[-1]["params"]["height"] > 0
    expect(view.locator("#toast")).to_be_hidden(timeout=10_000)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "viewer-app.png"))
    page_log: list[dict[str, Any]] = page.evaluate("window.hostLog")
    page.close()
    check_against_the_spec(page_log, result)


def server_calls(server: Served) -> Any:
    """A host's tool calls, handed to ``server`` as they come."""

    def call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
        response = mcp_request(server.url, "tools/call", {"name": name, "arguments": args}, TOKEN)
        answer: dict[str, Any] = response.json()["result"]
        return answer

    return call_tool


def test_the_app_says_a_session_is_gone_without_pointing_at_a_list_it_has_not(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    server, _, _ = served
    gone = "01a00000-0000-7000-8000-00000000beef"
    result = {"content": [], "structuredContent": {"sessionId": gone}}
    page = in_host(browser, server, {"session_id": gone}, result, server_calls(server))
    view = page.frame_locator("#view")
    expect(view.locator("#session-name")).to_have_text("Session not found")
    # the App shows no list of sessions (it said "Pick one from the list.")
    expect(view.locator("#tree")).to_have_text("This session is not here (deleted, or never was).")
    page.close()


def test_the_app_says_why_when_its_first_read_is_refused(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A refused read (the host's policy, a busy server) stayed a toast for six seconds, over
    "Waiting for the tool's result…", which then stood for good."""
    server, session_id, _ = served
    refusal = "session_get: the host does not allow this tool here"

    def refuse(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"isError": True, "content": [{"type": "text", "text": refusal}]}

    result = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id)
    page = in_host(browser, server, {"session_id": session_id}, result, refuse)
    view = page.frame_locator("#view")
    expect(view.locator("#session-name")).to_have_text("Could not read this session")
    expect(view.locator("#tree")).to_have_text(refusal)
    expect(view.locator("#toast")).to_be_hidden()
    # A host that passes on no tool calls (no serverTools) may never answer one: the view
    # waited for good. It asks it none, and says why.
    page.evaluate(
        "window.hostCapabilities = {}; window.hostLog = [];"
        " const frame = document.getElementById('view');"
        " frame.srcdoc = frame.srcdoc + ' ';"
    )
    expect(view.locator("#tree")).to_contain_text("This host does not pass the view's tool calls")
    assert [m for m in page.evaluate("window.hostLog") if m.get("method") == "tools/call"] == []
    page.close()


def test_the_app_fills_the_frame_in_fullscreen(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """The view tells the host it can go fullscreen (availableDisplayModes): there it stayed
    the inline view's 640 px at most (its tree 520) in a frame the screen's height. And an
    entry too large for a page, in a host that reads no resources (this one), showed a stub
    alone ("… bytes, too large for a page: read session://…"): it shows its start, cut."""
    server, session_id, ids = served
    big = {"type": "message", "role": "user", "content": "Packing list: " + "tent " * 600_000}
    appended = mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=big)
    result = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id)
    page = in_host(browser, server, {"session_id": session_id}, result, server_calls(server))
    view = page.frame_locator("#view")
    expect(view.locator(f"#tree .row[data-id='{ids['leaf']}']")).to_be_visible()
    view.locator(f"#tree .row[data-id='{entry_id(appended)}']").click()
    body = view.locator("#detail-body")
    expect(body.locator(".note")).to_contain_text("Truncated: 3,000,")
    expect(body).to_contain_text("Packing list: tent tent")
    expect(body).to_contain_text("[cut: 3,000,014 characters in all]")
    assert len(body.inner_text()) < 30_000
    init = page.evaluate("window.hostLog")[0]
    assert "fullscreen" in init["params"]["appCapabilities"]["availableDisplayModes"]
    page.set_viewport_size({"width": 1200, "height": 1000})
    page.evaluate(
        "const frame = document.getElementById('view');"
        # the host's frame in fullscreen: the screen, whatever size the view says
        "const full = document.createElement('style');"
        "full.textContent = '#view { position: fixed; inset: 0; height: 100vh !important }';"
        "document.head.append(full);"
        "frame.contentWindow.postMessage({jsonrpc: '2.0', method:"
        " 'ui/notifications/host-context-changed', params: {displayMode: 'fullscreen'}}, '*');"
    )
    frame = page.frames[1]
    poll(lambda: frame.evaluate("innerHeight > 900") or None, "the host's frame is not the screen")
    app = "document.getElementById('app').getBoundingClientRect().height"
    poll(
        lambda: frame.evaluate(f"{app} === innerHeight") or None,
        "the view does not fill the fullscreen frame",
        tries=100,
    )
    # the tree takes the room (its rows are more than the inline view's 520 px show)
    assert frame.evaluate("document.getElementById('tree').getBoundingClientRect().height") > 600
    # and the rest is read in pieces through the host's tool calls, when asked for
    body.get_by_role("button", name="Read all of it").click()
    expect(body).not_to_contain_text("[cut:", timeout=60_000)
    assert body.inner_text().count("tent") == 600_000
    page.close()


def test_the_app_takes_the_host_s_fonts_and_style_variables(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """The host's fonts (styles.css.fonts: @font-face rules) were never put on the page, and
    its text sizes and weights went unread (14 px whatever the host said): the view uses the
    fonts, sizes, weights and colours the host gives, and the ones it gives later."""
    server, session_id, ids = served
    context: dict[str, Any] = {
        "theme": "dark",
        "displayMode": "inline",
        "styles": {
            "variables": {
                "--font-sans": '"Host Sans", sans-serif',
                "--font-text-sm-size": "16px",
                "--font-heading-sm-size": "22px",
                "--font-weight-semibold": "700",
                "--color-background-primary": "rgb(10, 20, 30)",
                "--color-text-primary": "rgb(240, 230, 220)",
            },
            "css": {
                "fonts": "@font-face { font-family: 'Host Sans'; src: local('DejaVu Serif'); }"
            },
        },
    }
    check_host_context(context)
    result = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id)
    page = in_host(
        browser, server, {"session_id": session_id}, result, server_calls(server), context
    )
    view = page.frame_locator("#view")
    expect(view.locator(f"#tree .row[data-id='{ids['leaf']}']")).to_be_visible()
    frame = page.frames[1]
    style = "([e, p]) => getComputedStyle(document.querySelector(e))[p]"
    assert frame.evaluate(style, ["body", "fontFamily"]).startswith('"Host Sans"')
    assert frame.evaluate(style, ["body", "fontSize"]) == "16px"
    assert frame.evaluate(style, ["body", "backgroundColor"]) == "rgb(10, 20, 30)"
    assert frame.evaluate(style, ["body", "color"]) == "rgb(240, 230, 220)"
    assert frame.evaluate(style, ["#session-name", "fontSize"]) == "22px"
    assert frame.evaluate(style, ["#session-name", "fontWeight"]) == "700"
    poll(
        lambda: (
            frame.evaluate(
                "document.fonts.check('16px \"Host Sans\"') && [...document.fonts].some("
                "(f) => f.family.includes('Host Sans') && f.status === 'loaded')"
            )
            or None
        ),
        "the host's font was not loaded",
    )
    # Changed later (host-context-changed sends what changed): taken as it comes.
    page.evaluate(
        "document.getElementById('view').contentWindow.postMessage({jsonrpc: '2.0', method:"
        " 'ui/notifications/host-context-changed', params: {styles: {variables:"
        " {'--font-text-sm-size': '13px'}, css: {fonts: \"@font-face { font-family: 'Other';"
        " src: local('DejaVu Sans'); }\"}}}}, '*')"
    )
    poll(
        lambda: frame.evaluate(style, ["body", "fontSize"]) == "13px" or None,
        "the host's later size was not taken",
    )
    families = frame.evaluate("[...document.fonts].map((f) => f.family)")
    assert families == ['"Other"'] or families == ["Other"], families
    page.close()


def check_host_context(context: dict[str, Any]) -> None:
    """``context`` as the ext-apps spec's schema has a host context, when it is installed."""
    if not APPS_SCHEMA.exists():
        return
    spec_check(context, "McpUiHostContext", any_style=True)


@functools.cache
def _spec_definitions(any_style: bool) -> dict[str, Any]:
    """The ext-apps spec's ``$defs`` (with ``_any_style_subset`` applied if ``any_style``),
    checked against JSON Schema's metaschema once per process: the check takes seconds (the
    schema is 220 KB), and jsonschema.validate made it again for every message checked."""
    import jsonschema

    definitions: dict[str, Any] = json.loads(APPS_SCHEMA.read_text())["$defs"]
    if any_style:
        definitions = _any_style_subset(definitions)
    schema = {"$defs": definitions}
    jsonschema.validators.validator_for(schema).check_schema(schema)
    return definitions


def spec_check(instance: Any, name: str, any_style: bool = False) -> None:
    """What jsonschema.validate does for ``instance`` against the spec's ``name``, with the
    schema itself checked once (``_spec_definitions``)."""
    import jsonschema

    schema = {"$defs": _spec_definitions(any_style), "$ref": f"#/$defs/{name}"}
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


def _any_style_subset(schema: Any) -> Any:
    """``schema`` without the ``required`` list of its style variables: the spec says "hosts
    may provide any subset of these values", but its generated schema (from a TypeScript
    Record) requires every one of the 76."""
    if isinstance(schema, list):
        return [_any_style_subset(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    values = schema.get("additionalProperties")
    said = str(values.get("description", "")) if isinstance(values, dict) else ""
    optional = "Individual style keys are optional" in said
    return {
        key: _any_style_subset(value)
        for key, value in schema.items()
        if not (optional and key == "required")
    }


# The WCAG contrast ratio of an element's text on its background (both rgb() as computed).
CONTRAST = """(e) => {
  const style = getComputedStyle(e);
  const lum = (color) => {
    const [r, g, b] = color.match(/[\\d.]+/g).slice(0, 3).map((v) => {
      const c = Number(v) / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [a, b] = [lum(style.color), lum(style.backgroundColor)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_on_the_accent_and_the_error_colour_reads_in_both_schemes(
    browser: Browser, served: tuple[Served, str, dict[str, str]], scheme: str
) -> None:
    """In dark mode the leaf mark, "Move leaf here" and an error's toast were white on light
    colours (2.8:1): their text is at least 4.5:1 on its background in both schemes."""
    server, session_id, ids = served
    context = browser.new_context(color_scheme=scheme)  # type: ignore[arg-type]
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    page.locator(f"#tree .row[data-id='{ids['ask']}']").click()
    expect(page.locator("#act-move")).to_be_enabled()
    for selector in ("#tree .leaf-mark", "#act-move"):
        ratio = page.locator(selector).first.evaluate(CONTRAST)
        assert ratio >= 4.5, (selector, ratio)
    # an error's toast, as the page shows one
    page.evaluate(
        "const box = document.getElementById('toast'); box.className = 'toast error';"
        " box.hidden = false; box.textContent = 'x'"
    )
    ratio = page.locator("#toast").evaluate(CONTRAST)
    assert ratio >= 4.5, ("toast", ratio)
    context.close()


def test_narrow_windows_show_the_session_whole(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A phone's width: the page kept its list a column beside the session, which got what
    220 px left (the page scrolled sideways, the title squeezed out by the id); the App in a
    narrow frame stacked the entry under the tree within its 640 px and cut the entry's
    actions in half. The list now stands above the session, and the App shows the entry."""
    server, session_id, ids = served
    context = browser.new_context(viewport={"width": 375, "height": 700})
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    page.locator(f"#tree .row[data-id='{ids['call']}']").click()
    expect(page.locator("#detail-body")).to_contain_text("weather")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    box = "(e) => e.getBoundingClientRect().width"
    assert page.locator("#session-name").evaluate(box) > 100
    assert page.locator("#tree").evaluate(box) > 300
    context.close()
    result = mcp_tool(server.url, TOKEN, "session_get", session_id=session_id)
    app = in_host(browser, server, {"session_id": session_id}, result, server_calls(server))
    app.set_viewport_size({"width": 420, "height": 900})
    view = app.frame_locator("#view")
    view.locator(f"#tree .row[data-id='{ids['call']}']").click()
    expect(view.locator("#detail-body")).to_contain_text("weather")
    frame = app.frames[1]
    bottom = "(e) => e.getBoundingClientRect().bottom"
    poll(
        lambda: (
            frame.locator("#detail-body").evaluate(bottom)
            <= frame.locator("#app").evaluate(bottom) + 1
            or None
        ),
        "the App cuts off the entry shown under its tree",
    )
    app.close()


@pytest.mark.parametrize("width", [360, 1200])
def test_the_page_points_to_the_list_where_the_list_is(
    browser: Browser, served: tuple[Served, str, dict[str, str]], width: int
) -> None:
    """With no session open the page said "Pick a session on the left.", and of a session gone
    "Pick one on the left.", also on a phone, where the list stands above the session. What
    they say now holds at any width: the list, wherever the window puts it."""
    server, _, _ = served
    context = browser.new_context(viewport={"width": width, "height": 740})
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}")
    expect(page.get_by_role("heading", level=1)).to_have_text("No session open")
    expect(page.locator("#tree")).to_have_text("Pick a session from the list.")
    page.goto(f"{base(server)}/#session={'0' * 8}-0000-7000-8000-{'0' * 12}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Session not found")
    expect(page.locator("#tree")).to_contain_text("Pick one from the list.")
    list_box = page.locator("#sessions").bounding_box()
    tree_box = page.locator("#tree").bounding_box()
    assert list_box is not None and tree_box is not None
    beside = list_box["x"] + list_box["width"] <= tree_box["x"]
    assert beside == (width > 640)  # the two layouts the words are for
    context.close()


@pytest.mark.parametrize("width", [320, 360, 375])
def test_the_prompt_s_placeholder_fits_its_box_on_a_phone(
    browser: Browser, served: tuple[Served, str, dict[str, str]], width: int
) -> None:
    """At a phone's width the empty prompt's placeholder, "Continue the session from the
    leaf…", broke onto a second line that its one-line box showed half of. It fits on one."""
    server, session_id, _ = served
    context = browser.new_context(viewport={"width": width, "height": 700})
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    prompt = page.locator("#prompt-text")
    expect(prompt).to_be_visible()
    expect(prompt).to_have_value("")
    # the placeholder's lines are the empty box's content: more than one overflows it
    overflow = "(e) => e.scrollHeight - e.clientHeight"
    assert prompt.evaluate(overflow) <= 0, prompt.get_attribute("placeholder")
    context.close()


SPEC_NAMES = {
    "ui/initialize": "McpUiInitializeRequest",
    "ui/notifications/initialized": "McpUiInitializedNotification",
    "ui/notifications/size-changed": "McpUiSizeChangedNotification",
}


def check_against_the_spec(log: list[dict[str, Any]], result: dict[str, Any]) -> None:
    """What the view sent, and the tool result a host hands it, against the ext-apps spec's
    schema, when the package is installed (it is how the spec ships its schema)."""
    if not APPS_SCHEMA.exists():
        return

    def check(message: dict[str, Any], name: str) -> None:
        bare = {key: value for key, value in message.items() if key not in ("jsonrpc", "id")}
        spec_check(bare, name)

    seen = set()
    for message in log:
        name = SPEC_NAMES.get(message.get("method", ""))
        if name is not None:
            check(message, name)
            seen.add(name)
    assert seen == set(SPEC_NAMES.values())
    check(
        {"method": "ui/notifications/tool-result", "params": result}, "McpUiToolResultNotification"
    )


def test_a_live_update_does_not_read_the_selected_entry_again(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """An entry never changes once written: the one on show (megabytes, maybe) is not read
    and drawn again at each change another client makes."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    entry_reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            entry_reads.append(request.post_data or "")
            if request.url.endswith("/mcp") and '"entry_id"' in (request.post_data or "")
            else None
        ),
    )
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    tree = page.locator("#tree")
    tree.locator(f".row[data-id='{ids['leaf']}']").click()
    expect(page.locator("#detail-title")).to_contain_text(ids["leaf"])
    assert len(entry_reads) == 1
    appended = mcp_tool(
        server.url,
        TOKEN,
        "session_append",
        session_id=session_id,
        entry={"type": "message", "role": "user", "content": "One more thing"},
    )
    new_id = appended["structuredContent"]["entryId"]
    expect(tree.locator(f".row[data-id='{new_id}']")).to_be_visible()
    expect(page.locator("#detail-title")).not_to_contain_text("leaf")  # no longer the leaf
    assert len(entry_reads) == 1
    context.close()


def held_listen(page: Page) -> list[Any]:
    """The page's first request to listen, held (not sent on) until the test continues it;
    each later request passes."""
    held: list[Any] = []

    def hold(route: Any) -> None:
        body = json.loads(route.request.post_data or "{}")
        if body.get("method") == "subscriptions/listen" and not held:
            held.append(route)
        else:
            route.continue_()

    page.route("**/mcp", hold)
    return held


def until_held(page: Page, held: list[Any], what: str) -> None:
    """Once the page's request is ``held`` (``what`` it is, for the failure)."""

    def asked() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return bool(held)

    poll(asked, f"{what} was never asked for")


def test_a_live_update_while_the_entry_is_read_leaves_it_to_that_read(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A change heard while a clicked entry was being read read it a second time (megabytes,
    maybe): the update saw no entry on show yet and asked for it too."""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    expect(page.locator("#live")).to_have_class("live on")
    entry_reads: list[str] = []
    held: list[Any] = []

    def hold(route: Any) -> None:
        if '"entry_id"' in (route.request.post_data or ""):
            entry_reads.append(route.request.post_data or "")
            if not held:
                held.append(route)
                return
        route.continue_()

    page.route("**/mcp", hold)
    tree = page.locator("#tree")
    tree.locator(f".row[data-id='{ids['leaf']}']").click()
    until_held(page, held, "the entry")
    entry = {"type": "message", "role": "user", "content": "One more thing"}
    appended = mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=entry)
    expect(
        tree.locator(f".row[data-id='{appended['structuredContent']['entryId']}']")
    ).to_be_visible()
    held[0].continue_()
    expect(page.locator("#detail-title")).to_contain_text(ids["leaf"])
    assert len(entry_reads) == 1, entry_reads
    context.close()


def test_what_changed_before_the_page_listened_is_shown(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """The page read a session, then asked to listen for its changes: a change made between
    the two (an agent's last append, a session another client made or deleted) was never
    shown, while the page said it was live. It reads once it listens, and reads the list
    (read meanwhile) again."""
    server, session_id, _ = served
    context = browser.new_context()
    page = context.new_page()
    held = held_listen(page)
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    until_held(page, held, "the stream")
    entry = {"type": "message", "role": "user", "content": "Written before the page listened"}
    mcp_tool(server.url, TOKEN, "session_append", session_id=session_id, entry=entry)
    mcp_tool(server.url, TOKEN, "session_create", name="Made before the page listened")
    held[0].continue_()
    expect(page.locator("#live")).to_have_class("live on")
    expect(page.get_by_role("heading", level=1)).to_have_text("Picnic plans")
    expect(page.locator("#tree")).to_contain_text("Written before the page listened")
    expect(page.locator("#sessions")).to_contain_text("Made before the page listened")

    # The list alone (no session open) is read again as well.
    alone = browser.new_context().new_page()
    held = held_listen(alone)
    alone.goto(f"{base(server)}/#token={TOKEN}")
    expect(alone.locator("#sessions .session")).to_have_count(2)
    until_held(alone, held, "the stream")
    mcp_tool(server.url, TOKEN, "session_create", name="Made before the list listened")
    held[0].continue_()
    expect(alone.locator("#live")).to_have_class("live on")
    expect(alone.locator("#sessions")).to_contain_text("Made before the list listened")
    alone.context.close()
    context.close()


def test_a_session_deleted_while_open_is_said_to_be_gone(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    server, session_id, _ = served
    doomed = mcp_tool(server.url, TOKEN, "session_create", name="Short-lived")
    doomed_id = doomed["structuredContent"]["id"]
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={doomed_id}")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("Short-lived")
    mcp_tool(server.url, TOKEN, "session_delete", session_id=doomed_id)
    expect(heading).to_have_text("Session not found")
    expect(page.locator("#tree")).to_contain_text("not here (deleted, or never was)")
    expect(page.locator("#sessions")).not_to_contain_text("Short-lived")
    # A link to a session that never was says the same, and the page goes on working.
    page.goto(f"{base(server)}/#session=01a00000-0000-7000-8000-00000000beef")
    expect(heading).to_have_text("Session not found")
    page.locator(".session", has_text="Picnic plans").click()
    expect(heading).to_contain_text("Picnic plans")
    assert session_id in page.url
    context.close()


def test_a_session_is_said_to_be_gone_whatever_its_id_and_whoever_deleted_it(
    browser: Browser, served: tuple[Served, str, dict[str, str]], shared: tuple[Served, Path]
) -> None:
    """The page knew a session gone by its id in the server's words, which cuts a long id and
    escapes control characters: such links showed a blank page and a passing error. A session
    another process deletes sent this server no notification: the next click said so in a
    passing error and the page went on showing the session. (It now hears of the deletion
    too, tests/test_notify_others.py: the click may come before or after it does.)"""
    server, session_id, ids = served
    context = browser.new_context()
    page = context.new_page()
    heading = page.get_by_role("heading", level=1)
    for wanted, shown in [("x%0Ay", "x y"), ("%E2%80%AE" + "a" * 300, "\\u202e" + "a" * 98 + "…")]:
        page.goto(f"{base(server)}/#token={TOKEN}&session={wanted}")
        expect(heading).to_have_text("Session not found")
        expect(page.locator("#session-id")).to_have_text(shown)
    page.goto(f"{base(server)}/#session={session_id}")
    expect(heading).to_contain_text("Picnic plans")
    with SqliteSessionRepo(shared[1]) as repo:
        repo.delete(session_id)
    # A click on the session, unless the page heard of the deletion first (then no row is
    # left to click: a click waiting for it timed out): either way, it says so.
    page.evaluate(
        "id => document.querySelector(`#tree .row[data-id='${id}']`)?.click()", ids["leaf"]
    )
    expect(heading).to_have_text("Session not found")
    expect(page.locator("#tree")).to_contain_text("not here (deleted, or never was)")
    context.close()


def test_a_rename_from_the_command_line_shows_on_the_open_page(
    browser: Browser, served: tuple[Served, str, dict[str, str]], shared: tuple[Served, Path]
) -> None:
    """The terminal's `sessions rename`, a process of its own on the served file, shows on the
    page that has the session open, in its heading and in the list, with no reload."""
    server, session_id, _ = served
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={session_id}")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("Picnic plans")
    command = [sys.executable, "-m", "mcp_agent", "sessions", "rename", session_id, "Beach day"]
    done = subprocess.run(
        [*command, "--db", str(shared[1])], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expect(heading).to_contain_text("Beach day")
    expect(page.locator("#sessions")).to_contain_text("Beach day")
    context.close()


def test_bidirectional_overrides_are_shown_not_obeyed(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """An override reverses what follows it ("run \\u202erm -rf /" reads "run / fr- mr"): the
    page shows it as an escape, in names, the list, the tree and an entry's content."""
    server, _, _ = served
    made = mcp_tool(server.url, TOKEN, "session_create", name="\u202eko-enod")
    sid = made["structuredContent"]["id"]
    said = "please run \u202erm -rf /\u202c now"
    appended = mcp_tool(
        server.url,
        TOKEN,
        "session_append",
        session_id=sid,
        entry={"type": "message", "role": "user", "content": said},
    )
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={sid}")
    expect(page.get_by_role("heading", level=1)).to_have_text("\\u202eko-enod")
    expect(page.locator("#sessions")).to_contain_text("\\u202eko-enod")
    row = page.locator(f"#tree .row[data-id='{appended['structuredContent']['entryId']}']")
    row.click()
    expect(page.locator("#detail-body")).to_contain_text("please run \\u202erm -rf /\\u202c now")
    for where in ("#sessions", "#tree", "#detail-body", "#session-name"):
        assert "\u202e" not in page.locator(where).inner_text(), where
    context.close()


def test_a_parent_named_by_its_file_is_shown_by_its_id(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """pi's header names the parent's file: the page showed its path's first 8 characters
    ("/home/ro"). And a cwd is shown as names are, with its overrides escaped."""
    server, _, _ = served
    parent = "01a00000-0000-7000-8000-00000000abcd"
    header = {
        "type": "session",
        "version": 3,
        "id": "01a00000-0000-7000-8000-0000000000fe",
        "timestamp": "2026-01-01T10:00:00.000Z",
        "cwd": "/home/ro/\u202ecrs",
        "parentSession": f"/home/ro/.pi/agent/sessions/--home-ro--/2026-01-01T09-00-00-000Z_{parent}.jsonl",
    }
    made = mcp_tool(server.url, TOKEN, "session_import", jsonl=json.dumps(header) + "\n")
    sid = made["structuredContent"]["session"]["id"]
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={sid}")
    facts = page.locator("#session-facts")
    expect(facts).to_contain_text(f"forked from {parent[:8]}")
    expect(facts).to_contain_text("/home/ro/\\u202ecrs")
    assert "\u202e" not in facts.inner_text()
    context.close()


def test_a_subagents_session_says_who_started_it(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """A sub-agent's session read "forked from" its parent: it says the session and run that
    started it; a fork of it still reads as a fork."""
    server, _, _ = served
    parent = "01a00000-0000-7000-8000-00000000abcd"
    origin = {"sessionId": parent, "runId": "5e1f00c0ffee"}
    header = {
        "type": "session",
        "version": 3,
        "id": "01a00000-0000-7000-8000-0000000000fd",
        "timestamp": "2026-01-01T10:00:00.000Z",
        "cwd": "/work",
        "parentSession": parent,
        "metadata": {"agent": "default", "startedBy": origin},
    }
    made = mcp_tool(server.url, TOKEN, "session_import", jsonl=json.dumps(header) + "\n")
    sid = made["structuredContent"]["session"]["id"]
    fork = mcp_tool(server.url, TOKEN, "session_fork", session_id=sid)["structuredContent"]["id"]
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={sid}")
    facts = page.locator("#session-facts")
    expect(facts).to_contain_text(
        f"a sub-agent's session, started by {parent[:8]} (run 5e1f00c0ffee)"
    )
    assert "forked from" not in facts.inner_text()
    page.goto(f"{base(server)}/#token={TOKEN}&session={fork}")
    expect(facts).to_contain_text(f"forked from {sid[:8]}")
    context.close()


def is_outline_read(request: Any) -> bool:
    return bool(request.url.endswith("/mcp") and request.headers.get("mcp-name") == "session_get")


def test_live_updates_read_what_was_shown_and_one_at_a_time(
    long_branch: tuple[Served, str, Page],
) -> None:
    server, session_id, page = long_branch
    tree = page.locator("#tree")
    rows = tree.locator(".row")
    shown = rows.count()
    # Each append adds a row, and an update reads as many as were shown and the new one:
    # pages read whole overshot by up to a page, which the next update took for what was
    # shown, so rows shown (and reads) grew by a page at each update.
    for count in (1, 2):
        appended = mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)
        expect(tree.locator(f".row[data-id='{entry_id(appended)}']")).to_be_visible()
        expect(rows).to_have_count(shown + count)
    # Changes heard while an update reads wait for it, all of them in one more update:
    # updates overlapped (up to 18 reads at once with an append every 0.5 s).
    held: list[Any] = []
    holding = [True]

    def hold(route: Any) -> None:
        if holding[0] and is_outline_read(route.request):
            held.append(route)
        else:
            route.continue_()

    page.route("**/mcp", hold)
    mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)

    def update_began() -> bool:
        page.wait_for_timeout(50)  # the page's requests are heard while it waits
        return bool(held)

    poll(update_began, "no update began")
    for _ in range(2):
        last = mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)
        page.wait_for_timeout(300)  # each heard and its update asked for (120 ms later)
    assert len(held) == 1  # the update under way alone reads
    holding[0] = False
    for route in held:
        route.continue_()
    # the last change shows (five in a row: six would fold)
    expect(tree.locator(f".row[data-id='{entry_id(last)}']")).to_be_visible()
    expect(rows).to_have_count(shown + 5)


def unfolded(browser: Browser, server: Served, said: list[str]) -> tuple[Any, Any]:
    """A new session of the user messages ``said`` (enough to fold), opened in a new page
    with its fold opened: the page's context and its tree."""
    sid = mcp_tool(server.url, TOKEN, "session_create", name="unfolded")["structuredContent"]["id"]
    for text in said:
        entry = {"type": "message", "role": "user", "content": text}
        mcp_tool(server.url, TOKEN, "session_append", session_id=sid, entry=entry)
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={sid}")
    tree = page.locator("#tree")
    tree.locator(".fold").click()
    expect(tree.locator(".fold")).to_have_count(0)
    return context, tree


def test_bidirectional_overrides_in_unfolded_rows_are_shown_not_obeyed(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """Rows revealed by unfolding are made in the page from the entries read whole: their text
    and their title (the whole preview on hover) show an override as an escape, as the
    outline's rows do (the title held the override itself)."""
    context, tree = unfolded(browser, served[0], [f"run \u202erm -rf / {i}" for i in range(12)])
    expect(tree.locator(".row", has_text="rm -rf")).to_have_count(12)
    texts = tree.locator(".row .text").evaluate_all(
        "spans => spans.map((span) => [span.textContent, span.title])"
    )
    assert all("\u202e" not in text + title for text, title in texts), texts
    titles = [title for _, title in texts if "rm -rf" in title]
    assert len(titles) == 12 and all("run \\u202erm -rf" in title for title in titles), texts
    context.close()


def test_an_emoji_where_an_unfolded_row_is_cut_is_shown_whole(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """An unfolded row's text (read whole, cut to 120 characters in the page) was cut by
    UTF-16 units: an emoji at the cut was split in half, and the row ended in a replacement
    character (and its name to a screen reader in half a character). It is cut by
    characters, as the server cuts the outline's rows."""
    said = "a" * 118 + "🌸 and the rest"
    context, tree = unfolded(browser, served[0], [f"{said} {index}" for index in range(12)])
    rows = tree.locator(".row", has_text="aaaa")
    expect(rows).to_have_count(12)
    shown = rows.evaluate_all(
        "rows => rows.map((row) => row.querySelector('.text').textContent"
        " + row.getAttribute('aria-label'))"
    )
    halves = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")
    assert not [text for text in shown if halves.search(text)], shown
    assert all("🌸" in text for text in shown), shown
    context.close()


def test_an_entry_a_link_names_inside_a_fold_is_unfolded_to_in_the_tree(
    browser: Browser, open_served: tuple[Served, Path]
) -> None:
    """An address naming an entry inside a fold ("⋯ N more") showed the entry, but left the
    fold folded: the entry was nowhere in the tree. The fold is unfolded down to it, the row
    selected, and the fold says how many are left above it."""
    server, db = open_served
    session_id = chain_session(db, 300)
    page = browser.new_page()
    page.goto(f"{base(server)}/#session={session_id}&entry=e0000050")
    tree = page.locator("#tree")
    row = tree.locator(".row[data-id='e0000050']")
    expect(row).to_have_attribute("aria-selected", "true")
    expect(row).to_be_in_viewport()
    expect(page.locator("#detail-body")).to_contain_text("step 50")
    # the tree's one Tab stop is the entry the address named
    expect(tree.locator('[tabindex="0"]')).to_have_attribute("data-id", "e0000050")
    # revealed from it down to the leaf: 49 left folded above (e0000001 .. e0000049)
    expect(tree.locator(".fold")).to_have_text("⋯ 49 more entries")
    expect(tree.locator(".row")).to_have_count(251)
    page.close()


UNFOLD_TO_MOST = 1000  # viewer.js: the most entries a link reads up, or unfolds, to its entry


@pytest.mark.parametrize(
    ("entry", "where"), [(10, "inside a fold (⋯ more entries), 2,988 entries up"), (2990, "")]
)
def test_an_entry_a_link_names_deep_in_a_long_fold_is_said_to_be_there_not_unfolded_to(
    browser: Browser, open_served: tuple[Served, Path], entry: int, where: str
) -> None:
    """Unfolding down to an entry a link names read its fold whole: an entry near the top of
    a fold of 100,000 unfolded 100,000 rows (thousands of requests, the tab froze); near its
    bottom, the entry's path was read up 100,000 entries to find the fold. Both stop at
    UNFOLD_TO_MOST entries: past it the fold stays folded, the entry open, and its pane says
    where it is; a few requests, nothing in the console."""
    server, db = open_served
    session_id = chain_session(db, 3000)  # a fold of 2,998
    page = browser.new_page()
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    read = entry_read_limits(page)  # the reads of whole entries: the entry's, and up its path
    page.goto(f"{base(server)}/#session={session_id}&entry=e{entry:07d}")
    expect(page.locator("#detail-body")).to_contain_text(f"step {entry}")
    note = page.locator("#detail-where")
    expect(note).to_be_visible()
    expect(note).to_contain_text(where or f"more than {UNFOLD_TO_MOST:,} entries below")
    expect(note).to_contain_text("fold (⋯ more entries)")
    tree = page.locator("#tree")
    expect(tree.locator(".fold")).to_have_text("⋯ 2,998 more entries")
    assert tree.locator(".row").count() == 2
    # up its path no further than UNFOLD_TO_MOST entries (pages of about 40 KB: ~270 here)
    assert len(read) <= 8, read
    assert page.evaluate("1 + 1") == 2  # and the page answers
    # the reader clicks another entry: the note was of the one the link named
    tree.locator(".row[data-id='e0000000']").click()
    expect(page.locator("#detail-body")).to_contain_text("step 0")
    expect(note).to_be_hidden()
    assert not errors, errors
    page.close()


def test_a_message_past_what_one_answer_holds_is_shown_cut_then_read_in_pieces(
    browser: Browser, open_served: tuple[Served, Path]
) -> None:
    """A message over the 8 MiB one answer holds: the page asked for its resource anyway,
    which the server refuses (a 400 in the console), and offered no way to the rest. It shows
    the entry with its texts cut, and reads it whole in pieces (session_get with offset) when
    asked, saying how far it is (a piece refused, it can be asked again); nothing it asks for
    fails."""
    server, db = open_served
    said = "START " + "x" * (9 << 20) + " THE END"
    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="huge")
        session.append_message(User(content="before it"))
        huge = session.append_message(User(content=said))
    page = browser.new_page()
    refused: list[str] = []

    def said_error(message: Any) -> None:
        if message.type == "error":
            refused.append(message.text)

    def answered(response: Any) -> None:
        if response.status >= 400:
            refused.append(response.url)

    page.on("console", said_error)
    page.on("response", answered)
    pieces: list[int] = []

    def count_pieces(route: Any) -> None:
        body = json.loads(route.request.post_data or "{}")
        arguments = body.get("params", {}).get("arguments", {})
        if "offset" in arguments:
            pieces.append(arguments["offset"])
            if len(pieces) == 2:  # the second piece fails, once
                busy = {"isError": True, "content": [{"type": "text", "text": "busy: try again"}]}
                route.fulfill(json={"jsonrpc": "2.0", "id": body["id"], "result": busy})
                return
        route.continue_()

    page.route("**/mcp", count_pieces)
    page.goto(f"{base(server)}/#session={session.id}&entry={huge}")
    detail = page.locator("#detail-body")
    expect(detail).to_contain_text("Truncated:")
    expect(detail).to_contain_text("START xxx")
    read_all = detail.get_by_role("button", name=re.compile("^Read all of it"))
    expect(read_all).to_be_visible()
    assert "THE END" not in (detail.text_content() or "") and not pieces
    read_all.click()
    # a piece refused: said, and the button asks again (it stayed "Reading… 0%", disabled)
    expect(read_all).to_have_text("Read all of it")
    expect(read_all).to_be_enabled()
    read_all.click()
    expect(detail).to_contain_text("THE END", timeout=120_000)
    expect(detail).not_to_contain_text("Truncated:")
    assert pieces[0] == pieces[2] == 0 < pieces[1] == pieces[3], pieces[:4]
    assert len(pieces) > 200 and pieces[2:] == sorted(pieces[2:]), pieces[:4]
    assert not refused, refused
    page.close()


def test_a_live_update_reads_only_what_was_not_unfolded_already(
    browser: Browser, open_served: tuple[Served, Path]
) -> None:
    """Each live update read every entry the reader had unfolded again, whole: with 1,000
    entries of 4 KB unfolded, an append cost 336 requests and a minute, and the updates after
    it waited. An update reads the entries above the next row up to those shown already (an
    entry never changes), so the rows shown stay the same elements."""
    server, db = open_served
    session_id = chain_session(db, 300)
    page = browser.new_page()
    read = entry_read_limits(page)  # the limit of each read of whole entries
    page.goto(f"{base(server)}/#session={session_id}")
    tree = page.locator("#tree")
    fold = tree.locator(".fold")
    expect(fold).to_have_text("⋯ 298 more entries")
    fold.click()
    expect(fold).to_have_text("⋯ 98 more entries")
    expect(tree.locator(".row")).to_have_count(202)
    page.evaluate("document.querySelectorAll('#tree .row').forEach((row) => { row.kept = 1; })")
    read.clear()
    leaf = "e0000299"
    for count in (1, 2):
        appended = mcp_tool(server.url, "", "session_append", session_id=session_id, entry=NOTE)
        expect(tree.locator(f".row[data-id='{entry_id(appended)}']")).to_be_visible()
        # the old leaf is folded now: the 200 shown end right above the new one
        expect(fold).to_have_text(f"⋯ {98 + count} more entries")
        expect(tree.locator(".row")).to_have_count(202)
        rows = tree.locator(".row").evaluate_all("rows => rows.map((row) => row.dataset.id)")
        assert rows[-2:] == [leaf, entry_id(appended)], rows[-3:]
        leaf = entry_id(appended)
    assert 0 < sum(read) <= 40, read  # not the 200 shown, at each
    kept = page.evaluate(
        "[...document.querySelectorAll('#tree .row')].filter((r) => r.kept).length"
    )
    assert kept == 199, kept  # the rows shown before stay the same elements (but the oldest)
    page.close()


def star_session(path: Path, branches: int) -> str:
    """A session of a root and ``branches`` entries off it (a retry from the start each), the
    last the leaf; its id."""
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 3,
            "id": f"01a00000-0000-7000-8000-{next(SESSION_NUMBERS):012d}",
        }
    ]
    lines[0] |= {"timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
    for index in range(branches + 1):
        entry_id, parent = (f"b{index - 1:07d}", "r0000000") if index else ("r0000000", None)
        message = {"role": "user", "content": f"try {index}", "timestamp": 1}
        lines.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": message,
            }
        )
    file = path.with_suffix(".jsonl")
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with SqliteSessionRepo(path) as repo:
        return repo.import_jsonl(file).id


def test_earlier_rows_go_on_top_and_branches_of_an_unread_entry_stay_under_it(
    browser: Browser, open_served: tuple[Served, Path]
) -> None:
    # a root with 600 branches, the leaf on the last: its outline is the root, 599 heads and
    # the leaf, of which the page reads 300 rows, the root not among them
    server, db = open_served
    session_id = star_session(db, 600)
    page = browser.new_page()
    page.goto(f"{base(server)}/#session={session_id}")
    tree = page.locator("#tree")
    leaf = tree.locator(".row[data-id='b0000599']")
    expect(leaf).to_be_visible(timeout=30_000)
    rows = tree.locator(".row")
    shown = rows.count()
    # the heads shown are branches of the root, not read yet: under a line that stands for
    # it (they were drawn as roots of their own)
    elided = tree.locator(".elided[data-elided='r0000000']")
    expect(elided).to_have_count(1)
    expect(elided.locator(".row")).to_have_count(shown - 1)
    expect(tree.locator(".outline-top > .nest")).to_have_count(0)
    # Earlier rows go on top of those drawn, which stay as they were: every row was drawn
    # again at each click (2 to 4 s a click near 20,000 rows).
    page.evaluate("window.kept = document.querySelector(\"#tree .row[data-id='b0000599']\")")
    earlier = tree.locator(".earlier:not([data-branch])")
    # Each is a tree item (a button, or a line of text, in a tree is none of it to a screen
    # reader): "Show earlier entries" first, the line for the root, its branches a level down;
    # reached by the arrows and pressed with Enter.
    items = page.get_by_role("tree").get_by_role("treeitem")
    expect(items.nth(0)).to_have_accessible_name("Show earlier entries")
    expect(items.nth(1)).to_have_accessible_name(
        re.compile(r"an earlier entry: \d+ branches of it below$")
    )
    expect(items.nth(1)).to_have_attribute("aria-level", "1")
    expect(items.nth(2)).to_have_attribute("aria-level", "2")
    leaf.focus()
    page.keyboard.press("Home")
    expect(earlier).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(items.nth(1)).to_be_focused()
    page.keyboard.press("ArrowUp")
    before = rows.count()
    page.keyboard.press("Enter")
    expect(rows).not_to_have_count(before, timeout=30_000)
    for _ in range(10):
        if not earlier.count():
            break
        before = rows.count()
        earlier.click()
        expect(rows).not_to_have_count(before, timeout=30_000)
        assert page.evaluate("window.kept.isConnected")
    expect(earlier).to_have_count(0)
    expect(elided).to_have_count(0)
    ids = rows.evaluate_all("rows => rows.map((row) => row.dataset.id)")
    assert ids == ["r0000000", *(f"b{index:07d}" for index in range(600))]
    # the root names 20 of its children, and says how many it has
    expect(tree.locator(".row[data-id='r0000000'] .branch-count")).to_have_text("600 branches")
    # a branch opened and closed is drawn again alone
    head = tree.locator(".row[data-id='b0000000']")
    head.locator(".toggle").click()
    expect(tree.locator(".nest.open[data-head='b0000000']")).to_have_count(1)
    tree.locator(".row[data-id='b0000000'] .toggle").click()
    expect(tree.locator(".nest.open")).to_have_count(0)
    assert page.evaluate("window.kept.isConnected")
    page.close()


def test_an_entry_time_that_is_no_time_is_shown_as_written(
    browser: Browser, served: tuple[Served, str, dict[str, str]]
) -> None:
    """pi keeps an entry whose time is text that is no time ('yesterday'): the entry's pane
    said "Invalid Date" (``new Date(…).toLocaleString()``); it now shows the text as written,
    as the command line does."""
    server, _, _ = served
    sid = "01a00000-0000-7000-8000-0000000000fd"
    header = {"type": "session", "version": 3, "id": sid, "cwd": "/p"}
    header["timestamp"] = "2026-01-01T10:00:00.000Z"
    message = {"role": "user", "content": "when was this", "timestamp": 1}
    entry = {"type": "message", "id": "u0000001", "parentId": None, "message": message}
    entry["timestamp"] = "yesterday"
    jsonl = json.dumps(header) + "\n" + json.dumps(entry) + "\n"
    mcp_tool(server.url, TOKEN, "session_import", jsonl=jsonl)
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base(server)}/#token={TOKEN}&session={sid}&entry=u0000001")
    expect(page.locator("#detail-body")).to_contain_text("when was this")
    expect(page.locator("#detail-title")).to_contain_text("yesterday")
    assert "Invalid" not in page.locator("#detail-title").inner_text()
    context.close()
