"""A distributed run (a PyTorchJob) whose gang fails and restarts, on the simulated cluster through
the real apply task and reconcile cycle: its page offers each restarted replica's earlier attempt
beside its current run, as a Job's earlier attempts are offered.

On Kubernetes the training-operator leaves a failed replica (``restartPolicy: OnFailure``) to
the kubelet, which restarts its container in place: the earlier attempt is the container's
previous log (``previous=true``), one attempt back. The sandbox shows the same (``restartCount``,
``lastState.terminated`` and the previous log) for the pods that replace a restarted gang.
"""

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

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_restarted_pytorchjob_offers_each_replicas_earlier_attempt(client, api, member, team, quota, published,
                                                                       settings):
    backend = SandboxBackend()
    use_backend(settings, backend)
    env = {"SLIPWAY_SIM_DURATION": "30s", "SLIPWAY_SIM_OUTCOME": "fail"}
    fields = {k: v for k, v in run_payload(workers=2, gpus_per_worker=1).items() if k != "team"}
    run = submit_run(member, team, {**fields, "env": env, "max_retries": 2})
    assert run.resource_kind == "PyTorchJob"
    now = timezone.now().replace(microsecond=0)
    ref = ClusterAddress(run.namespace, run.object_name)

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

    def restarted() -> bool:
        return any(c.get("restartCount") for p in backend.pods(ref) for c in p["status"].get("containerStatuses", []))

    # 1. The gang runs 30 s, fails, and is restarted: its replicas run their second attempt.
    for _ in range(30):
        if cycle().state == RunState.RUNNING and restarted():
            break
    assert run.state == RunState.RUNNING and restarted()
    master = f"{run.object_name}-master-0"

    # 2. The picker offers the current run first (the default) and the earlier attempt beside it.
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<option value="{master}" selected>master-0</option>' in page
    assert f'<option value="{master}:previous">master-0, attempt 1 (Error (exit 1))</option>' in page
    earlier = client.get(f"/runs/{run.pk}/logs/", {"pod": f"{master}:previous"},
                         HTTP_HX_REQUEST="true").content.decode()
    assert "RuntimeError: NCCL error" in earlier
    current = client.get(f"/runs/{run.pk}/logs/", {"pod": master}, HTTP_HX_REQUEST="true").content.decode()
    assert "RuntimeError: NCCL error" not in current  # the second attempt is still running

    # 3. The API names it the same way, and downloads it as a file of its own.
    body = api.get(f"/api/v1/runs/{run.pk}/logs/", {"pod": f"{master}:previous"}).json()
    assert body["pod"] == f"{master}:previous" and body["lines"][-1].endswith("unhandled system error")
    assert {"name": f"{master}:previous", "label": "master-0, attempt 1 (Error (exit 1))"} in body["pods"]
    download = api.get(f"/api/v1/runs/{run.pk}/logs/download/", {"pod": f"{master}:previous"})
    assert download["Content-Disposition"] == f'attachment; filename="{master}-previous.log"'
    assert download.content.decode().splitlines()[0].endswith("INFO  starting registry.example.com/ml/trainer:1.4")
    # A replica that never restarted has no earlier attempt to pick: 404 as for any name not the run's.
    assert client.get(f"/runs/{run.pk}/logs/", {"pod": f"{run.object_name}-nope:previous"}).status_code == 404
