"""``/api/v1/sweeps/``: create and its dry run, the field errors, who may do what, and the money figures."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.pricing import Quote
from jobs.models import TrainingRun
from sweeps import driver, services, spec, work
from sweeps.constants import MAX_GRID_POINTS
from sweeps.models import Study, Sweep
from tests.sweeps.support import matrix_sweep
from workloads import secrets
from workloads.estimates.preview import Preview
from workloads.models import SecretEnv

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(quota, published, fake_backend):
    return quota


def body(**changes) -> dict:
    return {"team": "ml-research", **matrix_sweep("lr"), **changes}


def test_the_dry_run_shows_the_shape_and_the_cost_range_and_creates_nothing(api, ready):
    asha = {"type": "asha", "min_resource": 1, "reduction_factor": 3, "max_resource": 27}
    answer = api.post("/api/v1/sweeps/?dry_run=1", body(max_trials=27, pruner=asha, max_cost="1000"), format="json")
    assert answer.status_code == 200, answer.content
    shape = answer.json()
    assert [(r["steps"], r["trials"]) for r in shape["rungs"]] == [(1, 27), (3, 9), (9, 3), (27, 1)]
    assert shape["trial"]["outcome"] == "admit" and shape["trials"] == 27
    # A whole trial: its cost per hour (the preview's, the one price rule) for its 30-minute limit.
    trial = Decimal(shape["trial"]["cost"])
    assert trial == (Decimal(shape["trial"]["cost_per_hour"]) / 2).quantize(Decimal("0.01")) and trial > 0
    # High: every trial to its limit; low: ASHA's nominal shape, 81 of 729 trial-steps.
    assert Decimal(shape["cost"]["high"]) == (trial * 27).quantize(Decimal("0.01"))
    assert float(shape["cost"]["low"]) == pytest.approx(float(trial) * 27 * 81 / 729, abs=0.02)
    capped = api.post("/api/v1/sweeps/?dry_run=1", body(max_trials=10, max_cost=str(trial * 4)), format="json").json()
    assert capped["trials_within_cap"] == 4 and Decimal(capped["cost"]["high"]) == (trial * 4).quantize(Decimal("0.01"))
    assert not Sweep.objects.exists() and not Study.objects.exists()


def test_bad_fields_come_back_together_and_the_bases_under_its_own_name(api, ready):
    answer = api.post("/api/v1/sweeps/", body(name="Bad", run={**matrix_sweep()["run"], "image": "not an image!",
                                                              "gpus_per_worker": 0}), format="json")
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert set(errors) == {"name"}  # the sweep's own fields first: the base is checked once they are right
    answer = api.post("/api/v1/sweeps/", body(run={**matrix_sweep()["run"], "image": "not an image!"}), format="json")
    assert set(answer.json()["errors"]) == {"run.image"}
    limitless = {k: v for k, v in matrix_sweep()["run"].items() if k != "max_runtime_minutes"}
    assert "run.max_runtime_minutes" in api.post("/api/v1/sweeps/", body(run=limitless), format="json").json()["errors"]
    # A trial the team's quota can never hold is refused before anything runs.
    huge = api.post("/api/v1/sweeps/", body(run={**matrix_sweep()["run"], "gpus_per_worker": 8, "workers": 4}),
                    format="json")
    assert huge.status_code == 400 and "run" in huge.json()["errors"]
    assert not Sweep.objects.exists() and not Study.objects.exists()


def test_a_number_past_a_floats_range_is_a_400_with_its_field(api, ready):
    choice = api.post("/api/v1/sweeps/?dry_run=1",
                      body(parameters={"bs": {"type": "categorical", "choices": [16, 10 ** 400]}}), format="json")
    assert choice.status_code == 400 and set(choice.json()["errors"]) == {"parameters.bs"}
    bound = api.post("/api/v1/sweeps/", body(parameters={"n": {"type": "int", "min": 0, "max": 10 ** 400}}),
                     format="json")
    assert bound.status_code == 400
    assert bound.json()["errors"] == {"parameters.n": [f"Must be within ±{spec.MAX_BOUND}."]}
    assert not Sweep.objects.exists()


def test_a_huge_grid_is_a_400_before_any_of_it_is_listed(api, ready):
    refused = {"sampler": [f"The grid has over 10**15 points; at most {MAX_GRID_POINTS}."]}
    ints = api.post("/api/v1/sweeps/?dry_run=1",
                    body(sampler="grid", parameters={"n": {"type": "int", "min": 0, "max": 2 ** 53}}), format="json")
    assert ints.status_code == 400 and ints.json()["errors"] == refused
    floats = api.post("/api/v1/sweeps/", body(sampler="grid", parameters={
        "x": {"type": "float", "min": 0, "max": 1e15, "step": 1}}), format="json")
    assert floats.status_code == 400 and floats.json()["errors"] == refused
    assert not Sweep.objects.exists()


def test_the_trials_secret_env_is_sealed_apart_shown_masked_and_reaches_each_trial(api, ready):
    secret = "wandb-9f8e7d6c5b4a"
    base = {**matrix_sweep()["run"], "secret_env": {"WANDB_API_KEY": secret}}
    empty = api.post("/api/v1/sweeps/?dry_run=1", body(run={**base, "secret_env": {"WANDB_API_KEY": ""}}), format="json")
    assert empty.status_code == 400 and "run.secret_env" in empty.json()["errors"]  # the run kind's own rule
    created = api.post("/api/v1/sweeps/", body(run=base), format="json")
    assert created.status_code == 201, created.content
    sweep = Sweep.objects.get(pk=created.json()["id"])
    assert created.json()["run"]["secret_env"] == {"WANDB_API_KEY": "••••••"}
    assert secret not in created.content.decode() and secret not in json.dumps(sweep.base)
    assert secret not in api.get(f"/api/v1/sweeps/{sweep.pk}/").content.decode()
    driver.advance(sweep.pk)
    run = TrainingRun.objects.get(workload__trial__sweep=sweep, workload__trial__number=1)
    assert secrets.names(run) == ("WANDB_API_KEY",)
    assert dict(secrets.unsealed(run.ref)) == {"WANDB_API_KEY": secret}  # what its env Secret is built from
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["secret_env"] == {"WANDB_API_KEY": "••••••"}
    # Deleted with the sweep (a finished one).
    Sweep.objects.filter(pk=sweep.pk).update(state="completed")
    assert api.delete(f"/api/v1/sweeps/{sweep.pk}/").status_code == 204
    assert secrets.unsealed(sweep.secret_ref) == () and not SecretEnv.objects.filter(ref=sweep.secret_ref).exists()


def test_members_create_viewers_read_outsiders_see_nothing(api, ready, api_client_for, viewer, outsider):
    created = api.post("/api/v1/sweeps/", body(), format="json")
    assert created.status_code == 201, created.content
    sweep = created.json()
    assert (sweep["state"], sweep["trials"]["active"], sweep["best_trial"]) == ("running", 0, None)
    assert sweep["spend"] == {"spent": "0.00", "committed": "0.00", "gpu_hours": "0.00", "committed_gpu_hours": "0.00",
                              "currency": "USD"}
    assert api.post("/api/v1/sweeps/", body(), format="json").json()["errors"]["name"]  # a live name is taken
    reader = api_client_for(viewer)
    assert reader.get(f"/api/v1/sweeps/{sweep['id']}/").status_code == 200
    assert reader.post("/api/v1/sweeps/", body(name="mine"), format="json").status_code == 403
    assert reader.post(f"/api/v1/sweeps/{sweep['id']}/stop/").status_code == 403
    stranger = api_client_for(outsider)
    assert stranger.get(f"/api/v1/sweeps/{sweep['id']}/").status_code == 404
    assert stranger.get("/api/v1/sweeps/").json()["results"] == []
    assert stranger.get("/api/v1/sweeps/?team=ml-research").status_code == 404
    assert api.get("/api/v1/sweeps/?state=lost").status_code == 400
    # Left empty, it is no state either (the schema's enum has none): a 400 on the field, not every sweep.
    assert api.get("/api/v1/sweeps/?state=").json() == {"errors": {"state": [
        "Must be one of: running, stopping, completed, stopped."]}}
    assert [s["name"] for s in api.get("/api/v1/sweeps/?state=running").json()["results"]] == ["lr"]
    # A live sweep is not deleted; stopped (no trial launched yet), it ends at its next act and then may be.
    assert api.delete(f"/api/v1/sweeps/{sweep['id']}/").status_code == 409
    assert api.post(f"/api/v1/sweeps/{sweep['id']}/stop/").json()["state"] == "stopping"


def test_a_whole_trial_is_counted_at_the_dearest_cluster_of_its_flavor(flavors):
    """Regression (bench/sweeps.py found it): a trial quoted on the cheaper cluster and placed on the dearer one
    passed the cap. The caps count a whole trial at the top of the quote's range; the range's low end stays at
    the price quoted now."""
    request = spec.parse(body(max_trials=9, max_cost="100",
                              pruner={"type": "asha", "min_resource": 1, "reduction_factor": 3, "max_resource": 9}),
                         "run")
    quote = Quote(Decimal("6.40"), "west", low=Decimal("6.40"), high=Decimal("7.20"))
    shape = services._shape(request, Preview("admit", "", cost_per_hour=Decimal("12.80"),
                                             estimated_total_cost=Decimal("6.40"), price=quote))
    assert shape.trial_cost == Decimal("7.20") and shape.cost_high == Decimal("7.20") * 9
    assert shape.cost_low == Decimal("6.40") * 9 * Decimal(str(round(spec.low_share(9, request.pruner), 6)))
    assert shape.trial_gpu_hours == Decimal(1)  # its unit-hours whatever the price: 1 unit for an hour


def test_a_run_named_after_a_trial_to_come_does_not_stop_the_sweep(api, ready):
    """A teammate's run named ``lr-t002`` before trial 2 launched refused that trial on its name, and the sweep stopped
    launching for good. The trial takes the next free name (``lr-t002-2``), which the API and its page show."""
    from tests.jobs.conftest import run_payload

    created = api.post("/api/v1/sweeps/", body(parallel=2), format="json")
    assert created.status_code == 201, created.content
    sweep_id = created.json()["id"]
    held = api.post("/api/v1/runs/", run_payload(name="lr-t002"), format="json")
    assert held.status_code == 201, held.content
    driver.advance(sweep_id)
    sweep = Sweep.objects.get(pk=sweep_id)
    assert sweep.launching and "stopped launching" not in sweep.reason
    trials = api.get(f"/api/v1/sweeps/{sweep_id}/trials/").json()
    assert [(t["number"], t["name"], t["state"]) for t in trials] == [(1, "lr-t001", "active"),
                                                                      (2, "lr-t002-2", "active")]
    assert TrainingRun.objects.get(pk=trials[1]["run_id"]).name == "lr-t002-2"
    # The sweep's part is cut to keep a long sweep's name within a run name's 40 characters.
    assert api.post("/api/v1/runs/", run_payload(name="x" * 35 + "-t003"), format="json").status_code == 201
    long = Sweep(name="x" * 35, team=sweep.team)
    assert driver.free_name(long, work.trial_kind(), 3) == "x" * 33 + "-t003-2"
    assert driver.free_name(long, work.trial_kind(), 4) == "x" * 35 + "-t004"
