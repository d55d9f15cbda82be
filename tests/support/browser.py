"""Headless Chromium (Debian's package, nothing downloaded) driven by Playwright.

`browser` is a fixture (import it into a test module or conftest); `open_page` gives a tab
whose `shot(name)` keeps a full-page screenshot under $TEST_ARTIFACTS_DIR (default
var/test-artifacts, not committed), so a failure can be seen. TEST_SCREENSHOTS=off takes none:
CI sets it, since nobody opens a CI run's files and a full-page capture is about a fifth of a
browser test's CPU. Every check on the page runs either way.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR", "var/test-artifacts"))
SCREENSHOTS = os.environ.get("TEST_SCREENSHOTS", "on") != "off"
# Debian's Chromium in a closed network: no background fetches, no sandbox as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 375, "height": 812}

HAS_CHROMIUM = shutil.which(CHROMIUM) is not None
# CI (TEST_REQUIRE_SERVICES=1) installs Chromium and skips nothing: a missing one fails there.
requires_chromium = pytest.mark.skipif(
    not HAS_CHROMIUM and os.environ.get("TEST_REQUIRE_SERVICES") != "1",
    reason=f"needs Chromium at {CHROMIUM} (Debian package chromium)",
)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; the test's own
    # database reads in between are plain synchronous calls, never inside that loop.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def open_page(browser, shots: Path, *, viewport: dict = DESKTOP):
    """A tab in a fresh context; `tab.shot(name)` saves a screenshot in `shots` (unless
    TEST_SCREENSHOTS=off)."""
    context = browser.new_context(viewport=viewport)
    tab = context.new_page()
    shots.mkdir(parents=True, exist_ok=True)

    def shot(name: str) -> None:
        if SCREENSHOTS:
            tab.screenshot(path=str(shots / f"{name}.png"), full_page=True)

    tab.shot = shot
    return tab
