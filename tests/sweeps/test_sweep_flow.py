"""A sweep on the simulated cluster, end to end with the real reconcile cycle, the stdout reader and the driver.

The sandbox gives each trial a learning curve that depends on its parameters (``SLIPWAY_SIM_OPTIMUM``). Every
cycle ticks the cluster, runs the reconcile cycle, reads the runs' logs (the metrics pipeline) and acts for the
sweep once, as beat would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import optuna
import pytest
from django.db.models import Sum

from billing.models import UsageRecord
from jobs.constants import RunState
from jobs.metrics import read_run_logs
from jobs.models import TrainingRun
from notifications.models import Delivery, Event
from notifications.services import create_webhook
from notifications.tasks import fan_out
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from sandbox.models import SimObject
from sweeps import driver
from sweeps.constants import SweepState, TrialState
from sweeps.models import Sweep, Trial
from sweeps.storage import DjangoStorage
from teams.models import Membership, Role
from tests.factories import make_team, member_api
from tests.workloads.timeline import scripted_timeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
GRACE = 10


@pytest.fixture
def timeline(published, monkeypatch, settings):
    settings.SLIPWAY_RUN_METRICS_READ_RUNS = 50
    return scripted_timeline(published, monkeypatch, settings, START)


def sweep_body(name: str = "lr-search", **changes) -> dict:
    body = {
        "team": "vision", "name": name,
        "run": {"image": "ghcr.io/acme/train:1", "command": ["python", "train.py"], "args": ["--lr={lr}"],
                "flavor": "a100-80gb", "gpus_per_worker": 1, "max_runtime_minutes": 10,
                "checkpoint": {"grace_seconds": GRACE},
                "env": {"SLIPWAY_SIM_DURATION": "4m", "SLIPWAY_SIM_LOG_EVERY": "2",
                        "SLIPWAY_SIM_CHECKPOINT_EVERY": "20s", "SLIPWAY_SIM_HONOUR_NOTICE": "1",
                        "SLIPWAY_SIM_OPTIMUM": "LR=3e-4,BATCH=64", "SLIPWAY_SIM_CURVE_SEED": "3"}},
        "parameters": {"lr": {"type": "float", "min": 1e-5, "max": 1e-1, "log": True},
                       "batch": {"type": "categorical", "choices": [16, 32, 64, 128, 256]}},
        "objective": {"metric": "loss", "goal": "minimize"}, "sampler": "random",
        "pruner": {"type": "asha", "min_resource": 120, "reduction_factor": 3, "max_resource": 2400},
        "parallel": 3, "max_trials": 12, "seed": 5,
    }
    body.update(changes)
    return body


def step(timeline, sweep_id: int) -> None:
    """One beat: the cluster and the reconcile cycle, the stdout reader, the sweep's driver, the published applies."""
    timeline.cycle()
    read_run_logs(timeline.now)
    driver.advance(sweep_id, timeline.now)
    timeline.run_tasks()


def trial_runs(sweep_id: int) -> list[TrainingRun]:
    return list(TrainingRun.objects.filter(workload__trial__sweep_id=sweep_id).order_by("pk"))


def test_an_asha_sweep_keeps_to_parallel_prunes_with_checkpoints_and_names_its_best(timeline, flavors):
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    api, alice = member_api("vision", "alice")
    Membership.objects.filter(user=alice, team=vision).update(role=Role.ADMIN)
    create_webhook(alice, vision, "https://hooks.example.com/sweeps", ["sweep_finished"])
    created = api.post("/api/v1/sweeps/", sweep_body(), format="json")
    assert created.status_code == 201, created.content
    sweep_id = created.json()["id"]

    most = 0
    for _ in range(400):
        step(timeline, sweep_id)
        holding = [r for r in trial_runs(sweep_id) if r.state in TrainingRun.HOLDING_STATES]
        most = max(most, len(holding))
        if Sweep.objects.get(pk=sweep_id).state == SweepState.COMPLETED:
            break
    sweep = Sweep.objects.get(pk=sweep_id)
    assert sweep.state == SweepState.COMPLETED, sweep.reason
    assert most == 3  # parallel: never more, and the sweep used what it was given

    trials = list(Trial.objects.filter(sweep=sweep).select_related("workload"))
    assert [t.number for t in trials] == list(range(1, 13))
    runs = {r.workload_id: r for r in trial_runs(sweep_id)}
    assert sorted(r.name for r in runs.values()) == [f"lr-search-t{n:03d}" for n in range(1, 13)]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    completed = [t for t in trials if t.state == TrialState.COMPLETED]
    assert pruned and completed and len(pruned) + len(completed) == 12
    for trial in pruned:
        run = runs[trial.workload_id]
        # Stopped through the contract: a pruned run (never failed), its notice checkpoint saved and its claim kept.
        assert run.state == RunState.PRUNED and run.reason.startswith("pruned by sweep lr-search (ASHA) at step")
        assert run.last_checkpoint_at is not None and run.preemptions == 0
        assert SimObject.objects.filter(resource_kind="PersistentVolumeClaim",
                                        name=f"{run.object_name}-checkpoints").exists()
        assert trial.value == trial.objective and trial.step < 2400
    for trial in completed:
        assert runs[trial.workload_id].state == RunState.SUCCEEDED and trial.value is not None

    # The study agrees with the trials, one to one, and the best trial is the study's.
    study = optuna.load_study(study_name=sweep.study.name, storage=DjangoStorage())
    states = {t.number + 1: t.state for t in study.trials}
    assert states == {t.number: {TrialState.PRUNED: optuna.trial.TrialState.PRUNED,
                                 TrialState.COMPLETED: optuna.trial.TrialState.COMPLETE}[t.state] for t in trials}
    body = api.get(f"/api/v1/sweeps/{sweep_id}/").json()
    assert body["best_trial"]["number"] == study.best_trial.number + 1
    assert body["best_trial"]["value"] == pytest.approx(study.best_value)
    assert body["trials"]["pruned"] == len(pruned) and body["spend"]["committed"] == "0.00"
    listed = api.get(f"/api/v1/sweeps/{sweep_id}/trials/").json()
    assert [t["state"] for t in listed] == [t.state for t in trials]
    assert all(t["run_id"] == runs[trial.workload_id].pk for t, trial in zip(listed, trials, strict=True))
    # Pruning saved GPU time: the pruned trials ran less than a whole trial each.
    spent = Decimal(body["spend"]["spent"])
    assert Decimal(0) < spent < sweep.trial_cost * 12

    # The webhook is told once, with the best trial and the money spent and saved.
    event = Event.objects.get(event_kind="sweep_finished")
    best = body["best_trial"]
    assert event.details["best"]["number"] == best["number"] and event.details["spent"] == body["spend"]["spent"]
    assert Decimal(event.details["saved"]) > 0
    assert f"best trial {best['name']}: loss " in event.text and event.title == "Sweep lr-search of team vision completed"
    assert fan_out(event.key) == 1
    assert Delivery.objects.get(event=event).target == "https://hooks.example.com/sweeps"


def test_a_queued_trial_shows_the_queues_reason_and_stop_ends_every_trial(timeline, flavors):
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 2}, Decimal("100000"))
    api, _ = member_api("vision", "alice")
    sweep_id = api.post("/api/v1/sweeps/", sweep_body(pruner={"type": "none"}), format="json").json()["id"]
    step(timeline, sweep_id)
    trials = api.get(f"/api/v1/sweeps/{sweep_id}/trials/").json()
    assert len(trials) == 3  # parallel: three launched, one of which waits for the team's quota
    waiting = [t for t in trials if t["run_state"] == "queued"]
    assert len(waiting) == 1
    run = api.get(f"/api/v1/runs/{waiting[0]['run_id']}/").json()
    assert "waiting for quota" in run["reason"] and QueuedRequest.objects.filter(ref=f"run:{run['id']}").exists()

    for _ in range(20):  # the two admitted start and report
        step(timeline, sweep_id)
    stopped = api.post(f"/api/v1/sweeps/{sweep_id}/stop/")
    assert stopped.status_code == 200 and stopped.json()["state"] == SweepState.STOPPING
    assert api.post(f"/api/v1/sweeps/{sweep_id}/stop/").status_code == 409
    assert TrainingRun.objects.get(pk=waiting[0]["run_id"]).state == RunState.CANCELLED  # queued: ended at once
    for _ in range(2 * GRACE):
        step(timeline, sweep_id)
        if Sweep.objects.get(pk=sweep_id).state == SweepState.STOPPED:
            break
    assert Sweep.objects.get(pk=sweep_id).state == SweepState.STOPPED
    runs = trial_runs(sweep_id)
    assert len(runs) == 3 and {r.state for r in runs} == {RunState.CANCELLED}
    assert all(r.last_checkpoint_at is not None for r in runs if r.started_at is not None)
    assert {t.state for t in Trial.objects.filter(sweep_id=sweep_id)} == {TrialState.STOPPED}
    assert api.delete(f"/api/v1/sweeps/{sweep_id}/").status_code == 204
    assert len(trial_runs(sweep_id)) == 0 and TrainingRun.objects.filter(name__startswith="lr-search-t").count() == 3


def test_a_small_cap_stops_launching_and_the_spend_stays_within_it(timeline, flavors):
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    api, _ = member_api("vision", "alice")
    shape = api.post("/api/v1/sweeps/?dry_run=1", sweep_body(max_cost="0"), format="json")
    assert shape.status_code == 400 and "max_cost" in shape.json()["errors"]
    dry = api.post("/api/v1/sweeps/?dry_run=1", sweep_body(pruner={"type": "none"}), format="json").json()
    trial_cost = Decimal(dry["trial"]["cost"])
    cap = (trial_cost * Decimal("4.5")).quantize(Decimal("0.01"))
    assert not Sweep.objects.exists()  # a dry run creates nothing
    sweep_id = api.post("/api/v1/sweeps/", sweep_body(pruner={"type": "none"}, max_cost=str(cap)),
                        format="json").json()["id"]
    for _ in range(400):
        step(timeline, sweep_id)
        if Sweep.objects.get(pk=sweep_id).state == SweepState.COMPLETED:
            break
    sweep = Sweep.objects.get(pk=sweep_id)
    assert sweep.state == SweepState.COMPLETED
    # The trials end in 4 minutes of their 10-minute limit, so more than 4.5 whole trials' worth launch, but not 12.
    assert 4 < sweep.trials.count() < 12
    assert sweep.reason.startswith("stopped launching: one more trial would pass the cap")
    spend = api.get(f"/api/v1/sweeps/{sweep_id}/").json()["spend"]
    spent = Decimal(spend["spent"])
    assert spent <= cap
    # One rule for a figure: the sweep's GPU-hours and money are the ledger's for its trials' runs, to the cent.
    ledger = UsageRecord.objects.filter(ref__in=[r.ref for r in trial_runs(sweep_id)]).aggregate(
        hours=Sum("gpu_hours"), cost=Sum("cost"))
    assert ledger["hours"] > 0 and Decimal(spend["gpu_hours"]) == ledger["hours"].quantize(Decimal("0.01"))
    assert spent == ledger["cost"].quantize(Decimal("0.01")) and spend["committed_gpu_hours"] == "0.00"
    assert timeline.now - START < timedelta(hours=1)
