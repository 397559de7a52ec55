"""Browser tests keep evidence (on a failure, the page's screenshot and HTML go to var/test/browser/) and share the demo world."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import call_command


@pytest.fixture
def demo(transactional_db, settings, monkeypatch):
    """The seeded demo (teams, users, work, history); no broker: publishes are dropped, the pages are what is tested."""
    settings.DEBUG = True  # seed_demo's guard against well-known passwords
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: True)
    with open(os.devnull, "w") as devnull:
        call_command("seed_demo", stdout=devnull)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def save_evidence(request, page) -> None:
    """After a failed test, write ``<test>.png`` and ``<test>.html`` of ``page``."""
    report = getattr(request.node, "rep_call", None)
    if report is None or not report.failed:
        return
    folder = Path(os.environ.get("SLIPWAY_VAR_DIR", "var/test")) / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / request.node.name.replace("/", "_")
    try:
        page.screenshot(path=f"{stem}.png", full_page=True)
        Path(f"{stem}.html").write_text(page.content())
    except Exception as exc:  # a closed page: still say where the evidence would have been
        Path(f"{stem}.txt").write_text(f"no screenshot: {exc}")
