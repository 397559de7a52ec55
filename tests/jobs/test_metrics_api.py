"""``/api/v1/runs/{id}/metrics/`` (docs/metrics.md): the run token posts its own run's points and
progress, the team reads them; validation (400 with field errors, never 500); idempotence."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.constants import RunState
from jobs.models import RunMetric, TrainingRun
from tests.factories import secret_values
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


def submit(api, **overrides) -> dict:
    response = api.post("/api/v1/runs/", run_payload(checkpoint={"grace_seconds": 60}, **overrides), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def run_client(run_id: int) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret_values(f'run:{run_id}')['SLIPWAY_RUN_TOKEN']}")
    return client


def url(run_id: int) -> str:
    return f"/api/v1/runs/{run_id}/metrics/"


def start(run_id: int) -> None:
    """As the reconcile cycle records it once its pods run (only started runs report anything)."""
    TrainingRun.objects.filter(pk=run_id).update(state=RunState.RUNNING, started_at=timezone.now(),
                                                 attempt_started_at=timezone.now())


@pytest.fixture
def run(api, quota, published) -> dict:
    body = submit(api)
    start(body["id"])
    return body


def test_the_run_token_reports_points_and_progress_and_the_team_reads_them(run, api, viewer, api_client_for):
    batch = {"points": [{"step": s, "name": "loss", "value": 2.0 - s / 100} for s in (0, 10, 20)]
             + [{"step": 20, "name": "accuracy", "value": 0.5}], "progress": {"step": 20, "total": 100}}
    response = run_client(run["id"]).post(url(run["id"]), batch, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["points"] == 4
    assert body["progress"]["step"] == 20 and body["progress"]["total"] == 100 and body["progress"]["percent"] == 20.0
    for reader in (api, api_client_for(viewer)):
        read = reader.get(url(run["id"]))
        assert read.status_code == 200
        assert read.json()["names"] == ["accuracy", "loss"]
        assert read.json()["series"]["loss"] == [[0, 2.0], [10, 1.9], [20, 1.8]]
        assert read.json()["progress"]["step"] == 20
    # The run itself shows its progress (one query for a page of runs).
    assert api.get(f"/api/v1/runs/{run['id']}/").json()["progress"]["total"] == 100
    listed = api.get("/api/v1/runs/").json()["results"]
    assert [r["progress"]["step"] for r in listed if r["id"] == run["id"]] == [20]


def test_a_batch_sent_again_duplicates_nothing_and_the_last_value_of_a_step_wins(run):
    client = run_client(run["id"])
    batch = {"points": [{"step": s, "name": "loss", "value": 1.0} for s in range(50)]}
    for _ in range(2):
        assert client.post(url(run["id"]), batch, format="json").status_code == 200
    assert RunMetric.objects.filter(run_id=run["id"]).count() == 50
    client.post(url(run["id"]), {"points": [{"step": 7, "name": "loss", "value": 0.25},
                                            {"step": 8, "name": "loss", "value": 0.5},
                                            {"step": 8, "name": "loss", "value": 0.75}]}, format="json")
    values = dict(RunMetric.objects.filter(run_id=run["id"], step__in=[7, 8]).values_list("step", "value"))
    assert values == {7: 0.25, 8: 0.75}
    assert RunMetric.objects.filter(run_id=run["id"]).count() == 50


@pytest.mark.parametrize(("body", "field"), [
    ([], "non_field_errors"),
    ({}, "non_field_errors"),
    ({"points": []}, "non_field_errors"),
    ({"points": "loss=1"}, "points"),
    ({"points": [{"step": 1, "name": "loss", "value": 1}] * 1001}, "points"),
    ({"points": [{"step": -1, "name": "loss", "value": 1}]}, "points[0].step"),
    ({"points": [{"step": 1.5, "name": "loss", "value": 1}]}, "points[0].step"),
    ({"points": [{"step": True, "name": "loss", "value": 1}]}, "points[0].step"),
    ({"points": [{"step": 2**63, "name": "loss", "value": 1}]}, "points[0].step"),
    ({"points": [{"step": 2**53 + 1, "name": "loss", "value": 1}]}, "points[0].step"),  # review 5 #6
    ({"progress": {"step": 1, "total": 2**53 + 1}}, "progress.total"),
    ({"points": [{"step": 1, "name": "train/loss", "value": 1}]}, "points[0].name"),
    ({"points": [{"step": 1, "name": "step", "value": 1}]}, "points[0].name"),
    ({"points": [{"step": 1, "name": "x" * 65, "value": 1}]}, "points[0].name"),
    ({"points": [{"step": 1, "name": 7, "value": 1}]}, "points[0].name"),
    ({"points": [{"step": 1, "name": "loss", "value": "0.5"}]}, "points[0].value"),
    ({"points": [{"step": 1, "name": "loss", "value": None}]}, "points[0].value"),
    ({"points": [{"step": 1, "name": "loss", "value": 10**400}]}, "points[0].value"),
    ({"points": [{"step": 1, "name": "loss", "value": 1, "at": "now"}]}, "points[0]"),
    ({"points": [7]}, "points[0]"),
    ({"progress": {"step": 5, "total": 4}}, "progress.step"),
    ({"progress": {"step": 1, "total": 0}}, "progress.total"),
    ({"progress": {"step": 1}}, "progress.total"),
    ({"progress": [1, 2]}, "progress"),
    ({"points": [], "extra": 1}, "non_field_errors"),
])
def test_bad_input_is_a_400_naming_the_field_and_records_nothing(run, body, field):
    response = run_client(run["id"]).post(url(run["id"]), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert not RunMetric.objects.filter(run_id=run["id"]).exists()


@pytest.mark.parametrize("raw", [b'{"points": [{"step": 1, "name": "loss", "value": NaN}]}',
                                 b'{"points": [{"step": 1, "name": "loss", "value": Infinity}]}', b"{", b"\xff"])
def test_non_finite_or_broken_json_is_a_400(run, raw):
    response = run_client(run["id"]).post(url(run["id"]), raw, content_type="application/json")
    assert response.status_code == 400
    assert not RunMetric.objects.filter(run_id=run["id"]).exists()


def test_a_run_has_at_most_32_metric_names(run):
    client = run_client(run["id"])
    names = [{"step": 1, "name": f"m{i}", "value": i} for i in range(32)]
    assert client.post(url(run["id"]), {"points": names}, format="json").status_code == 200
    assert client.post(url(run["id"]), {"points": names}, format="json").status_code == 200  # the same names again
    response = client.post(url(run["id"]), {"points": [{"step": 2, "name": "one-more", "value": 1}]}, format="json")
    assert response.status_code == 400 and "at most 32" in response.json()["errors"]["points"][0]


def test_the_token_reports_for_its_own_run_only_and_reads_nothing(run, api, quota):
    other = submit(api, name="other-run")
    client = run_client(run["id"])
    point = {"points": [{"step": 1, "name": "loss", "value": 1}]}
    assert client.post(url(other["id"]), point, format="json").status_code == 401
    assert client.get(url(run["id"])).status_code == 403
    assert client.get(f"/api/v1/runs/{run['id']}/").status_code == 401  # anywhere else: an unknown token
    assert not RunMetric.objects.exists()


def test_people_read_but_do_not_report_and_outsiders_get_404(run, api, viewer, outsider, api_client_for):
    point = {"points": [{"step": 1, "name": "loss", "value": 1}]}
    assert api.post(url(run["id"]), point, format="json").status_code == 403
    assert api_client_for(viewer).post(url(run["id"]), point, format="json").status_code == 403
    assert api_client_for(outsider).post(url(run["id"]), point, format="json").status_code == 404
    assert api_client_for(outsider).get(url(run["id"])).status_code == 404
    assert APIClient().get(url(run["id"])).status_code == 401
    assert APIClient().post(url(run["id"]), point, format="json").status_code == 401
    assert api.put(url(run["id"]), point, format="json").status_code == 405
    assert not RunMetric.objects.exists()


def test_a_finished_runs_token_is_dead(run, api):
    client = run_client(run["id"])
    assert api.post(f"/api/v1/runs/{run['id']}/cancel/").status_code == 202
    assert client.post(url(run["id"]), {"points": [{"step": 1, "name": "loss", "value": 1}]},
                       format="json").status_code == 401


def test_reads_filter_by_name_and_step_and_bound_the_points(run, api):
    run_client(run["id"]).post(url(run["id"]), {"points": [{"step": s, "name": n, "value": s} for s in range(10)
                                                           for n in ("loss", "acc")]}, format="json")
    body = api.get(url(run["id"]), {"name": "loss", "since_step": 3, "limit": 4}).json()
    assert body["series"] == {"loss": [[4, 4.0], [5, 5.0], [6, 6.0], [7, 7.0]]}
    assert body["names"] == ["acc", "loss"]
    for params, field in (({"limit": 0}, "limit"), ({"limit": "ten"}, "limit"), ({"since_step": "-1"}, "since_step"),
                          ({"name": "a/b"}, "name"), ({"since_step": "²"}, "since_step")):
        response = api.get(url(run["id"]), params)
        assert response.status_code == 400 and field in response.json()["errors"]


def test_a_run_without_the_contract_has_no_token_and_reports_through_its_log(api, quota, published):
    body = api.post("/api/v1/runs/", run_payload(name="plain"), format="json").json()
    assert TrainingRun.objects.get(pk=body["id"]).run_token_hash == ""
    assert api.get(url(body["id"])).json() == {"names": [], "series": {}, "progress": None}


@pytest.mark.parametrize("extra", [2, 12])
def test_the_runs_list_reads_every_runs_progress_in_one_query(api, member, team, flavors, published, extra):
    from quotas.demo import seed_team_quotas

    seed_team_quotas(team, {"a100-80gb": 64})
    ids = [submit(api, name=f"run-{i}", gpus_per_worker=1)["id"] for i in range(extra)]
    for run_id in ids:
        start(run_id)
        run_client(run_id).post(url(run_id), {"progress": {"step": 1, "total": 10}}, format="json")
    with CaptureQueriesContext(connection) as queries:
        listed = api.get("/api/v1/runs/").json()["results"]
    assert all(r["progress"]["step"] == 1 for r in listed)
    assert len([q for q in queries.captured_queries if "jobs_runprogress" in q["sql"]]) == 1


def test_a_runs_stored_points_are_bounded_by_its_budget(run, settings):
    """Security review 5 #7: one run token stored 60,000 rows in 9 s, with no bound. Past
    SLIPWAY_RUN_METRICS_MAX_POINTS a batch is a 409 that says why, and nothing of it is recorded;
    a point that replaces a stored one adds nothing, so a batch sent again still goes through."""
    settings.SLIPWAY_RUN_METRICS_MAX_POINTS = 10
    client = run_client(run["id"])
    first = {"points": [{"step": s, "name": "loss", "value": 1.0} for s in range(8)]}
    assert client.post(url(run["id"]), first, format="json").status_code == 200
    over = client.post(url(run["id"]), {"points": [{"step": s, "name": "loss", "value": 2.0} for s in range(8, 13)]},
                       format="json")
    assert over.status_code == 409
    message = over.json()["errors"]["detail"][0]
    assert "at most 10 metric points" in message and "SLIPWAY_RUN_METRICS_MAX_POINTS" in message
    assert RunMetric.objects.filter(run_id=run["id"]).count() == 8 and not RunMetric.objects.filter(value=2.0).exists()
    # Replacing the 8 stored and adding 2 fits exactly.
    fits = {"points": [{"step": s, "name": "loss", "value": 3.0} for s in range(10)]}
    assert client.post(url(run["id"]), fits, format="json").status_code == 200
    assert client.post(url(run["id"]), fits, format="json").status_code == 200  # sent again: no new rows
    assert RunMetric.objects.filter(run_id=run["id"]).count() == 10


def test_the_log_reader_stops_storing_new_points_at_the_budget(run, settings):
    from jobs import metrics
    from jobs.metric_lines import Point

    settings.SLIPWAY_RUN_METRICS_MAX_POINTS = 5
    stored = metrics.record(TrainingRun.objects.get(pk=run["id"]), [Point(s, "loss", 1.0, None) for s in range(9)],
                            [], timezone.now())
    assert stored == 5 and RunMetric.objects.filter(run_id=run["id"]).count() == 5


def test_a_run_token_is_held_to_its_rate_with_a_429_and_retry_after(run, api, settings):
    """Security review 5 #7: past SLIPWAY_RUN_TOKEN_RATE requests a minute a run token gets 429 with
    Retry-After, in the API's error shape; people reading the same run are not counted."""
    settings.SLIPWAY_RUN_TOKEN_RATE = 3  # counted per token: a new run's starts from nothing
    client = run_client(run["id"])
    batch = {"points": [{"step": 1, "name": "loss", "value": 1.0}]}
    answers = [client.post(url(run["id"]), batch, format="json") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    # A minute may turn meanwhile and start a new count: within 2 × the rate + 1 one is refused all the same.
    for _ in range(4):
        refused = client.post(url(run["id"]), batch, format="json")
        if refused.status_code == 429:
            break
    assert refused.status_code == 429, refused.content
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "SLIPWAY_RUN_TOKEN_RATE" in refused.json()["errors"]["detail"][0]
    checkpoint = client.post(f"/api/v1/runs/{run['id']}/checkpoints/", {"step": 1, "path": "a"}, format="json")
    assert checkpoint.status_code == 429  # one rate for everything the token does
    assert all(api.get(url(run["id"])).status_code == 200 for _ in range(5))  # people are not counted


def test_the_rate_counts_per_token_and_per_minute():
    from jobs.checkpoints import new_run_token
    from jobs.metrics import token_wait

    (_token, first), (_other, second) = new_run_token(), new_run_token()
    minute = 60 * int(time.time() // 60)
    with override_settings(SLIPWAY_RUN_TOKEN_RATE=2):
        assert [token_wait(first, minute + 10), token_wait(first, minute + 20)] == [0, 0]
        assert token_wait(first, minute + 45.5) == 15  # until the minute ends
        assert token_wait(second, minute + 46) == 0  # another token
        assert token_wait(first, minute + 60) == 0  # the next minute
    with override_settings(SLIPWAY_RUN_TOKEN_RATE=0):
        assert all(token_wait(first, minute + 61) == 0 for _ in range(5))  # no bound
