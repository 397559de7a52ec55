"""Settings of the test suite: the project's settings plus a test-only workload kind and a one-cluster sandbox."""

from portal.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.workloads.tinykind"]  # noqa: F405

#: One cluster in the single-pool format, the shape the suite's tests assume (see the file);
#: the tests of the bundled two-cluster inventory name sandbox/inventory.yaml themselves.
SLIPWAY_SANDBOX_INVENTORY = str(BASE_DIR / "tests" / "inventory.yaml")  # noqa: F405
