"""What every browser test shares: Debian's chromium driven by Playwright, offline, one per session.

Playwright's own browser download cannot work here, so the suite launches the system chromium
with flags that keep it from calling home. Outside CI a browser test is skipped when chromium is
missing; in CI (``CI=true``) it never is — scripts/test.sh installs chromium.

One chromium serves a whole test session (each pytest-xdist worker its own); each test gets a
fresh browser context (cookies, storage and cache of its own) and a page in it. Playwright's sync
API runs an asyncio event loop in the thread that started it and leaves that loop marked as
running between calls: in the test's thread, every Django ORM call would then raise
``SynchronousOnlyOperation`` for the rest of the session (and, with the check switched off,
open a connection per asyncio context instead of using the thread's). So Playwright lives in a
thread of its own (:class:`BrowserThread`), and the test holds :class:`Remote` proxies whose
every call runs there: the test's thread never sees an event loop, and its ORM calls use its
own connection as in any other test.

Every HTML document and htmx swap a page receives is checked for template syntax printed as
text (tests/template_leaks.py); a leak fails the test when its page closes.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.template_leaks import leak_report

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
#: A laptop's window: most browser tests' ``browser_page(viewport=…)``.
LAPTOP = {"width": 1366, "height": 900}

#: An endpoint's own page, to wait for after its form is sent. Not the glob ``/endpoints/*/``: the form's own
#: address, ``/endpoints/new/``, matches it, so the wait returned before the browser had left the form and the
#: endpoint was looked for before it was created (once in CI, with four workers on two cores).
AN_ENDPOINT_PAGE = re.compile(r".*/endpoints/\d+/$")
#: How long a page waits for an element or an event before it fails: Playwright's default. At 15 s a
#: live preview timed out once while the suite loaded both cores; a wait costs this only when it fails.
PAGE_TIMEOUT_MS = 30_000

#: ``pytestmark`` of a browser test module.
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and os.environ.get("CI", "").lower() != "true",
        reason=f"needs Debian's chromium at {CHROMIUM} (bash scripts/ensure_chromium.sh installs it; CI does)",
    ),
]


class BrowserThread:
    """Playwright and one chromium, driven from a thread of their own; :meth:`call` runs a function there.

    Calls run one at a time, in the order made. Events (a response, a dialog) are dispatched while
    a call waits, as with Playwright's sync API in any thread; their handlers run in this thread
    and get Playwright's own objects.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="playwright", daemon=True)
        self._thread.start()
        self._playwright = None
        self.browser = None
        try:
            self.call(self._launch)
        except BaseException:
            self.stop()
            raise

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, work = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as exc:  # handed to the caller, raised in its thread
                    future.set_exception(exc)

    def _launch(self) -> None:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

    def call(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``work(*args, **kwargs)`` run in the Playwright thread; its result, or its exception raised here."""
        if threading.current_thread() is self._thread:  # a handler calling back: already there
            return work(*args, **kwargs)
        if not self._thread.is_alive():
            raise RuntimeError("the Playwright thread has stopped")
        future: Future = Future()
        self._jobs.put((future, lambda: work(*args, **kwargs)))
        return future.result()

    def new_page(self, viewport: dict[str, int] | None = None) -> Remote:
        """A page in a fresh browser context: nothing of an earlier test's cookies, storage or cache."""

        def open_page():
            context = self.browser.new_context(viewport=viewport) if viewport else self.browser.new_context()
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            return context.new_page()

        return Remote(self.call(open_page), self)

    def stop(self) -> None:
        """Close chromium and the Playwright driver (whose exit ends any chromium process left), end the thread."""

        def close() -> None:
            try:
                if self.browser is not None:
                    self.browser.close()
            finally:
                if self._playwright is not None:
                    self._playwright.stop()

        if self._thread.is_alive():
            try:
                self.call(close)
            finally:
                self._jobs.put(None)
                self._thread.join(timeout=30)


def _is_playwright(value: object) -> bool:
    return type(value).__module__.startswith("playwright.")


class Remote:
    """A Playwright object (page, locator, response…) used from the test's thread: each use runs in the Playwright thread.

    Attribute reads, calls, ``with`` blocks and ``repr`` are carried over; what comes back is wrapped again
    when it is a Playwright object (or a list of them), and plain values (text, numbers, dicts) come as
    they are. Attributes set on the proxy stay on it (a test's own notes, such as a list a handler fills).
    """

    def __init__(self, target: object, thread: BrowserThread) -> None:
        self._target = target
        self._thread = thread

    @property
    def target(self) -> Any:
        """The Playwright object itself: only for use inside the Playwright thread (:meth:`BrowserThread.call`)."""
        return self._target

    def _wrap(self, value: Any) -> Any:
        if _is_playwright(value):
            return Remote(value, self._thread)
        if isinstance(value, list) and any(_is_playwright(item) for item in value):
            return [self._wrap(item) for item in value]
        return value

    def _method(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(_unwrap(arg) for arg in args)
            kwargs = {key: _unwrap(arg) for key, arg in kwargs.items()}
            return self._wrap(self._thread.call(method, *args, **kwargs))

        return call

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._thread.call(getattr, self._target, name)
        if callable(value) and not _is_playwright(value):
            return self._method(value)
        return self._wrap(value)

    def __enter__(self) -> Any:
        return self._wrap(self._thread.call(self._target.__enter__))

    def __exit__(self, *exc_info: Any) -> Any:
        return self._thread.call(self._target.__exit__, *exc_info)

    def __repr__(self) -> str:
        return self._thread.call(repr, self._target)


def _unwrap(value: Any) -> Any:
    return value.target if isinstance(value, Remote) else value


def watch_for_template_leaks(page) -> list[str]:
    """Check each HTML response ``page`` receives (pages and htmx swaps); the problems found go in the list.

    ``page`` is Playwright's own: the handler runs in the Playwright thread.
    """
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


def evidence_folder() -> Path:
    return Path(os.environ.get("SLIPWAY_VAR_DIR", "var/test")) / "browser"


def save_evidence(item: pytest.Item, page: Remote) -> None:
    """After a failed test, write ``<test>.png`` and ``<test>.html`` of ``page`` (var/test/browser/)."""
    report = getattr(item, "rep_call", None)
    if report is None or not report.failed:
        return
    folder = evidence_folder()
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / item.name.replace("/", "_")
    try:
        page.screenshot(path=f"{stem}.png", full_page=True)
        Path(f"{stem}.html").write_text(page.content())
    except Exception as exc:  # a closed page: still say where the evidence would have been
        Path(f"{stem}.txt").write_text(f"no screenshot: {exc}")
