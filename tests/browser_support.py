"""The system's Chromium driven by Playwright, for the viewer's browser tests: one browser per
module (``browser`` fixture), and the marks that skip a module, saying why, where either is
missing (nothing is downloaded: the browser is Debian's)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from mcp_support import Served

CHROMIUM = os.environ.get("MCP_AGENT_CHROMIUM", "/usr/bin/chromium")

try:
    from playwright.sync_api import Browser, Page, Request, expect, sync_playwright

    # How long an expectation waits for the page to get there (Playwright's default is 5 s): a
    # bound on waiting, not a measure of speed, and a shared CI machine's load needs more.
    expect.set_options(timeout=15_000)
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]

NEEDS_BROWSER = [
    pytest.mark.skipif(sync_playwright is None, reason="Python playwright is not installed"),
    pytest.mark.skipif(
        shutil.which(CHROMIUM) is None,
        reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
    ),
]


@pytest.fixture(name="browser", scope="module")
def browser_fixture() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


def pause_clock(page: Page) -> None:
    """Stop ``page``'s timers (its clock installed) until the test runs them (``run_for``).
    Installed, a page's clock goes on with the wall clock: a timer the test meant to run
    later (a retry, say) fired by itself while a loaded machine was slow at something else
    (a server's restart). The pause is a few seconds ahead of now, so that a slow round trip
    to the browser never asks its clock to go back (which Playwright refuses)."""
    page.clock.pause_at(datetime.now() + timedelta(seconds=5))


def base(server: Served) -> str:
    """Where ``server``'s viewer page is."""
    return f"http://127.0.0.1:{server.port}"


__all__ = [
    "CHROMIUM",
    "NEEDS_BROWSER",
    "Browser",
    "Page",
    "Request",
    "base",
    "browser_fixture",
    "expect",
    "pause_clock",
]
