"""A run that fails once and recovers, on the simulated cluster through the real apply task and
reconcile cycle: it says which attempt it is on, its page offers both attempts' logs, and it
ends succeeded (``SLIPWAY_SIM_FAILED_ATTEMPTS``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.backends.base import ClusterAddress
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from sandbox.backend import SandboxBackend
from tests.backends import use_backend
from tests.jobs.conftest import run_payload
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload

# Real commits: the apply task the portal publishes after commit is run as a worker would run it.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_retried_run_says_its_attempt_and_keeps_the_first_attempts_log(client, member, team, quota, published,
                                                                         settings):
    backend = SandboxBackend()
    use_backend(settings, backend)
    env = {"SLIPWAY_SIM_DURATION": "30s", "SLIPWAY_SIM_OUTCOME": "fail", "SLIPWAY_SIM_FAILED_ATTEMPTS": "1"}
    run = submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "env": env,
                                    "max_retries": 2})
    now = timezone.now().replace(microsecond=0)

    def cycle() -> TrainingRun:
        nonlocal now
        now += timedelta(seconds=5)
        while published:
            _name, args = published.pop(0)
            apply_workload(*args)
        backend.tick(now)
        rec.reconcile(backend, now=now)
        run.refresh_from_db()
        return run

    # 1. Attempt 1 fails after 30 s; after the controller's back-off attempt 2 starts, then runs.
    seen = []
    for _ in range(30):
        seen.append(cycle().reason)
        if run.state == RunState.RUNNING and run.reason.startswith("attempt 2 of 3;"):
            break
    assert "attempt 1 of 3 ended: Error (exit 1); retrying after a back-off" in seen
    assert (run.state, run.reason) == (RunState.RUNNING, "attempt 2 of 3; attempt 1 ended: Error (exit 1)")

    # 2. The page says so, and offers both attempts' logs, the newest first.
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "attempt 2 of 3; attempt 1 ended: Error (exit 1)" in page
    assert page.index("attempt 2 (running)") < page.index("attempt 1 (Error (exit 1))")
    pods = backend.pods(ClusterAddress(run.namespace, run.object_name))
    first = min(pods, key=lambda p: p["metadata"]["creationTimestamp"])["metadata"]["name"]
    earlier = client.get(f"/runs/{run.pk}/logs/", {"pod": first}, HTTP_HX_REQUEST="true").content.decode()
    assert "RuntimeError: NCCL error" in earlier
    download = client.get(f"/runs/{run.pk}/logs/download/", {"pod": first}).content.decode()
    assert download.splitlines()[0].endswith("INFO  starting registry.example.com/ml/trainer:1.4")

    # 3. The second attempt succeeds: the run ends succeeded, the picker still offers attempt 1.
    for _ in range(30):
        if cycle().state == RunState.SUCCEEDED:
            break
    assert run.state == RunState.SUCCEEDED
    assert "attempt 1 (Error (exit 1))" in client.get(f"/runs/{run.pk}/").content.decode()
