"""Continuing a pruned trial from its checkpoint (docs/sweeps.md "Continue a pruned trial"), end to end on the
simulated cluster with the real reconcile cycle, the stdout reader and the driver (as tests/sweeps/test_sweep_flow.py).
"""

from __future__ import annotations

from decimal import Decimal

import optuna
import pytest

from jobs.constants import RunState
from jobs.models import RunMetric, TrainingRun
from quotas.demo import seed_team_quotas
from sandbox.models import SimObject
from sweeps.constants import SweepState, TrialState
from sweeps.models import Sweep, Trial
from sweeps.storage import DjangoStorage
from teams.models import Membership, Role
from tests.factories import make_team, member_api
from tests.jobs.conftest import run_payload
from tests.sweeps.test_sweep_flow import step, sweep_body, timeline  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def _run_to_the_end(sweep_id: int, timeline, steps: int = 400) -> Sweep:  # noqa: F811
    for _ in range(steps):
        step(timeline, sweep_id)
        if Sweep.objects.get(pk=sweep_id).state == SweepState.COMPLETED:
            break
    return Sweep.objects.get(pk=sweep_id)


def _claim(run: TrainingRun) -> SimObject | None:
    return SimObject.objects.filter(resource_kind="PersistentVolumeClaim", name=f"{run.object_name}-checkpoints").first()


def _pruned_sweep(api, timeline) -> tuple[Sweep, list[Trial]]:  # noqa: F811
    created = api.post("/api/v1/sweeps/", sweep_body(max_trials=6), format="json")
    assert created.status_code == 201, created.content
    sweep = _run_to_the_end(created.json()["id"], timeline)
    assert sweep.state == SweepState.COMPLETED, sweep.reason
    pruned = list(sweep.trials.filter(state=TrialState.PRUNED).select_related("workload"))
    assert pruned, "ASHA pruned none of the six trials"
    return sweep, pruned


def test_a_pruned_trial_goes_on_from_its_checkpoint_unjudged_and_its_claim_follows_the_new_run(timeline, flavors):  # noqa: F811
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    api, alice = member_api("vision", "alice")
    sweep, pruned = _pruned_sweep(api, timeline)
    url = f"/api/v1/sweeps/{sweep.pk}/trials/{{}}/continue/"
    # The worst of the pruned trials: the pruner would stop it again; continued, it runs to its end.
    worst = max(pruned, key=lambda t: t.value)
    previous = TrainingRun.objects.select_related("cluster").get(workload_id=worst.workload_id)
    assert previous.last_checkpoint_step and _claim(previous) is not None

    # What may not be continued, and who may not: each refused with why, nothing written.
    completed = sweep.trials.filter(state=TrialState.COMPLETED).first()
    refused = api.post(url.format(completed.number))
    assert refused.status_code == 409 and "only a pruned trial can be continued" in str(refused.json())
    assert api.post(url.format(99)).status_code == 409
    assert api.post(url.format("9" * 4400)).status_code == 404  # no trial number (int() of it raised: a 500)
    viewer_api, viewer = member_api("vision", "vic")
    Membership.objects.filter(user=viewer, team=vision).update(role=Role.VIEWER)
    assert viewer_api.post(url.format(worst.number)).status_code == 403
    make_team("nlp")
    outsider_api, _ = member_api("nlp", "olga")
    assert outsider_api.post(url.format(worst.number)).status_code == 404
    assert sweep.trials.count() == 6

    answer = api.post(url.format(worst.number))
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["number"] == 7 and body["continues"] == worst.number and body["params"] == worst.params
    assert body["name"] == "lr-search-t007"
    again = api.post(url.format(worst.number))
    assert again.status_code == 409 and "continued already, as trial 7" in str(again.json())
    reopened = Sweep.objects.get(pk=sweep.pk)
    assert reopened.state == SweepState.RUNNING and not reopened.launching
    assert reopened.reason.startswith(f"running again: trial {worst.number} continued as trial 7 by alice")
    listed = {t["number"]: t for t in api.get(f"/api/v1/sweeps/{sweep.pk}/trials/").json()}
    assert listed[worst.number]["continued_as"] == 7 and listed[7]["continues"] == worst.number

    # The new run: on the pruned run's cluster, with its claim, from its last checkpoint; submitted by alice.
    run = TrainingRun.objects.get(pk=body["run_id"])
    assert run.resumes_id == previous.pk and run.cluster_id == previous.cluster_id and run.created_by == alice
    assert run.last_checkpoint_path == previous.last_checkpoint_path
    step(timeline, sweep.pk)
    job = SimObject.objects.get(resource_kind="Job", name=run.object_name)
    pod = job.manifest["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["SLIPWAY_RESUME_FROM"] == previous.last_checkpoint_path and env["SLIPWAY_ATTEMPT"] == "1"
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [f"{previous.object_name}-checkpoints"]
    assert _claim(previous).workload == run.object_name  # relabelled at the apply: the new run's now
    assert not SimObject.objects.filter(resource_kind="PersistentVolumeClaim", name=f"{run.object_name}-checkpoints").exists()

    sweep = _run_to_the_end(sweep.pk, timeline)
    assert sweep.state == SweepState.COMPLETED
    trial = Trial.objects.get(sweep=sweep, number=7)
    run.refresh_from_db()
    assert trial.state == TrialState.COMPLETED and run.state == RunState.SUCCEEDED and trial.value is not None
    first = RunMetric.objects.filter(run=run, name="loss").order_by("step").values_list("step", flat=True).first()
    assert first is not None and first >= previous.last_checkpoint_step  # it went on, it did not start over
    # Its claim followed it: the run succeeded, so the claim went, as a finished run's does.
    assert _claim(previous) is None
    # Optuna's record: a seventh trial, complete, with the pruned one's parameters; max_trials counts six sampled.
    study = optuna.load_study(study_name=sweep.study.name, storage=DjangoStorage())
    assert len(study.trials) == 7 and study.trials[6].state == optuna.trial.TrialState.COMPLETE
    assert study.trials[6].params == pytest.approx(worst.params)
    assert sweep.trials.filter(continues__isnull=True).count() == 6


def test_its_claim_is_kept_while_the_continuation_waits_and_goes_when_that_is_cancelled(timeline, flavors, settings):  # noqa: F811
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 3}, Decimal("100000"))
    api, _ = member_api("vision", "alice")
    sweep, pruned = _pruned_sweep(api, timeline)
    trial = pruned[0]
    previous = TrainingRun.objects.get(workload_id=trial.workload_id)
    # The team's three units taken by a long run: the continuation will wait for quota.
    blocker = api.post("/api/v1/runs/", run_payload(team="vision", gpus_per_worker=3,
                                                     env={"SLIPWAY_SIM_DURATION": "2h"}), format="json")
    assert blocker.status_code == 201, blocker.content
    step(timeline, sweep.pk)

    # Past its keeping, a pruned trial cannot be continued: its checkpoint is gone, or about to be.
    settings.SLIPWAY_PRUNED_CHECKPOINT_DAYS = 0
    refused = api.post(f"/api/v1/sweeps/{sweep.pk}/trials/{trial.number}/continue/")
    assert refused.status_code == 409 and "was kept 0 days after it was pruned" in str(refused.json())
    settings.SLIPWAY_PRUNED_CHECKPOINT_DAYS = 7
    answer = api.post(f"/api/v1/sweeps/{sweep.pk}/trials/{trial.number}/continue/")
    assert answer.status_code == 201, answer.content
    run = TrainingRun.objects.get(pk=answer.json()["run_id"])
    assert run.state == RunState.QUEUED

    # Now only the waiting continuation keeps the pruned run's claim: the cleanup keeps it all the same.
    settings.SLIPWAY_PRUNED_CHECKPOINT_DAYS = 0
    for _ in range(3):
        step(timeline, sweep.pk)
    assert TrainingRun.objects.get(pk=run.pk).state == RunState.QUEUED
    assert _claim(previous) is not None and _claim(previous).workload == previous.object_name

    assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 202
    step(timeline, sweep.pk)
    assert _claim(previous) is None  # nothing resumes it any more, and its keeping is over
    assert Trial.objects.get(sweep=sweep, number=run.workload.trial.number).state == TrialState.STOPPED
