"""The demo world of the browser tests: seeded once per session (each xdist worker its own), put back for each test.

The browser fixtures themselves (one chromium per session, a fresh context and page per test,
the evidence kept on a failure) are in tests/conftest.py: browser tests live beside their
feature too (tests/jobs, tests/sso).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import date

import pytest
from django.core.management import call_command
from django.utils import timezone

from tests.db_snapshot import TableSnapshot


class DemoWorld:
    """``seed_demo``'s rows, snapshotted the first time a test asks for them and restored afterwards.

    The demo's times are relative to when it was seeded: its history is the two weeks before that
    day's midnight, its runs were submitted "now". A restored demo is then as old as the session
    (minutes), which no test reads; on a new day (and so possibly a new month, which the usage
    pages count by) it is seeded again rather than restored.
    """

    def __init__(self) -> None:
        self.snapshot = TableSnapshot("demo")
        self.seeded_on: date | None = None

    def put_in_place(self) -> None:
        today = timezone.localdate()
        if self.snapshot.taken and self.seeded_on == today:
            self.snapshot.restore()
            return
        with open(os.devnull, "w") as devnull:
            call_command("seed_demo", stdout=devnull)
        self.snapshot.take()
        self.seeded_on = today


@pytest.fixture(scope="session")
def demo_world(django_db_setup, django_db_blocker) -> Iterator[DemoWorld]:
    world = DemoWorld()
    yield world
    with django_db_blocker.unblock():
        world.snapshot.drop()


@pytest.fixture
def demo(demo_world, transactional_db, settings, monkeypatch) -> None:
    """The seeded demo (teams, users, work, history); no broker: publishes are dropped, the pages are what is tested."""
    settings.DEBUG = True  # seed_demo's guard against well-known passwords
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: True)
    demo_world.put_in_place()
