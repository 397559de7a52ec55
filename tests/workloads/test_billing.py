"""Billing as open segments: when an observation writes (units change, end, hour boundary) and when it does not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from cluster.errors import Transient
from jobs.services import submit_run
from quotas import ledger
from quotas.ledger import spent_month
from tests.jobs.conftest import run_payload
from tests.workloads.tinykind.models import Notebook
from workloads import reconcile as rec
from workloads.billing import open_segments, plan_billing
from workloads.idle import idle_figures
from workloads.tasks import apply_workload

T0 = datetime(2026, 11, 3, 10, 20, tzinfo=UTC)


@pytest.fixture
def notebook(member, team, flavors):
    return Notebook(pk=7, team=team, created_by=member, name="nb", flavor=flavors["a100-80gb"], gpus=2)


def at(notebook, since, units):
    notebook.billed_until, notebook.open_units = since, units
    return notebook


@pytest.mark.django_db
class TestPlanBilling:
    def test_it_writes_nothing_while_the_units_and_the_hour_stay(self, notebook):
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, T0 + timedelta(minutes=30))
        assert (plan.changes, plan.intervals, plan.cost) == ({}, [], 0)

    def test_it_opens_a_segment_at_the_first_pods_start_on_the_first_sighting(self, notebook):
        plan = plan_billing(at(notebook, None, 0), 2, T0, None, T0 + timedelta(minutes=5))
        assert plan.changes == {"billed_until": T0, "open_units": 2}
        assert plan.intervals == []

    def test_it_opens_a_segment_now_when_units_appear_later(self, notebook):
        now = T0 + timedelta(minutes=5)
        plan = plan_billing(at(notebook, T0, 0), 1, T0 - timedelta(hours=3), None, now)
        assert plan.changes == {"billed_until": now, "open_units": 1}

    def test_it_closes_the_segment_when_the_units_change(self, notebook):
        now = T0 + timedelta(minutes=30)
        plan = plan_billing(at(notebook, T0, 2), 3, None, None, now)
        assert plan.changes["billed_until"] == now and plan.changes["open_units"] == 3
        assert [(i.start, i.end, i.units) for i in plan.intervals] == [(T0, now, 2)]
        assert plan.cost == Decimal("4.1")  # 2 × 4.10 × ½ h

    def test_it_rolls_the_segment_over_at_each_hour_boundary(self, notebook):
        now = T0 + timedelta(hours=2, minutes=10)  # 12:30
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, now)
        hour = lambda h: T0.replace(hour=h, minute=0)  # noqa: E731
        assert [(i.start, i.end) for i in plan.intervals] == [(T0, hour(11)), (hour(11), hour(12))]
        assert plan.changes["billed_until"] == hour(12) and plan.changes["open_units"] == 2

    def test_it_closes_at_the_end_and_keeps_nothing_open(self, notebook):
        end = T0 + timedelta(minutes=50)
        plan = plan_billing(at(notebook, T0, 2), 2, None, end, end + timedelta(minutes=3))
        assert [(i.start, i.end) for i in plan.intervals] == [(T0, T0.replace(hour=11, minute=0)),
                                                               (T0.replace(hour=11, minute=0), end)]
        assert plan.changes["open_units"] == 0 and plan.changes["billed_until"] == end

    def test_it_closes_the_segment_when_the_gpus_turn_idle_and_opens_an_idle_one(self, notebook):
        now = T0 + timedelta(minutes=30)
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, now, idle=True)
        assert [(i.start, i.end, i.idle) for i in plan.intervals] == [(T0, now, False)]
        assert plan.changes["billed_until"] == now and plan.changes["open_idle"] is True

    def test_it_closes_an_idle_segment_as_idle_time_when_the_gpus_get_busy(self, notebook):
        notebook.open_idle = True
        now = T0 + timedelta(minutes=30)
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, now, idle=False)
        assert [(i.start, i.end, i.idle) for i in plan.intervals] == [(T0, now, True)]
        assert plan.changes["open_idle"] is False

    def test_an_idle_segment_that_stays_idle_writes_nothing(self, notebook):
        notebook.open_idle = True
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, T0 + timedelta(minutes=30), idle=True)
        assert (plan.changes, plan.intervals) == ({}, [])

    def test_a_first_sighting_of_idle_gpus_opens_an_idle_segment_from_the_pods_start(self, notebook):
        plan = plan_billing(at(notebook, None, 0), 2, T0, None, T0 + timedelta(minutes=5), idle=True)
        assert plan.changes == {"billed_until": T0, "open_units": 2, "open_idle": True}


@pytest.mark.django_db
def test_spend_adds_the_open_segments_of_every_kind_to_the_second(team, member, flavors, quota):
    now = timezone.now()
    Notebook.objects.create(team=team, created_by=member, name="a", flavor=flavors["a100-80gb"], state="running",
                            billed_until=now - timedelta(minutes=30), open_units=2)
    Notebook.objects.create(team=team, created_by=member, name="b", flavor=flavors["l4"], spot=True, state="running",
                            billed_until=now - timedelta(minutes=15), open_units=1)
    segments = open_segments([team.pk], now)
    assert sorted(s.units for s in segments) == [1, 2]
    # 2 × 4.10 × ½ h + 1 × 0.32 spot × ¼ h, nothing in the ledger yet.
    spent = spent_month(team, now)
    assert abs(spent - Decimal("4.18")) < Decimal("0.0001")
    assert spent_month(team, now + timedelta(minutes=30)) > spent  # it keeps growing without a write


@pytest.mark.django_db
def test_billing_starts_when_the_first_pod_ran_even_when_first_seen_late(member, team, quota, fake_backend, published):
    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    apply_workload("run", run.pk)
    t0 = timezone.now().replace(microsecond=0)
    # The Job was created at t0; its pod waited 80 s for a node before its container started.
    fake_backend.set_running("team-ml-research", run.cluster_name, units=2,
                             started=(t0 + timedelta(seconds=80)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    job = fake_backend.main_object("team-ml-research", run.cluster_name)
    job["status"]["startTime"] = t0.strftime("%Y-%m-%dT%H:%M:%SZ")
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=300))  # first seen after an outage
    run.refresh_from_db()
    assert run.started_at == t0 + timedelta(seconds=80)
    # 2 GPUs × 4.10/h for the 220 s it really ran, not the 300 s since the Job's startTime.
    assert run.cost_at(t0 + timedelta(seconds=300)) == (Decimal("8.2") * 220 / 3600).quantize(Decimal("1E-10"))


@pytest.mark.django_db
def test_idle_gpus_are_billed_apart_and_flagged_after_the_window(member, team, quota, fake_backend, published,
                                                                 settings):
    settings.SLIPWAY_IDLE_UTIL_PCT, settings.SLIPWAY_IDLE_WINDOW_MINUTES = 5.0, 30
    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    apply_workload("run", run.pk)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_running("team-ml-research", run.cluster_name, units=2, started=t0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    fake_backend.utilization = {run.cluster_name: 80.0}
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=10))
    fake_backend.utilization = {run.cluster_name: 2.0}  # the GPUs go quiet
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=20))
    run.refresh_from_db()
    assert run.open_idle and run.idle_since == t0 + timedelta(minutes=20)
    # A metrics outage keeps the flag: an idle stretch is not cut into busy time by it.
    fake_backend.utilization = Transient("Prometheus unreachable")
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=35))
    run.refresh_from_db()
    assert run.open_idle and run.idle_since == t0 + timedelta(minutes=20)
    figures = idle_figures([run], t0 + timedelta(minutes=45))[run.ref]
    assert not figures.flagged  # 25 minutes idle: under the window
    figures = idle_figures([run], t0 + timedelta(minutes=55))[run.ref]
    assert figures.flagged and figures.since == t0 + timedelta(minutes=20)
    tenth = Decimal("1E-10")  # the ledger's precision; pieces cut at an hour boundary round each
    assert abs(figures.gpu_hours - Decimal(2 * 35) / 60) <= 2 * tenth
    assert abs(figures.cost - Decimal("8.2") * 35 / 60) <= 2 * tenth
    # Busy again: the idle stretch is closed into the ledger's idle columns and the flag clears.
    fake_backend.utilization = {run.cluster_name: 70.0}
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=55))
    run.refresh_from_db()
    assert not run.open_idle and run.idle_since is None
    assert idle_figures([run], t0 + timedelta(minutes=90))[run.ref] == idle_figures([run], t0 + timedelta(minutes=56))[
        run.ref]
    assert fake_backend.calls.count("gpu_utilization") == 4  # one metrics query per cycle
    row = ledger.usage_rows([team], t0 - timedelta(hours=2), t0 + timedelta(hours=3), "workload",
                            now=t0 + timedelta(minutes=55))[0]
    assert abs(row["idle_gpu_hours"] - Decimal(2 * 35) / 60) <= 2 * tenth
    assert abs(row["gpu_hours"] - Decimal(2 * 55) / 60) < tenth * 3
