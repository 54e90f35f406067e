"""The proxy a model request goes through, read from the environment as httpx reads it
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, either case), so that an error
met on the way says the proxy, not the server it was to reach: a proxy that is down, that
asks for a password (407), or that could not reach the server."""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from mcp_agent.paths import shown_url

# Said after each error met through a proxy: how to go around it.
NO_PROXY_HINT = "hosts named in NO_PROXY are reached without it"


@dataclass(frozen=True)
class Proxy:
    url: str  # as shown: no password
    variable: str  # the environment variable that names it: "HTTPS_PROXY"

    @property
    def said(self) -> str:
        """How an answer that came through it says so (its 502 page may be the proxy's)."""
        return f"through the proxy {self.url} ({self.variable}; {NO_PROXY_HINT})"


def _variable(scheme: str) -> str:
    """The variable that set the proxy of ``scheme`` ("https"); the lower-case one wins,
    as urllib reads them. Without either, the proxy is the system's (urllib reads macOS's
    and Windows' settings)."""
    lower = f"{scheme}_proxy"
    if os.environ.get(lower):
        return lower
    if os.environ.get(lower.upper()):
        return lower.upper()
    return "the system's proxy settings"


def proxy_for(url: str) -> Proxy | None:
    """The proxy httpx sends a request for ``url`` through, when its client reads the
    environment (the default); None for a direct connection (or when httpx's own reading of
    the environment cannot be found: then errors say no proxy, as before)."""
    try:  # httpx's own rules, so that what is said is what it does (NO_PROXY's patterns)
        from httpx._utils import URLPattern, get_environment_proxies
    except ImportError:  # pragma: no cover - a future httpx
        return None
    try:
        target = httpx.URL(url)
        mounts = sorted(
            ((URLPattern(key), proxy) for key, proxy in get_environment_proxies().items()),
            key=lambda mount: mount[0],
        )
    except (httpx.InvalidURL, ValueError, TypeError):
        return None
    for pattern, proxy in mounts:
        if pattern.matches(target):
            if proxy is None:
                return None
            scheme = pattern.pattern.partition("://")[0]
            return Proxy(shown_url(proxy), _variable(scheme))
    return None


def proxy_auth_hint(proxy: Proxy) -> str:
    scheme = proxy.url.partition("://")[0] or "http"
    return (
        f"the proxy asks for a user and password: give them in {proxy.variable}"
        f" ({scheme}://user:password@host:port)"
    )


def describe_proxy_error(where: str, proxy: Proxy, error: Exception, detail: str) -> str:
    """A request that did not get past its proxy: the proxy refused the tunnel to the
    server (``httpx.ProxyError``, its status in ``detail``), or could not be reached."""
    through = f"the proxy {proxy.url} ({proxy.variable})"
    if isinstance(error, httpx.ProxyError):
        said = f"{where}: {through} did not open the way to the server ({detail})"
        if detail.startswith("407"):
            return f"{said} — {proxy_auth_hint(proxy)}"
        return f"{said} — may it reach the server's host? ({NO_PROXY_HINT})"
    return (
        f"{where}: could not connect to {through} ({detail}) — is the proxy running and"
        f" {proxy.variable} right? ({NO_PROXY_HINT})"
    )


def socks_proxy_missing(where: str, error: ImportError) -> str | None:
    """What to do when the environment names a SOCKS proxy and httpx's SOCKS support is not
    installed (the client cannot even be made, whatever host a request goes to); None for
    any other ImportError."""
    if "socks" not in str(error).lower():
        return None
    named = [
        name
        for upper in ("ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY")
        for name in (upper.lower(), upper)
        if os.environ.get(name, "").strip().lower().startswith("socks")
    ]
    which = " and ".join(named) or "a proxy variable"
    return (
        f"{where}: {which} names a SOCKS proxy, which needs the socksio package:"
        f" install it (pip install socksio) or unset {which}"
    )
