"""What an alert says and to whom: the one event of an episode as it opens (notifications.events.alert_opened).

An idle alert names the workload, its team and what its idle GPUs cost per hour — the figure of the
one cost-per-hour rule — and links to the page that ends it; an endpoint idle at its minimum
replicas is told that this is the capacity it keeps ready, and how to scale to zero. The OOM-risk
alert goes to the team; the hot GPU to platform staff only.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

import fleet.services as fleet
from billing.ledger import cost_per_hour
from cluster.backends.base import GpuReading, WorkloadTelemetry
from core.formatting import format_money
from inference.models import InferenceEndpoint
from inference.services import create_endpoint
from jobs.models import TrainingRun
from notifications import delivery
from notifications.constants import Channel, EventKind
from notifications.forms import EmailForm, WebhookForm
from notifications.models import Delivery, Event
from notifications.services import create_webhook, delivery_log, set_email_kinds
from tests.factories import make_user
from tests.inference.conftest import endpoint_payload
from tests.inference.scripted import show
from tests.jobs.test_reconcile import NS, applied, iso
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload
from workloads.telemetry import alerts

pytestmark = pytest.mark.django_db


def figures(util=90.0, memory=0.5, temp=60.0) -> WorkloadTelemetry:
    """What a cycle measured of one workload: two GPUs, the second the fuller and the hotter."""
    total = 81920.0
    return WorkloadTelemetry((GpuReading("GPU-a", util, total * memory * 0.9, total * (1 - memory * 0.9), temp - 5, 150.0),
                              GpuReading("GPU-b", util, total * memory, total * (1 - memory), temp, 150.0)))


def alert(workload, minutes: int, **measured) -> Event:
    """Feed ``observe`` ``measured`` for ``workload`` once a minute for ``minutes`` (+1); the one event it made."""
    cluster, start = fleet.default_cluster(), timezone.now()
    for minute in range(minutes + 1):
        alerts.observe(cluster, {workload.identity: figures(**measured)}, start + timedelta(minutes=minute))
    [event] = Event.objects.all()
    return event


@pytest.fixture
def running_run(submit, fake_backend):
    run = applied(submit(name="notebook-forgotten"), fake_backend)
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    fake_backend.set_running(NS, run.object_name, units=run.total_units, started=iso(t0))
    rec.reconcile(fake_backend, now=t0)
    return TrainingRun.objects.select_related("team", "flavor").get(pk=run.pk)


def endpoint_showing(member, team, fake_backend, *, running: int) -> InferenceEndpoint:
    """An endpoint (min 1, max 4 replicas) the cluster shows with ``running`` ready replicas."""
    endpoint = create_endpoint(member, team, endpoint_payload(name="chat"))
    assert apply_workload("ep", endpoint.pk) == "applied"
    t0 = timezone.now() - timedelta(minutes=5)
    # Ready at its minimum, wanting more: burst is granted a replica a cycle (the team may hold 4).
    for step, replicas in enumerate(range(1, running + 1)):
        show(fake_backend, InferenceEndpoint.objects.get(pk=endpoint.pk), desired=replicas, ready=replicas, at=t0,
             wants_more=replicas < running)
        rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5 * step))
    endpoint = InferenceEndpoint.objects.select_related("team", "flavor").get(pk=endpoint.pk)
    assert endpoint.open_units == running
    return endpoint


def test_an_idle_run_is_named_with_its_team_the_money_per_hour_and_a_link_to_cancel_it(running_run, settings):
    settings.SLIPWAY_PORTAL_URL = "https://slipway.example.com/"
    run = running_run
    event = alert(run, 30, util=2.0)
    per_hour = cost_per_hour(run.unit_price(), run.open_units)  # the one rule, asked directly
    assert per_hour > 0 and per_hour == run.estimated_cost_per_hour  # all its units run: the run page's figure
    money = format_money(per_hour, precise=True)
    assert event.event_kind == EventKind.GPU_IDLE and event.ref == run.ref and event.team == run.team
    assert event.title == f"Run notebook-forgotten (#{run.pk}) of team ml-research: GPUs idle for 30 min, wasting {money} per hour"
    link = f"https://slipway.example.com/runs/{run.pk}/cancel/"
    assert event.text == f"{event.title} (utilization 2%, under 10%). If nobody needs it, cancel it: {link}"
    assert event.details["url"] == link and event.details["at_minimum"] is False
    assert (Decimal(event.details["cost_per_hour"]), event.details["currency"]) == (per_hour, "USD")


def test_an_endpoint_idle_at_its_minimum_is_told_to_scale_to_zero_not_that_it_wastes(
        member, team, ep_quota, published, fake_backend):
    endpoint = endpoint_showing(member, team, fake_backend, running=1)
    event = alert(endpoint, 30, util=1.0)
    assert event.title == f"Endpoint chat (#{endpoint.pk}) of team ml-research: GPUs idle for 30 min at its minimum replicas"
    assert "not idle waste" in event.text and "wasting" not in event.text
    assert "set its minimum replicas to 0" in event.text and "scales to zero" in event.text
    assert format_money(endpoint.cost_per_hour_now, precise=True) in event.text
    assert event.text.endswith(f"http://localhost:8000/endpoints/{endpoint.pk}/edit/")
    assert event.details["at_minimum"] is True


def test_an_endpoint_idle_above_its_minimum_wastes_its_burst_like_any_workload(
        member, team, ep_quota, published, fake_backend):
    endpoint = endpoint_showing(member, team, fake_backend, running=2)
    event = alert(endpoint, 30, util=1.0)
    money = format_money(endpoint.cost_per_hour_now, precise=True)  # the endpoint's API figure: 2 replicas' units
    assert event.title == f"Endpoint chat (#{endpoint.pk}) of team ml-research: GPUs idle for 30 min, wasting {money} per hour"
    assert event.text.endswith(f"If nobody needs it, delete it: http://localhost:8000/endpoints/{endpoint.pk}/delete/")


def test_the_oom_risk_goes_to_the_team_its_subscribers_and_webhooks(running_run, member, team_admin, team):
    set_email_kinds(member, team, [EventKind.GPU_MEMORY])
    hook, _secret = create_webhook(team_admin, team, "https://hooks.example.com/slipway", [EventKind.GPU_MEMORY])
    event = alert(running_run, 5, memory=0.97)
    assert event.event_kind == EventKind.GPU_MEMORY
    assert event.title == f"Run notebook-forgotten (#{running_run.pk}) of team ml-research: GPU memory 97% full (OOM risk)"
    assert "over 95% of a GPU's memory has been in use for 5 min on GPU GPU-b" in event.text  # the fullest
    assert "OOMKilled" in event.text and event.details["gpu"] == "GPU-b"
    delivery.fan_out(event.key)
    assert sorted((d.channel, d.target) for d in Delivery.objects.all()) == [
        (Channel.EMAIL, "mia@example.com"), (Channel.WEBHOOK, hook.url)]


def test_a_hot_gpu_goes_to_platform_staff_alone(running_run, member, team_admin, team, staff, settings):
    set_email_kinds(member, team, [EventKind.GPU_MEMORY, EventKind.GPU_IDLE])
    create_webhook(team_admin, team, "https://hooks.example.com/slipway", [EventKind.GPU_IDLE, EventKind.GPU_MEMORY])
    quiet = make_user("quiet", staff=True)
    quiet.email = ""  # a staff account without an address gets nothing
    quiet.save()
    event = alert(running_run, 5, temp=91.0)
    assert event.event_kind == EventKind.GPU_HOT and event.team == team
    assert event.title == f"GPU too hot: 91 °C under run notebook-forgotten (#{running_run.pk}) of team ml-research"
    assert event.text.startswith("GPU GPU-b has been over 85 °C for 5 min (91 °C now)")  # the hottest
    assert "on cluster default" in event.text
    assert "platform staff" in event.text
    delivery.fan_out(event.key)
    assert [(d.channel, d.target) for d in Delivery.objects.all()] == [(Channel.EMAIL, "sam@example.com")]
    # The team's admins do not read staff addresses in their delivery log.
    assert delivery_log(team) == []


def test_teams_cannot_subscribe_to_the_staff_alert(member, team, team_admin):
    with pytest.raises(Exception, match="Unknown kinds of event: gpu_hot"):
        set_email_kinds(member, team, [EventKind.GPU_HOT])
    with pytest.raises(Exception, match="Unknown kinds of event: gpu_hot"):
        create_webhook(team_admin, team, "https://hooks.example.com/slipway", [EventKind.GPU_HOT])
    offered = {value for value, _label in EmailForm().fields["kinds"].choices}
    assert offered == {value for value, _label in WebhookForm().fields["kinds"].choices}
    assert EventKind.GPU_IDLE in offered and EventKind.GPU_MEMORY in offered and EventKind.GPU_HOT not in offered


def test_a_viewer_may_subscribe_to_the_idle_alert(team, viewer):
    assert set_email_kinds(viewer, team, [EventKind.GPU_IDLE]) == [EventKind.GPU_IDLE]
