"""The viewer page at ``/`` of a real ``serve --transport http`` process, over plain HTTP (no
browser): the page holds no data and is served behind the Host and Origin checks alone; the
token reaches it in the link's fragment and goes to ``/mcp`` as a bearer token, and nothing
else (no cookie) signs anyone in; the page's own headers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_support import HTTP_HEADERS, Served, poll
from viewer_support import PROTOCOL, mcp_request

TOKEN = "viewer-page-token-0123456789abcdef"
CALL = {"name": "session_list", "arguments": {}}


@pytest.fixture(name="server", scope="module")
def server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = Path(tmp_path_factory.mktemp("page"))
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    server = Served(tmp, "--token-file", str(token_file))
    yield server
    server.stop()


def root(server: Served) -> str:
    return f"http://127.0.0.1:{server.port}/"


def test_the_page_holds_no_data_and_sets_no_cookie(server: Served) -> None:
    page = httpx.get(root(server))
    assert page.status_code == 200 and 'data-transport="http"' in page.text
    assert "set-cookie" not in page.headers
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "script-src 'sha256-" in policy and "unsafe" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    # An MCP client pointed at the root is told where the endpoint is, in a JSON-RPC error
    # it shows (the Python SDK's showed "Server returned an error response").
    posted = httpx.post(root(server), json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"
    assert posted.json()["error"]["message"] == (
        "Method Not Allowed: '/' is not this server's MCP endpoint, which is /mcp; this path"
        " serves the session viewer's page, read with GET"
    )


def test_an_older_token_link_is_the_page_its_token_checked(server: Served) -> None:
    """The page moves an older link's query to the fragment itself (a redirect to the fragment
    form replaced the link's own fragment, /?token=…#session=…, which no server sees)."""
    session = "01a00000-0000-7000-8000-0000000000aa"
    for query in ({"token": TOKEN}, {"token": TOKEN, "session": session}, {"session": "a b&c"}):
        link = httpx.get(root(server), params=query, follow_redirects=False)
        assert link.status_code == 200 and 'data-transport="http"' in link.text, query
        assert "set-cookie" not in link.headers
    for query in ({"token": "nope"}, {"token": "nope", "session": session}):
        wrong = httpx.get(root(server), params=query)
        assert wrong.status_code == 401 and "Wrong token" in wrong.text


def test_mcp_takes_the_bearer_token_and_nothing_else(server: Served) -> None:
    own = root(server).rstrip("/")
    assert mcp_request(server.url, "tools/call", CALL, TOKEN, Origin=own).status_code == 200
    assert mcp_request(server.url, "tools/call", CALL, TOKEN).status_code == 200
    # What a cookie of the old sign-in held, sent from the page's own origin: refused.
    for cookie in (f"mcp_agent_sessions_{server.port}={'0' * 64}", f"token={TOKEN}"):
        refused = mcp_request(server.url, "tools/call", CALL, Cookie=cookie, Origin=own)
        assert refused.status_code == 401, cookie
    # Another site's page is refused even with the token (a page on another local port has
    # no way to the token: it is kept in the page's own origin's storage).
    elsewhere = mcp_request(server.url, "tools/call", CALL, TOKEN, Origin="http://evil.example")
    assert elsewhere.status_code == 403


def test_the_page_keeps_the_host_and_origin_checks(server: Served) -> None:
    rebound = httpx.get(root(server), headers={"Host": "attacker.example"})
    assert rebound.status_code == 421
    elsewhere = httpx.get(root(server), headers={"Origin": "http://evil.example"})
    assert elsewhere.status_code == 403


def test_without_auth_the_page_is_open_on_loopback(tmp_path: Path) -> None:
    server = Served(tmp_path, "--no-auth")
    try:
        page = httpx.get(root(server))
        assert page.status_code == 200 and 'data-transport="http"' in page.text
        assert mcp_request(server.url, "tools/call", CALL).status_code == 200
    finally:
        server.stop()


def test_stopping_the_server_ends_open_listen_streams(tmp_path: Path) -> None:
    # A viewer page left open holds a subscriptions/listen stream: stopping the server ends
    # it gracefully (its final result frame) instead of waiting for the page to go away.
    server = Served(tmp_path, "--no-auth")
    frames: list[str] = []
    listening = threading.Event()

    def listen() -> None:
        body = listen_request()
        with httpx.stream("POST", server.url, **body, timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    frames.append(line)
                    listening.set()

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    try:
        assert listening.wait(60), "the listen stream was never acknowledged"
        server.process.terminate()
        poll(lambda: server.process.poll() is not None or None, "serve never stopped", tries=300)
        reader.join(30)
        assert not reader.is_alive()
        assert '"result"' in frames[-1] and "acknowledged" in frames[0]
    finally:
        if server.process.poll() is None:
            server.stop()


def listen_request() -> dict[str, Any]:
    """The keyword arguments of a subscriptions/listen POST, as the page sends it."""
    body = {
        "jsonrpc": "2.0",
        "id": "listen-1",
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"resourcesListChanged": True},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        **HTTP_HEADERS,
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "subscriptions/listen",
    }
    return {"json": body, "headers": headers}
