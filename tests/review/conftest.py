"""Real headless Chromium (Debian's), driven by Playwright, for the review page tests."""

from __future__ import annotations

import shutil

import pytest

from tests.services import require, require_module

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture
def browser():
    require_module("playwright")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    require(executable is not None, "Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


