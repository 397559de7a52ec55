"""Settings of the test suite: the project's settings plus the test-only workload kinds and a one-cluster sandbox.

Under pytest-xdist (scripts/test.sh runs the suite on several processes) each worker process has a
database of its own (pytest-django names it ``test_<name>_gw<N>``), and here a Redis database and
a var directory (and metrics directory) of its own: the end-to-end tests flush their Redis database and
start Celery workers on it, and the sandbox, the broker folders and the metrics files live under
the var directory; and a range of user ids of its own for its workspaces' local servers. Set in the
environment, so that the processes a test starts inherit the same ones.
"""

import os
from urllib.parse import urlsplit, urlunsplit


def _own_services_per_xdist_worker() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... (unset without xdist)
    # A process a test starts with these settings inherits the environment already set: once only.
    if not worker or os.environ.get("TESTS_SERVICES_OF_WORKER") == worker:
        return
    os.environ["TESTS_SERVICES_OF_WORKER"] = worker
    index = int(worker.removeprefix("gw"))
    if os.environ.get("REDIS_URL"):
        url = urlsplit(os.environ["REDIS_URL"])
        first = int(url.path.strip("/") or 0)
        os.environ["REDIS_URL"] = urlunsplit(url._replace(path=f"/{first + 1 + index}"))
    # The metrics files too: pytest-xdist's controller loaded these settings first and put its
    # directory into the environment the workers inherit (portal.env.export_multiproc_dir).
    for name in ("SLIPWAY_VAR_DIR", "PROMETHEUS_MULTIPROC_DIR"):
        if os.environ.get(name):
            os.environ[name] = os.path.join(os.environ[name], worker)


#: The suite's first workspace user id above the configured base (workspaces/local.py runs workspace N's server as
#: uid BASE + N, and ending a workspace's user kills every process of that uid), and each xdist worker's range.
TEST_UIDS, UIDS_PER_WORKER = 100_000_000, 10_000_000


def _own_workspace_users(base: int) -> int:
    """Workspace user ids no other test process and no ``make run`` on this machine uses.

    Every worker's database numbers its workspaces from the same sequence, so two workers' workspaces 43 were one
    user: one's teardown (``local.stop`` kills all of uid BASE + 43) killed the other's server as it started
    (CI, 2026-11-30: "the Jupyter server exited" with an empty log). A run outside xdist keeps clear of the
    demo's workspaces (the production base) in the same way."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if os.environ.get("TESTS_WORKSPACE_USERS_OF") == worker:
        return base  # a process a test started: it inherited its test process's range
    os.environ["TESTS_WORKSPACE_USERS_OF"] = worker
    index = int(worker.removeprefix("gw")) + 1 if worker else 0
    base += TEST_UIDS + index * UIDS_PER_WORKER
    os.environ["SLIPWAY_WORKSPACE_LOCAL_UID_BASE"] = str(base)  # for the processes its tests start
    return base


_own_services_per_xdist_worker()

from portal.settings import *  # noqa: E402, F403

SLIPWAY_WORKSPACE_LOCAL_UID_BASE = _own_workspace_users(SLIPWAY_WORKSPACE_LOCAL_UID_BASE)  # noqa: F405

INSTALLED_APPS = [*INSTALLED_APPS, "tests.workloads.tinykind", "tests.workloads.holdkind"]  # noqa: F405

#: One cluster in the single-pool format, the shape the suite's tests assume (see the file);
#: the tests of the bundled two-cluster inventory name sandbox/inventory.yaml themselves.
SLIPWAY_SANDBOX_INVENTORY = str(BASE_DIR / "tests" / "inventory.yaml")  # noqa: F405

#: No real engine processes for the suite's endpoints (hundreds of tests apply one): the tests of
#: sandbox/engines.py turn them on (docs/serving.md).
SLIPWAY_SANDBOX_ENGINES = env_bool("SLIPWAY_SANDBOX_ENGINES", False)  # noqa: F405
