"""A model request through the proxy the environment names (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
NO_PROXY), against a real loopback proxy (``ScriptServer`` reads a proxy's request, the
CONNECT of an https URL among them): an error met on the way names the proxy and its variable,
never the server it was to reach as the one that failed."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import pytest
from narrow import present
from providers_support import (
    Reply,
    collect,
    model_at,
    oa_text_reply,
    options,
    script_server,
    user_context,
)

from mcp_agent.messages import StopReason
from mcp_agent.providers.anthropic import stream_anthropic
from mcp_agent.providers.openai_compat import stream_openai_compat

pytestmark = pytest.mark.anyio

_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_of_the_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    yield


def openai(base_url: str) -> Any:
    return stream_openai_compat(model_at(base_url), user_context(), options(api_key="sk-test"))


async def closed_port() -> int:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port: int = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # the port is free: nothing listens there
    return port


async def test_a_proxy_that_is_down_is_named_not_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = await closed_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://bob:hunter2@127.0.0.1:{port}")
    _, final = await collect(openai("https://api.example.com/v1"))
    error = present(final.error_message)
    assert final.stop_reason == StopReason.ERROR
    assert (
        f"could not connect to the proxy http://bob:***@127.0.0.1:{port} (HTTPS_PROXY)"
        f" (connection refused: nothing listens at 127.0.0.1:{port})"
    ) in error
    assert "NO_PROXY" in error
    assert "api.example.com:443" not in error  # the server was never tried
    assert "hunter2" not in error


async def test_a_proxy_asking_for_a_password_says_where_to_give_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    denied = Reply(
        status=407,
        headers={"proxy-authenticate": 'Basic realm="corp"'},
        content_type="text/html",
        body=[b"<html><body><h1>Proxy Authentication Required</h1></body></html>"],
    )
    async with script_server() as proxy:
        proxy.add(denied, denied)
        monkeypatch.setenv("https_proxy", proxy.base)  # the lower-case one, as often set
        _, https = await collect(openai("https://api.example.com/v1"))
        monkeypatch.setenv("HTTP_PROXY", proxy.base)
        _, plain = await collect(openai("http://model.internal:8000/v1"))
    assert [(r.method, r.path) for r in proxy.requests] == [
        ("CONNECT", "api.example.com:443"),  # the tunnel to the server, refused
        ("POST", "http://model.internal:8000/v1/chat/completions"),  # sent to the proxy
    ]
    error = present(https.error_message)
    assert f"the proxy {proxy.base} (https_proxy) did not open the way to the server (407" in error
    assert "give them in https_proxy (http://user:password@host:port)" in error
    error = present(plain.error_message)
    assert f"407 Proxy Authentication Required (through the proxy {proxy.base} (HTTP_PROXY;" in (
        error
    )
    assert "give them in HTTP_PROXY (http://user:password@host:port)" in error


async def test_a_proxys_own_error_page_says_it_came_through_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = b"<html><body><h1>502 Bad Gateway</h1><p>Cannot reach 127.0.0.1:11434</p></body></html>"
    async with script_server() as proxy:
        proxy.add(*[Reply(status=502, content_type="text/html", body=[page])] * 4)
        monkeypatch.setenv("HTTP_PROXY", proxy.base)
        model = model_at("http://localhost:11434", "llama3", api="anthropic-messages")
        _, final = await collect(stream_anthropic(model, user_context(), options(api_key="k")))
    error = present(final.error_message)
    assert f"502 Bad Gateway (through the proxy {proxy.base} (HTTP_PROXY;" in error
    assert "hosts named in NO_PROXY are reached without it" in error


async def test_a_host_in_no_proxy_is_reached_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{await closed_port()}")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    async with script_server() as server:
        server.add(oa_text_reply("direct"))
        _, final = await collect(openai(server.base + "/v1"))
    assert final.stop_reason == StopReason.STOP and final.text == "direct"


@pytest.mark.skipif(
    importlib.util.find_spec("socksio") is not None, reason="SOCKS support is installed"
)
async def test_a_socks_proxy_without_its_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    _, final = await collect(openai("http://127.0.0.1:1/v1"))
    error = present(final.error_message)
    assert "ALL_PROXY names a SOCKS proxy, which needs the socksio package" in error
    assert "unexpected error" not in error
