"""Settings of the test suite: the project's settings plus a test-only workload kind."""

from portal.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.workloads.tinykind"]  # noqa: F405
