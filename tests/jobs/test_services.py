"""Service functions not covered through the API: run again, the live preview, demo runs."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404

from billing.models import UsageRecord
from jobs.constants import RunState
from jobs.demo import DEMO_HISTORY, DEMO_RUNS, seed_demo_runs
from jobs.models import TrainingRun
from jobs.services import cancel_run, name_for_run_again, preview_run, submit_run
from quotas.demo import seed_team_quotas
from tests.factories import add_member, make_team, make_user
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


def payload(**overrides) -> dict:
    data = run_payload(**overrides)
    data.pop("team")
    return data


def test_a_copy_of_a_finished_run_gets_a_fresh_name(member, team, quota, published):
    run = submit_run(member, team, payload(name="first-try"))
    cancel_run(member, run)
    assert name_for_run_again(run) == "first-try-2"  # its name is free, but a copy is another run


def test_a_copy_of_a_copy_counts_on_and_skips_names_active_runs_hold(member, team, quota, published):
    first = submit_run(member, team, payload(name="first-try", gpus_per_worker=1))
    second = submit_run(member, team, payload(name="first-try-2", gpus_per_worker=1))
    assert name_for_run_again(second) == "first-try-3"
    submit_run(member, team, payload(name="first-try-3", gpus_per_worker=1))
    assert name_for_run_again(second) == "first-try-4"
    assert name_for_run_again(first) == "first-try-4"  # -2 and -3 are held by active runs


def test_a_number_that_is_part_of_the_name_is_not_a_copy_counter(member, team, quota, published):
    run = submit_run(member, team, payload(name="sweep-lr-1e-4", gpus_per_worker=1))
    assert name_for_run_again(run) == "sweep-lr-1e-4-2"  # no run "sweep-lr-1e": the 4 is the name's


def test_it_suffixes_a_long_name_within_the_length_limit(member, team, quota, published):
    run = submit_run(member, team, payload(name="x" * 40, gpus_per_worker=1))
    assert name_for_run_again(run) == "x" * 38 + "-2"
    submit_run(member, team, payload(name="x" * 38 + "-2", gpus_per_worker=1))
    assert name_for_run_again(run) == "x" * 38 + "-3"


def test_it_refuses_viewers_and_outsiders(member, viewer, outsider, team, quota, published):
    run = submit_run(member, team, payload())
    with pytest.raises(PermissionDenied):
        cancel_run(viewer, run)
    with pytest.raises(Http404):
        submit_run(outsider, team, payload(name="sneaky"))
    with pytest.raises(PermissionDenied):
        submit_run(viewer, team, payload(name="peek"))


def test_it_previews_cost_and_admission_without_writing(member, team, quota, published):
    # Twice the same answer (only money counted until the month's end moves with the clock).
    first, second = (dataclasses.replace(preview_run(team, payload(gpus_per_worker=2)), committed_cost=None,
                                         share_of_budget_left=None) for _ in range(2))
    assert first == second
    preview = preview_run(team, payload(gpus_per_worker=2))
    assert preview.outcome == "admit"
    assert preview.cost_per_hour == Decimal("8.2000")
    submit_run(member, team, payload(name="hog", gpus_per_worker=8))
    preview = preview_run(team, payload(gpus_per_worker=2))
    assert preview.outcome == "queue"
    assert preview.message == "waiting for quota: needs 2× a100-80gb, 8 of 8 in use"
    spot = preview_run(team, payload(gpus_per_worker=2, spot=True))
    assert spot.cost_per_hour == Decimal("3.2800")
    assert preview_run(team, payload(flavor="h100-80gb")).outcome == "reject"
    invalid = preview_run(team, payload(name="Bad Name"))
    assert invalid.outcome == "invalid"
    assert invalid.message.startswith("name:")
    assert TrainingRun.objects.count() == 1


def test_it_rolls_back_everything_when_admission_rejects(member, team, quota, published):
    with pytest.raises(ValidationError):
        submit_run(member, team, payload(gpus_per_worker=8, workers=2))
    assert not TrainingRun.objects.exists()


def test_it_seeds_demo_runs_once_per_team(flavors, published):
    from django.contrib.auth import get_user_model

    teams = {}
    for slug, limits in {"ml-research": {"a100-80gb": 8, "h100-80gb": 16, "a100-1g.10gb": 4},
                         "vision": {"a100-80gb": 4, "l4": 2}, "nlp": {"h100-80gb": 8}}.items():
        teams[slug] = make_team(slug)
        seed_team_quotas(teams[slug], limits, Decimal("20000"))
    for slug, username, _ in DEMO_RUNS:
        if not get_user_model().objects.filter(username=username).exists():
            make_user(username)
        user = get_user_model().objects.get(username=username)
        if not user.memberships.filter(team=teams[slug]).exists():
            add_member(teams[slug], user)
    created = seed_demo_runs()
    assert len(created) == len(DEMO_RUNS)
    states = {run.name: run.state for run in created}
    assert states["sweep-lr-1e-4"] == RunState.QUEUED  # waits behind quota in the demo
    assert states["bert-finetune"] == RunState.ADMITTED
    assert seed_demo_runs() == []
    assert TrainingRun.objects.count() == len(DEMO_RUNS)


def test_it_submits_the_demo_runs_from_seed_demo_once(settings, published):
    from io import StringIO

    from django.core.management import call_command

    settings.DEBUG = True
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert f"Submitted {len(DEMO_RUNS)} demo training runs" in out.getvalue()
    assert f"Recorded {len(DEMO_HISTORY)} finished demo runs" in out.getvalue()
    call_command("seed_demo", stdout=StringIO())
    assert TrainingRun.objects.count() == len(DEMO_RUNS) + len(DEMO_HISTORY)
    assert TrainingRun.objects.filter(state=RunState.QUEUED).exists()
    call_command("seed_demo", "--no-runs", stdout=StringIO())
    assert TrainingRun.objects.count() == len(DEMO_RUNS) + len(DEMO_HISTORY)
    # The history is billed as it ran: each run's cost is its ledger's, part of it idle.
    history = TrainingRun.objects.filter(name="seg-notebook").get()
    rows = UsageRecord.objects.filter(ref=history.ref)
    assert history.billed_cost == sum(r.cost for r in rows) and sum(r.idle_gpu_hours for r in rows) == 6
