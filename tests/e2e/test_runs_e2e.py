"""Training runs end to end: API → admission → real Celery worker on Redis → sandbox cluster.

Nothing is eager here: the API publishes to Redis, a separate ``celery worker -B`` process
creates the cluster objects and runs the reconcile cycle every half second, and the
simulated cluster runs the pods on its clock.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from billing.models import QuotaHold
from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from sandbox.backend import SandboxBackend
from tests.e2e.conftest import wait_for
from tests.jobs.conftest import post_run
from workloads.registry import resource_kinds

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(240)]


@pytest.fixture
def setup(team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8, "h100-80gb": 16}, Decimal("200000"))
    return api_client_for(member)


def watch(api, run_id: int, until: tuple[str, ...], timeout: float = 90) -> tuple[dict, list[str]]:
    """Poll the API until the run reaches one of ``until``; returns it and the states seen."""
    seen: list[str] = []

    def reached():
        body = api.get(f"/api/v1/runs/{run_id}/").json()
        if not seen or seen[-1] != body["state"]:
            seen.append(body["state"])
        return body if body["state"] in until else None

    return wait_for(reached, timeout=timeout, interval=0.2, what=f"run {run_id} to reach {until}; seen {seen}"), seen


def sandbox_kinds(workload: str) -> list[str]:
    return sorted(o["kind"] for w in SandboxBackend().observe(resource_kinds()) if w.object_name == workload for o in w.objects)


def test_it_runs_a_job_from_submit_to_success_with_cost(worker, setup):
    api = setup
    run = post_run(api, "3s", name="happy", gpus_per_worker=1)
    assert run["state"] == "admitted"
    body, seen = watch(api, run["id"], ("succeeded", "failed"))
    assert body["state"] == "succeeded", (body, worker.logs())
    assert {"pending", "running"} <= set(seen), seen
    assert Decimal(body["cost_to_date"]) > 0
    assert body["started_at"] and body["finished_at"]
    assert not QuotaHold.objects.held().filter(ref=f"run:{run['id']}").exists()
    assert sandbox_kinds(f"run-{run['id']}") == ["Job"]


def test_it_fails_an_oom_run_with_the_oomkilled_reason(worker, setup):
    api = setup
    run = post_run(api, "2s", name="oom", gpus_per_worker=1, env={"SLIPWAY_SIM_OUTCOME": "oom"}, max_retries=0)
    body, _ = watch(api, run["id"], ("succeeded", "failed"))
    assert body["state"] == "failed"
    assert "OOMKilled" in body["reason"], body["reason"]


def test_it_cancels_a_run_releasing_quota_and_deleting_its_objects(worker, setup):
    api = setup
    run = post_run(api, "10m", name="long", gpus_per_worker=8)
    watch(api, run["id"], ("pending", "running"))
    assert sandbox_kinds(f"run-{run['id']}") == ["Job"]
    assert api.post(f"/api/v1/runs/{run['id']}/cancel/").status_code == 202
    assert not QuotaHold.objects.held().filter(ref=f"run:{run['id']}").exists()
    wait_for(lambda: sandbox_kinds(f"run-{run['id']}") == [], timeout=30, what="the Job to be deleted")


def test_it_starts_a_queued_run_by_itself_when_quota_frees(worker, setup):
    api = setup
    first = post_run(api, "3s", name="first", gpus_per_worker=8)
    second = post_run(api, "2s", name="second", gpus_per_worker=4)
    assert second["state"] == "queued"
    assert second["reason"].startswith("waiting for quota: needs 4× a100-80gb")
    body, seen = watch(api, second["id"], ("succeeded", "failed"), timeout=120)
    assert body["state"] == "succeeded", body
    assert "admitted" in seen or "pending" in seen
    assert api.get(f"/api/v1/runs/{first['id']}/").json()["state"] == "succeeded"


def test_it_runs_a_distributed_run_as_a_pytorchjob(worker, setup):
    api = setup
    run = post_run(api, "3s", name="ddp", flavor="h100-80gb", gpus_per_worker=8, workers=2)
    assert run["resource_kind"] == "PyTorchJob"
    body, _ = watch(api, run["id"], ("succeeded", "failed"))
    assert body["state"] == "succeeded", body
    assert sandbox_kinds(f"run-{run['id']}") == ["PyTorchJob"]


# -- faults ---------------------------------------------------------------------------------------


def test_it_loses_nothing_when_the_worker_is_killed_mid_task(worker, setup):
    api = setup
    run = post_run(api, "3s", name="survivor", gpus_per_worker=1)
    # The create task bumps apply_attempts right before applying: kill the worker then.
    wait_for(lambda: TrainingRun.objects.filter(pk=run["id"], apply_attempts__gte=1).exists(), timeout=30,
             interval=0.01, what="the create task to start")
    worker.kill()
    worker.start()
    body, _ = watch(api, run["id"], ("succeeded", "failed"), timeout=120)
    assert body["state"] == "succeeded", (body, worker.logs())
    workloads = [w for w in SandboxBackend().observe(resource_kinds()) if w.object_name == f"run-{run['id']}"]
    assert len(workloads) == 1
    assert [o["kind"] for o in workloads[0].objects] == ["Job"]  # one object, not two


def test_it_admits_a_run_while_the_broker_is_down_and_the_reconciler_picks_it_up(worker, setup, monkeypatch, caplog):
    from portal.celery import app

    api = setup
    # Point this process's publisher at a closed port: publishing fails at once. The app builds
    # its producers from ``broker_url`` on first use, so its ``amqp`` (a cached property, which
    # holds them) is dropped for the test and rebuilt; undo puts the working one back.
    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.delattr(app, "amqp")
    run = post_run(api, "2s", name="brokerless", gpus_per_worker=1)
    assert run["state"] == "admitted"
    # ...because the broker refused the connection (kombu's OperationalError), not a closed pool.
    assert "could not publish workloads.tasks.apply_workload('run', " in caplog.text
    assert "OperationalError" in caplog.text
    monkeypatch.undo()
    # Nothing was published; the worker's reconcile re-drives the run after one period.
    body, _ = watch(api, run["id"], ("succeeded", "failed"), timeout=120)
    assert body["state"] == "succeeded", (body, worker.logs())
    assert connection.vendor == "postgresql"
