"""What the browser tests stand on: the pages' rig (the real gateway over HTTP, the dev server,
a worker, the demo systems: `tests/gateway/test_pages.py`) and Debian's chromium, driven by
Playwright (no browser is downloaded: this machine cannot)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from scripts.ui_check import OFFLINE_FLAGS
from tests.gateway.test_pages import rig
from tests.tiers import SUBPROCESS, needs

CHROMIUM = Path("/usr/bin/chromium")
# Headless and offline: without these, Chromium keeps trying to reach Google's hosts, which this
# machine cannot.
CHROMIUM_FLAGS = OFFLINE_FLAGS

__all__ = ["browser", "chromium", "rig"]


@pytest.fixture
def chromium() -> Path:
    """Debian's chromium (`make install` installs it); the test is skipped without it."""
    if not CHROMIUM.exists():
        # `make install` installs it as root (as CI runs): missing then is a failure, not a skip.
        if os.geteuid() == 0:
            pytest.fail(f"no {CHROMIUM}: `make install` should have installed Debian's chromium")
        pytest.skip(f"no {CHROMIUM}: install Debian's chromium (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture
@needs(SUBPROCESS)
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    """Debian's chromium, headless, driven by Playwright, for the test."""
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_FLAGS
        )
        try:
            yield launched
        finally:
            await launched.close()
