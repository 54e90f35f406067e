"""The session viewer: one self-contained HTML page (``viewer.html`` with ``viewer.css`` and
``viewer.js`` put inline), served two ways: as an MCP App (``apps``: a ``ui://`` resource that
hosts render in a sandboxed frame) and as the HTTP server's own page at ``/`` (``page``).

The three files are the source, readable as they are; nothing is built at install time. The
page loads nothing from the network: everything it shows comes through MCP tools."""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib.resources import files
from typing import Literal

Transport = Literal["http", "app"]


def _source(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


@cache
def _parts() -> tuple[str, str, str]:
    return _source("viewer.html"), _source("viewer.css"), _source("viewer.js")


@cache
def viewer_html(transport: Transport) -> str:
    """The page, for the HTTP server (``http``) or as an MCP App (``app``)."""
    html, css, js = _parts()
    # Replaced in one pass, so text in the CSS or JS that looks like a slot stays as it is.
    slots = {"{{TRANSPORT}}": transport, "{{CSS}}": css, "{{JS}}": js}
    out: list[str] = []
    rest = html
    while rest:
        found = [(rest.find(slot), slot) for slot in slots if slot in rest]
        if not found:
            out.append(rest)
            break
        at, slot = min(found)
        out.append(rest[:at] + slots[slot])
        rest = rest[at + len(slot) :]
    return "".join(out)


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@cache
def content_security_policy() -> str:
    """The page's CSP: its own inline script and style by hash, requests to this origin only,
    images only from data: URLs (images inside messages), and never framed."""
    _, css, js = _parts()
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {_digest(js)}",
            f"style-src {_digest(css)}",
            "img-src data:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
