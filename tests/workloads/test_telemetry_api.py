"""GET …/telemetry/ of runs, endpoints and workspaces: the series the pages' charts draw, tenant-scoped, bad input a 400."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from datetime import timezone as tz

import pytest
from django.db import connection
from django.utils import timezone

from cluster.backends.base import GpuReading, WorkloadTelemetry
from inference import services as endpoints
from tests.inference.conftest import endpoint_payload
from workloads.models import GpuTelemetry
from workloads.telemetry import readings as telemetry
from workloads.telemetry import series as telemetry_series
from workloads.telemetry.series import CHART_POINTS, now_figures
from workspaces import services as workspaces

pytestmark = pytest.mark.django_db

EMBEDDED = re.compile(r'<script id="gpu-telemetry-data" type="application/json">(.*?)</script>', re.S)


def two_gpus(util: float) -> WorkloadTelemetry:
    return WorkloadTelemetry((GpuReading("GPU-a", util, 20480.0, 61440.0, 60.0, 250.0),
                              GpuReading("GPU-b", util / 2, 10240.0, None, 55.5, float("nan"))))


def history(workload, minutes: int, end=None) -> None:
    """``minutes`` minute rows of ``workload`` up to ``end`` (now), the older ones folded as the beat task does."""
    end = end or timezone.now()
    type(workload).objects.filter(pk=workload.pk).update(started_at=end - timedelta(minutes=minutes))
    workload.refresh_from_db()
    for i in range(minutes):
        telemetry.record(None, {workload.identity: two_gpus(40.0 + i % 50)}, end - timedelta(minutes=minutes - 1 - i))
    telemetry.compact(end)


def embedded(response) -> dict:
    return json.loads(EMBEDDED.search(response.content.decode()).group(1))


@pytest.fixture
def run(submit):
    return submit()


@pytest.fixture
def endpoint(member, team, ep_quota, published):
    return endpoints.create_endpoint(member, team, endpoint_payload())


def test_the_run_page_draws_what_the_api_answers(run, member, client, api):
    end = telemetry.floor_to(timezone.now(), 600) + timedelta(minutes=5)
    history(run, 300, end)  # 5 hours: minutes before end - 65 min (whole slots past the hour) folded
    answer = api.get(f"/api/v1/runs/{run.pk}/telemetry/").json()
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/")
    assert embedded(page) == answer
    assert answer["gpus"] == ["GPU-a", "GPU-b"] and answer["points"] == CHART_POINTS
    util = {line["gpu"]: line for line in answer["series"]["util_pct"]}
    steps = [b - a for a, b in zip(util["GPU-a"]["t"], util["GPU-a"]["t"][1:], strict=False)]
    assert steps == [600] * 24 + [60] * 65  # 24 ten-minute slots, then 66 minutes (past the last whole slot)
    assert [line["gpu"] for line in answer["series"]["fb_total_mib"]] == ["GPU-a"]  # GPU-b reports no FB_FREE
    assert answer["series"]["fb_total_mib"][0]["v"][-1] == 81920
    assert answer["series"]["power_w"][1:] == []  # GPU-b's power is NaN throughout: no line
    assert f'data-url="/api/v1/runs/{run.pk}/telemetry/"' in page.content.decode()


def test_the_endpoint_page_draws_what_the_api_answers(endpoint, member, client, api):
    history(endpoint, 5)
    answer = api.get(f"/api/v1/endpoints/{endpoint.pk}/telemetry/").json()
    client.force_login(member)
    assert embedded(client.get(f"/endpoints/{endpoint.pk}/")) == answer
    assert answer["ref"] == endpoint.ref and len(answer["series"]["temp_c"][0]["t"]) == 5


def test_the_workspace_page_draws_what_the_api_answers_to_its_team_alone(
        member, team, quota, published, client, api, api_client_for, outsider):
    workspace = workspaces.create_workspace(member, team, {"name": "explore", "flavor": "a100-80gb", "gpus": 1})
    history(workspace, 5)
    url = f"/api/v1/workspaces/{workspace.pk}/telemetry/"
    answer = api.get(url).json()
    client.force_login(member)
    page = client.get(workspace.get_absolute_url())
    assert embedded(page) == answer and f'data-url="{url}"' in page.content.decode()
    assert answer["ref"] == workspace.ref and answer["gpus"] == ["GPU-a", "GPU-b"]
    assert api_client_for(outsider).get(url).status_code == 404
    client.force_login(outsider)
    assert client.get(workspace.get_absolute_url()).status_code == 404


def test_since_and_step(run, api):
    end = telemetry.floor_to(timezone.now(), 600) + timedelta(minutes=5)
    history(run, 120, end)  # the first point: the 10-minute slot of end - 2 h: 125 minutes before end
    full = api.get(f"/api/v1/runs/{run.pk}/telemetry/").json()
    since = full["series"]["util_pct"][0]["t"][-10]
    recent = api.get(f"/api/v1/runs/{run.pk}/telemetry/", {"since": since}).json()
    assert recent["series"]["util_pct"][0]["t"] == full["series"]["util_pct"][0]["t"][-10:]
    coarse = api.get(f"/api/v1/runs/{run.pk}/telemetry/", {"step": 1800}).json()
    assert coarse["points"] == 6  # 125 minutes at one point per half hour, both ends included
    assert len(coarse["series"]["util_pct"][0]["t"]) == 6
    iso = api.get(f"/api/v1/runs/{run.pk}/telemetry/", {"since": recent["until"]}).json()
    assert iso["since"] == recent["until"] and len(iso["series"]["util_pct"][0]["t"]) == 1
    # Any offset Python reads is the same instant in UTC (PostgreSQL refuses displacements past 15:59).
    odd = datetime.fromisoformat(recent["until"].replace("Z", "+00:00")).astimezone(tz(-timedelta(hours=19, minutes=23)))
    shifted = api.get(f"/api/v1/runs/{run.pk}/telemetry/", {"since": odd.isoformat()})
    assert shifted.status_code == 200 and shifted.json()["since"] == recent["until"]


@pytest.mark.parametrize(("params", "field"), [
    ({"since": "yesterday"}, "since"), ({"since": "2026-13-01T00:00:00Z"}, "since"), ({"since": "99999999999999"}, "since"),
    ({"step": "0"}, "step"), ({"step": "-5"}, "step"), ({"step": "1.5"}, "step"), ({"step": "99999999"}, "step"),
    ({"step": "²"}, "step"),
])
def test_bad_input_is_a_400_naming_it(run, api, params, field):
    response = api.get(f"/api/v1/runs/{run.pk}/telemetry/", params)
    assert response.status_code == 400 and list(response.json()["errors"]) == [field]


def test_another_team_sees_nothing(run, endpoint, api_client_for, outsider, client):
    history(run, 3)
    history(endpoint, 3)
    stranger = api_client_for(outsider)
    assert stranger.get(f"/api/v1/runs/{run.pk}/telemetry/").status_code == 404
    assert stranger.get(f"/api/v1/endpoints/{endpoint.pk}/telemetry/").status_code == 404
    client.force_login(outsider)
    assert client.get(f"/runs/{run.pk}/").status_code == 404


def test_a_workload_without_telemetry_answers_empty(run, api, member, client):
    answer = api.get(f"/api/v1/runs/{run.pk}/telemetry/").json()
    assert answer == {"ref": run.ref, "since": None, "until": None, "points": CHART_POINTS, "gpus": [],
                      "series": {"util_pct": [], "fb_used_mib": [], "fb_total_mib": [], "temp_c": [], "power_w": []}}
    client.force_login(member)
    assert "No GPU telemetry yet" in client.get(f"/runs/{run.pk}/").content.decode()


def test_the_gpus_now_of_the_api_are_the_pages(run, api, member, client):
    history(run, 2)
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    # GPU-b reports no FB_FREE: its memory in use counts, the size of all of it cannot be told.
    assert (body["gpu_utilization"], body["gpu_memory_used_gb"], body["gpu_memory_total_gb"]) == (30.8, 30.0, None)
    client.force_login(member)
    words = now_figures([run], timezone.now())[run.ref].words
    assert words == "30.8 % busy, 30 GiB memory in use (2 GPUs)"
    assert words in client.get(f"/runs/{run.pk}/").content.decode()
    listed = api.get("/api/v1/runs/").json()["results"][0]
    assert listed["gpu_utilization"] == 30.8
    telemetry.record(None, {run.identity: WorkloadTelemetry((GpuReading("GPU-a", 90.0, 40960.0, 40960.0, 70.0, 300.0),))},
                     timezone.now())
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert (body["gpu_utilization"], body["gpu_memory_used_gb"], body["gpu_memory_total_gb"]) == (90.0, 40.0, 80.0)
    assert "90 % busy, 40 of 80 GiB memory in use (1 GPU)" in client.get(f"/runs/{run.pk}/").content.decode()


def test_the_rows_read_the_same_on_postgresql_in_binary_as_through_the_orm(run, monkeypatch):
    """PostgreSQL reads a workload's rows in binary (bench/telemetry.py); SQLite (the demo's default) through the ORM."""
    history(run, 90)
    fast = telemetry_series._rows(run.team_id, run.ref, None)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    assert [(*row[:4], bytes(row[4])) for row in telemetry_series._rows(run.team_id, run.ref, None)] == [
        (*row[:4], bytes(row[4])) for row in fast]
    assert len(fast) == GpuTelemetry.objects.filter(ref=run.ref).count() > 1


def test_a_run_queued_again_shows_no_gpus_now_and_its_next_attempt_only_its_own(run, api, member, client):
    """Issue 46: GPU figures belong to an attempt; a run queued again after a preemption holds no GPU now."""
    history(run, 3)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["gpu_utilization"] is not None
    # Preempted and queued again (workloads.lifecycle.requeue's fields): its second attempt has not started.
    type(run).objects.filter(pk=run.pk).update(state="queued", attempt=2, attempt_started_at=None)
    run.refresh_from_db()
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert (body["gpu_utilization"], body["gpu_memory_used_gb"]) == (None, None)
    assert api.get("/api/v1/runs/").json()["results"][0]["gpu_utilization"] is None
    client.force_login(member)
    assert "% busy" not in client.get(f"/runs/{run.pk}/").content.decode()
    # Its second attempt started this minute: the first attempt's minutes before it are not its figures.
    type(run).objects.filter(pk=run.pk).update(state="running", attempt_started_at=timezone.now() + timedelta(minutes=1))
    run.refresh_from_db()
    assert now_figures([run], timezone.now()) == {}
