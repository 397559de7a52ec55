"""What every browser test shares: Debian's chromium driven by Playwright, offline.

Playwright's own browser download cannot work here, so tests launch the system chromium
with flags that keep it from calling home. Outside CI a browser test is skipped when
chromium is missing; in CI (``CI=true``) it never is — scripts/test.sh installs chromium.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

#: ``pytestmark`` of a browser test module.
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and os.environ.get("CI", "").lower() != "true",
        reason=f"needs Debian's chromium at {CHROMIUM} (bash scripts/ensure_chromium.sh installs it; CI does)",
    ),
]


@contextlib.contextmanager
def chromium_page(monkeypatch) -> Iterator:
    """A fresh Playwright page in headless chromium (closed afterwards)."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; tests still use the ORM.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            # While Playwright's loop runs, Django keys its connections by context, not by
            # thread: ORM calls made here opened a connection of their own. Close it here, or
            # it outlives the test and blocks dropping the test database.
            from django.db import connections

            connections.close_all()
            browser.close()
