"""Runs on a time-sliced GPU, through the real apply task and reconcile cycle on the simulated
cluster: their sharing reaches the run — two busy runs each run twice as long (and are billed for
it), and the run whose memory does not fit beside the others' fails with a reason that names the
sharing (issue 37.4)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.demo import seed_team_quotas
from sandbox.backend import SandboxBackend
from tests.backends import use_backend
from tests.jobs.conftest import run_payload
from tests.shared_flavors import make_shared_flavors
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload

# Real commits: the apply task the portal publishes after commit is run as a worker would run it.
pytestmark = pytest.mark.django_db(transaction=True)

#: One T4 time-sliced x4.
INVENTORY = """
pools:
  - prefix: t4
    cpu: "64"
    memory: 256Gi
    gpu: {product: Tesla-T4, count: 1, memory_mib: 15360, family: turing}
    sharing: {strategy: time-slicing, replicas: 4, config: t4-ts4}
"""


@pytest.fixture
def cluster(settings, tmp_path, team, published):
    path = tmp_path / "t4.yaml"
    path.write_text(INVENTORY)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    # A time-sliced T4 flavor for runs: the demo's t4-ts4, but open to training.
    make_shared_flavors(**{"t4-ts4": {"training": True}})
    seed_team_quotas(team, {"t4-ts4": 4})
    return use_backend(settings, SandboxBackend())


class Clock:
    """Runs the published apply tasks, ticks the sandbox and reconciles, 5 s at a time."""

    def __init__(self, backend: SandboxBackend, published: list) -> None:
        self.backend, self.published = backend, published
        self.now = timezone.now().replace(microsecond=0)

    def cycle(self) -> None:
        self.now += timedelta(seconds=5)
        while self.published:
            _name, args = self.published.pop(0)
            apply_workload(*args)
        self.backend.tick(self.now)
        rec.reconcile(self.backend, now=self.now)

    def until(self, done, cycles: int = 80) -> None:
        for _ in range(cycles):
            self.cycle()
            if done():
                return
        raise AssertionError("not reached")


def submit(member, team, name: str, **env: str) -> TrainingRun:
    payload = {k: v for k, v in run_payload(name=name, flavor="t4-ts4", gpus_per_worker=1).items() if k != "team"}
    return submit_run(member, team, {**payload, "max_retries": 0, "env": {"SLIPWAY_SIM_DURATION": "60s", **env}})


def test_two_busy_runs_on_one_time_sliced_t4_each_run_and_are_billed_twice_as_long(cluster, member, team, published):
    clock = Clock(cluster, published)
    runs = [submit(member, team, "run-a"), submit(member, team, "run-b")]
    clock.until(lambda: all(TrainingRun.objects.get(pk=r.pk).state == RunState.SUCCEEDED for r in runs))
    for run in runs:
        run.refresh_from_db()
        # 60 s of work at half speed (the cycle sees the end within its 5 s).
        assert timedelta(seconds=120) <= run.finished_at - run.started_at <= timedelta(seconds=125)
        # A quarter of a T4 (its unit's price an hour) for the time it really ran: two minutes, not one.
        ran = Decimal((run.finished_at - run.started_at).total_seconds()) / 3600
        assert abs(run.cost_to_date - run.cost_per_hour_at(1) * ran) < Decimal("1e-8")
        assert run.cost_to_date > 0


def test_the_run_whose_memory_does_not_fit_fails_naming_the_sharing(cluster, member, team, published):
    clock = Clock(cluster, published)
    others = [submit(member, team, f"small-{i}", SLIPWAY_SIM_DURATION="600s") for i in range(3)]
    clock.until(lambda: all(TrainingRun.objects.get(pk=r.pk).state == RunState.RUNNING for r in others))
    hungry = submit(member, team, "hungry", SLIPWAY_SIM_GPU_MEMORY_GB="12")
    clock.until(lambda: TrainingRun.objects.get(pk=hungry.pk).state == RunState.FAILED)
    hungry.refresh_from_db()
    assert ("OOMKilled (exit 137): GPU memory is shared with 3 other pods on this time-sliced GPU: they hold "
            "6.0 GiB of its 15.0 GiB, this pod asked for 12.0 GiB") in hungry.reason
    assert "raise memory_gb" not in hungry.reason  # not the container's own memory
    assert all(TrainingRun.objects.get(pk=r.pk).state == RunState.RUNNING for r in others)
