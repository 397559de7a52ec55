"""Open alerts where people meet them: the run and endpoint pages (in-app), the staff's admin console,
and the page an idle alert links to. A hot GPU is staff's: the team's pages do not show it."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from core.formatting import format_money
from inference.models import InferenceEndpoint
from inference.services import create_endpoint
from jobs.models import TrainingRun
from tests.factories import hold_of
from tests.inference.conftest import endpoint_payload
from workloads.models import AlertEpisode
from workloads.telemetry.alert_rules import AlertKind

pytestmark = pytest.mark.django_db
State = AlertEpisode.State


@pytest.fixture
def run(member, team, quota, flavors):
    run = TrainingRun.objects.create(team=team, created_by=member, name="stuck", flavor=flavors["a100-80gb"],
                                     state="running", image="registry.example.com/ml/t:1", command=["python"],
                                     gpus_per_worker=2, started_at=timezone.now() - timedelta(hours=1))
    hold_of(run, timezone.now() - timedelta(hours=1), 2)
    return run


def episode(workload, kind: AlertKind, state=State.OPEN, **facts) -> AlertEpisode:
    since = timezone.now() - timedelta(minutes=40)
    return AlertEpisode.objects.create(ref=workload.ref, alert_kind=kind, team=workload.team, state=state, since=since,
                                       opened_at=since + timedelta(minutes=30), **facts)


def test_the_run_page_shows_its_open_idle_and_memory_alerts_with_the_money(client, member, run):
    episode(run, AlertKind.IDLE, value=2.0, threshold=10.0, after_minutes=30, cost_per_hour=Decimal("8.20"))
    episode(run, AlertKind.MEMORY, value=97.4, threshold=95.0, after_minutes=5)
    episode(run, AlertKind.HOT, value=91.0, threshold=85.0, after_minutes=5)
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="alert-gpu_idle"' in page and "utilization 2%, under 10% for 30 min or more" in page
    assert f"wasting {format_money(Decimal('8.20'))} per hour" in page
    assert 'id="alert-gpu_memory"' in page and "97% of a GPU's memory in use (over 95%)" in page
    assert 'id="alert-gpu_hot"' not in page  # staff's
    # The htmx status panel (polled every 5 s) carries them too.
    partial = client.get(f"/runs/{run.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="alert-gpu_idle"' in partial


def test_a_pending_alert_is_not_shown(client, member, run):
    AlertEpisode.objects.create(ref=run.ref, alert_kind=AlertKind.IDLE, team=run.team, since=timezone.now())
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="alert-' not in page and 'id="past-alert-' not in page


def test_an_oom_risk_alert_that_closed_as_the_run_ended_stays_on_its_page(client, member, run):
    """Issue 46: the demo's yolo-train opened its OOM-risk alert 3 minutes before it ended; the episode
    closed with the run and the page, where the alert's message sends people, said nothing of it."""
    from workloads.telemetry import alerts
    from workloads.telemetry.alert_rules import Rule
    row = AlertEpisode.objects.create(ref=run.ref, alert_kind=AlertKind.MEMORY, team=run.team,
                                      since=timezone.now() - timedelta(minutes=8), cluster=None)
    assert alerts._open(row, run, Rule(AlertKind.MEMORY, 95.0, True, timedelta(minutes=5), timedelta(minutes=5)),
                        97.6, "GPU-a", timezone.now() - timedelta(minutes=3))
    TrainingRun.objects.filter(pk=run.pk).update(state="succeeded", finished_at=timezone.now())
    row.refresh_from_db()
    assert alerts._end(row, timezone.now())  # what the cycle does to the episode of work that stopped holding
    episode(run, AlertKind.HOT, state=State.CLOSED, value=91.0, threshold=85.0, after_minutes=5)
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="alert-gpu_memory"' not in page  # not open any more
    assert f'id="past-alert-{row.pk}"' in page and "Alert GPU memory nearly full (OOM risk)" in page
    assert "98% of a GPU's memory in use (over 95%)" in page and "(closed)" in page
    assert "GPU too hot" not in page and "over 85%" not in page  # the hot GPU stays staff's


def test_an_endpoint_at_its_minimum_is_shown_how_to_scale_to_zero(client, member, team, ep_quota, published):
    endpoint = create_endpoint(member, team, endpoint_payload(name="chat", min_replicas=1, max_replicas=2))
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state="ready", replicas=1)
    QuotaHold.objects.held().filter(ref=endpoint.ref).update(billed_until=timezone.now(), open_units=1)
    episode(endpoint, AlertKind.IDLE, value=1.0, threshold=10.0, after_minutes=30, cost_per_hour=Decimal("4.10"),
            at_minimum=True)
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert 'id="alert-gpu_idle"' in page and "at its minimum replicas" in page
    assert "set its minimum replicas to 0 to scale to zero" in page and "wasting" not in page


def test_staff_see_every_episode_in_the_admin_console_hot_gpus_included(staff_client, run):
    episode(run, AlertKind.HOT, value=91.0, threshold=85.0, after_minutes=5, gpu="node-1/3")
    page = staff_client.get("/admin/workloads/alertepisode/").content.decode()
    assert "gpu_hot" in page and run.ref in page and "node-1/3" in page
    assert staff_client.get("/admin/workloads/alertepisode/add/").status_code == 403  # the cycle writes them
