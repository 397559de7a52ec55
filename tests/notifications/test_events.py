"""Events are recorded where the state moves, once, in the move's transaction; the fan-out follows after commit.

The reconcile cycle runs against the scripted cluster (tests/fakes.py); a cycle replayed over
the same observation records nothing more, and a move rolled back records nothing at all.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from billing.events import budget_alert
from billing.ledger import record_usage
from billing.models import TeamBudget
from core.writes import run_together
from inference.constants import EndpointState
from inference.models import InferenceEndpoint
from inference.services import create_endpoint
from jobs.constants import RunState
from jobs.models import TrainingRun
from notifications import delivery, events
from notifications.constants import Channel, EventKind
from notifications.models import Delivery, EmailSubscription, Event, Webhook
from notifications.services import create_webhook, set_email_kinds
from teams.models import AuditEvent, Role
from teams.services import audit, audit_write
from tests.factories import add_member, make_user
from tests.inference.conftest import endpoint_payload
from tests.inference.scripted import show
from tests.jobs.test_reconcile import NS, applied, iso
from tests.jobs.test_spot_interruption import disrupt, running  # noqa: F401  (the running-run fixture)
from workloads import lifecycle
from workloads.cycle import reconcile as rec
from workloads.models import ReasonCode
from workloads.registry import kind_of
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db
FAN_OUT = "notifications.tasks.fan_out"


def fan_outs(published) -> list[str]:
    return [args[0] for name, args in published if name == FAN_OUT]


def test_it_records_a_run_success_once_and_a_replayed_cycle_records_nothing(
        submit, fake_backend, published, django_capture_on_commit_callbacks):
    run = applied(submit(), fake_backend)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_finished(NS, run.object_name, ok=True, started=iso(t0), finished=iso(t0 + timedelta(minutes=5)))
    with django_capture_on_commit_callbacks(execute=True):
        rec.reconcile(fake_backend)
        rec.reconcile(fake_backend)
    event = Event.objects.get()
    assert (event.event_kind, event.key, event.ref, event.team.slug) == (
        "run_succeeded", f"run_succeeded:{run.ref}", run.ref, "ml-research")
    assert event.text == f"Run bert-finetune (#{run.pk}) of team ml-research succeeded."
    assert fan_outs(published) == [event.key]


def test_it_records_a_failed_run_with_its_reason(submit, fake_backend, django_capture_on_commit_callbacks):
    run = applied(submit(), fake_backend)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_finished(NS, run.object_name, ok=False, started=iso(t0), finished=iso(t0), oom=True)
    rec.reconcile(fake_backend)
    event = Event.objects.get()
    assert event.event_kind == "run_failed" and event.title == f"Run bert-finetune (#{run.pk}) of team ml-research failed"
    assert "OOMKilled" in event.text and event.details["state"] == RunState.FAILED


def test_a_failure_rolled_back_with_its_transaction_leaves_no_event(submit, fake_backend, published):
    run = applied(submit(), fake_backend)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert lifecycle.fail(run, "gave up", ReasonCode.CLUSTER_UNREACHABLE)
        raise RuntimeError("the caller's transaction fails after the move")
    run.refresh_from_db()
    assert run.state != RunState.FAILED
    assert not Event.objects.exists()
    assert lifecycle.fail(run, "gave up", ReasonCode.CLUSTER_UNREACHABLE)
    assert Event.objects.get().key == f"run_failed:{run.ref}"


def test_a_spot_interruption_is_a_preemption_event(running, fake_backend):  # noqa: F811
    run = running(spot=True)
    disrupt(fake_backend, run)
    rec.reconcile(fake_backend)
    rec.reconcile(fake_backend)
    event = Event.objects.get(event_kind=EventKind.PREEMPTED)
    assert event.ref == run.ref and event.details["cause"] == "spot"
    assert event.text.startswith(f"Run bert-finetune (#{run.pk}) of team ml-research interrupted: spot capacity reclaimed")


def test_the_budget_alert_is_one_event_a_month(member, team, quota, fake_backend):
    now = timezone.now()
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("1"), alert_threshold_percent=80)
    record_usage(team, "run:old", "a100-80gb", member, now - timedelta(minutes=20), now, 1, False)
    for _ in range(3):
        rec.reconcile(fake_backend)
    event = Event.objects.get()
    assert event.event_kind == EventKind.BUDGET_ALERT and event.title == "Team ml-research passed 80% of its budget"
    assert event.key == f"budget_alert:{team.pk}:budget {timezone.localtime(now):%Y-%m}"


def test_a_budget_alert_is_told_by_quotas_signal_not_by_an_audit_rows_save(team):
    # The event comes from billing.events.budget_alert, sent with the month's audit row: a row of the
    # same action saved by anything else (or written with others in one round trip) tells nobody.
    audit(AuditEvent.Action.BUDGET_ALERT, team=team, target="budget 2026-11")
    assert run_together([audit_write(AuditEvent.Action.BUDGET_ALERT, team=team, target="budget 2026-10")]) == [1]
    assert not Event.objects.exists()
    budget_alert.send(sender=AuditEvent, audit_event=AuditEvent.objects.get(target="budget 2026-11"))
    assert Event.objects.get().event_kind == EventKind.BUDGET_ALERT


def test_work_queued_too_long_is_one_event_per_stay_in_the_queue(submit, settings):
    settings.SLIPWAY_NOTIFY_QUEUED_MINUTES = 30
    submit(name="big", gpus_per_worker=8)
    waiting = submit(name="waiting", gpus_per_worker=4)
    assert waiting.state == RunState.QUEUED
    now = timezone.now()
    assert events.long_waits(now + timedelta(minutes=29)) == []
    assert events.long_waits(now + timedelta(minutes=31)) == [f"queue_waiting:{waiting.ref}:1"]
    assert events.long_waits(now + timedelta(minutes=45)) == []
    assert Event.objects.get().title == f"Run waiting (#{waiting.pk}) of team ml-research has been queued for over 30 min"


def test_work_queued_again_is_told_after_its_new_stay_in_the_queue_not_at_once(running, settings):  # noqa: F811
    # A run taken off a lost cluster (no preemption: last_preempted_at stays None) is queued again at its
    # old place: its new stay begins at the requeue, not at its submission two hours before.
    settings.SLIPWAY_NOTIFY_QUEUED_MINUTES = 30
    run = running(spot=False)
    TrainingRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=2))
    run.refresh_from_db()
    now = timezone.now()
    assert lifecycle.requeue(kind_of(run), run, now, reason="cluster east lost", code=ReasonCode.CLUSTER_LOST,
                             place_again=True)
    run.refresh_from_db()
    assert (run.state, run.attempt, run.last_preempted_at) == (RunState.QUEUED, 2, None)
    assert events.long_waits(now + timedelta(minutes=1)) == []  # it was told it waited 30 min, a minute in
    assert events.long_waits(now + timedelta(minutes=31)) == [f"queue_waiting:{run.ref}:2"]


def test_an_event_fans_out_once_to_the_teams_webhooks_and_its_members_subscriptions(
        team, other_team, member, viewer, team_admin, outsider):
    hook, _secret = create_webhook(team_admin, team, "https://hooks.example.com/slipway", ["run_failed"])
    create_webhook(team_admin, team, "https://hooks.example.com/other", [EventKind.BUDGET_ALERT])
    set_email_kinds(member, team, ["run_failed"])
    set_email_kinds(viewer, team, ["run_failed", "run_succeeded"])
    set_email_kinds(outsider, other_team, ["run_failed"])  # another team's events only
    leaver = make_user("lee")
    membership = add_member(team, leaver, Role.MEMBER)
    set_email_kinds(leaver, team, ["run_failed"])
    membership.delete()  # left the team: told nothing more about it
    key = events.record("run_failed", team, "run_failed:run:1", "Run x failed", "Run x failed.", ref="run:1")
    first = delivery.fan_out(key)
    assert delivery.fan_out(key) == first  # a replayed fan-out adds nothing
    rows = Delivery.objects.filter(pk__in=first)
    assert sorted((d.channel, d.target) for d in rows) == [
        (Channel.EMAIL, "mia@example.com"), (Channel.EMAIL, "vic@example.com"),
        (Channel.WEBHOOK, "https://hooks.example.com/slipway")]
    assert Delivery.objects.count() == 3 and {d.webhook_id for d in rows} == {hook.pk, None}
    assert EmailSubscription.objects.filter(user=leaver).exists() and Webhook.objects.count() == 2


def test_an_endpoint_degraded_twice_is_two_events_and_a_replay_none(member, team, ep_quota, published, fake_backend):
    endpoint = create_endpoint(member, team, endpoint_payload())
    assert apply_workload("ep", endpoint.pk) == "applied"
    t0 = timezone.now()
    for minutes, ready in ((0, 2), (11, 1), (12, 1), (13, 2), (24, 1)):
        # A replica stays unready past the grace (10 min) from t0: degraded; then ready again; then degraded again.
        show(fake_backend, endpoint, desired=2, ready=ready, at=t0)
        rec.reconcile(fake_backend, now=t0 + timedelta(minutes=minutes))
    assert InferenceEndpoint.objects.get(pk=endpoint.pk).state == EndpointState.DEGRADED
    titles = list(Event.objects.order_by("created_at").values_list("event_kind", "title"))
    assert titles == [("endpoint_degraded", f"Endpoint {endpoint.name} (#{endpoint.pk}) of team ml-research is degraded")] * 2
