"""The viewer page at ``/`` of a real ``serve --transport http`` process, over plain HTTP (no
browser): the one-time token link, the cookie it sets and where ``/mcp`` accepts it, the Host
and Origin checks, and the page's own headers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_support import HTTP_HEADERS, Served, free_port, poll
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


def signed_in(server: Served) -> str:
    """The Cookie header the token link hands out."""
    link = httpx.get(root(server), params={"token": TOKEN}, follow_redirects=False)
    assert link.status_code == 303 and link.headers["location"] == "/"
    set_cookie = link.headers["set-cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie and "Path=/" in set_cookie
    name, _, rest = set_cookie.partition("=")
    value = rest.split(";")[0]
    assert name == f"mcp_agent_sessions_{server.port}" and TOKEN not in value
    return f"{name}={value}"


def test_the_page_without_the_token_shows_nothing(server: Served) -> None:
    bare = httpx.get(root(server))
    assert bare.status_code == 401 and "Sign in with the link" in bare.text
    assert "session_get" not in bare.text  # not the viewer
    wrong = httpx.get(root(server), params={"token": "nope"}, follow_redirects=False)
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert httpx.post(root(server)).status_code == 405


def test_the_token_link_signs_the_browser_in(server: Served) -> None:
    page = httpx.get(root(server), headers={"Cookie": signed_in(server)})
    assert page.status_code == 200 and 'data-transport="http"' in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "script-src 'sha256-" in policy and "unsafe" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"


def test_mcp_takes_the_cookie_only_from_the_page_own_origin(server: Served) -> None:
    jar = signed_in(server)
    own = root(server).rstrip("/")
    assert mcp_request(server.url, "tools/call", CALL, Cookie=jar, Origin=own).status_code == 200
    for origin in (f"http://127.0.0.1:{free_port()}", "http://evil.example", "null"):
        refused = mcp_request(server.url, "tools/call", CALL, Cookie=jar, Origin=origin)
        assert refused.status_code in (401, 403), origin
    assert mcp_request(server.url, "tools/call", CALL, Cookie=jar).status_code == 401
    forged = f"mcp_agent_sessions_{server.port}={'0' * 64}"
    assert mcp_request(server.url, "tools/call", CALL, Cookie=forged, Origin=own).status_code == 401
    assert mcp_request(server.url, "tools/call", CALL, TOKEN).status_code == 200


def test_the_page_keeps_the_host_and_origin_checks(server: Served) -> None:
    jar = signed_in(server)
    rebound = httpx.get(root(server), headers={"Cookie": jar, "Host": "attacker.example"})
    assert rebound.status_code == 421
    elsewhere = httpx.get(root(server), headers={"Cookie": jar, "Origin": "http://evil.example"})
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
