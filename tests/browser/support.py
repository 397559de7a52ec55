"""What every browser test shares: Debian's chromium driven by Playwright, offline.

Playwright's own browser download cannot work here, so tests launch the system chromium
with flags that keep it from calling home. Outside CI a browser test is skipped when
chromium is missing; in CI (``CI=true``) it never is — scripts/test.sh installs chromium.

Every HTML document and htmx swap a page receives is checked for template syntax printed as
text (tests/template_leaks.py); a leak fails the test when its page closes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.template_leaks import leak_report

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


def watch_for_template_leaks(page) -> list[str]:
    """Check each HTML response ``page`` receives (pages and htmx swaps); the problems found go in the list."""
    problems: list[str] = []

    def check(response) -> None:
        if not response.headers.get("content-type", "").startswith("text/html") or 300 <= response.status < 400:
            return
        try:
            html = response.text()
        except Exception:  # a body already gone (the page navigated on): nothing to check
            return
        problem = leak_report(f"{response.request.method} {response.url} ({response.status})", html)
        if problem:
            problems.append(problem)

    page.on("response", check)
    return problems


@contextlib.contextmanager
def chromium_page(monkeypatch) -> Iterator:
    """A fresh Playwright page in headless chromium (closed afterwards); it fails if a page leaked template syntax."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; tests still use the ORM.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            leaks = watch_for_template_leaks(page)
            yield page
            assert not leaks, "\n".join(leaks)
        finally:
            # While Playwright's loop runs, Django keys its connections by context, not by
            # thread: ORM calls made here opened a connection of their own. Close it here, or
            # it outlives the test and blocks dropping the test database.
            from django.db import connections

            connections.close_all()
            browser.close()
