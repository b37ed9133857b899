"""Browser tests: Playwright driving Debian's Chromium, which must be installed (they fail without it, never skip)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

#: Debian's Chromium; Playwright downloads no browser of its own here.
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Return the Chromium executable, or fail saying how to install it."""
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.fail(
            f"the browser tests need Chromium at {CHROMIUM}, which is missing: install it with "
            "'apt-get install -y --no-install-recommends chromium' (.ci/run does so when it is missing)",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    """Launch a headless Chromium for one test module."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            yield launched
        finally:
            launched.close()
