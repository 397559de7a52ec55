"""Billing as open segments: when an observation writes (units change, end, hour boundary) and when it does not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing import ledger
from billing.ledger import spent_month
from billing.models import QuotaHold, UsageRecord
from billing.segments import applied, borrowed_units, plan_billing, record
from cluster.errors import Transient
from jobs.services import submit_run
from quotas import services
from quotas.demo import seed_team_quotas
from tests.factories import make_team
from tests.jobs.conftest import run_payload
from tests.workloads.tinykind.models import Notebook
from workloads.cycle import reconcile as rec
from workloads.idle import idle_figures
from workloads.tasks import apply_workload

T0 = datetime(2026, 11, 3, 10, 20, tzinfo=UTC)


@pytest.fixture
def notebook(member, team, flavors):
    return Notebook(pk=7, team=team, created_by=member, name="nb", flavor=flavors["a100-80gb"], gpus=2)


def at(notebook, since, units, **segment):
    """``notebook`` holding a hold whose open segment runs ``units`` since ``since`` (``segment``: its other columns)."""
    notebook.segment_is(QuotaHold(team=notebook.team, ref=notebook.ref, flavor=notebook.flavor, units=max(units, 1),
                                  billed_until=since, open_units=units, **segment))
    return notebook


@pytest.mark.django_db
class TestPlanBilling:
    def test_it_writes_nothing_while_the_units_and_the_hour_stay(self, notebook):
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, T0 + timedelta(minutes=30))
        assert (plan.changes, plan.intervals, plan.cost) == ({}, [], 0)

    def test_it_opens_a_segment_at_the_first_pods_start_on_the_first_sighting(self, notebook):
        plan = plan_billing(at(notebook, None, 0), 2, T0, None, T0 + timedelta(minutes=5))
        assert plan.changes == {"billed_until": T0, "open_units": 2, "charged_price": Decimal("4.10"), "started_at": T0}
        assert plan.intervals == []

    def test_it_opens_a_segment_now_when_units_appear_later(self, notebook):
        now = T0 + timedelta(minutes=5)
        plan = plan_billing(at(notebook, T0, 0, started_at=T0 - timedelta(hours=3)), 1, T0 - timedelta(hours=3), None, now)
        assert plan.changes == {"billed_until": now, "open_units": 1, "charged_price": Decimal("4.10")}

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
        now = T0 + timedelta(minutes=30)
        plan = plan_billing(at(notebook, T0, 2, open_idle=True), 2, None, None, now, idle=False)
        assert [(i.start, i.end, i.idle) for i in plan.intervals] == [(T0, now, True)]
        assert plan.changes["open_idle"] is False

    def test_an_idle_segment_that_stays_idle_writes_nothing(self, notebook):
        plan = plan_billing(at(notebook, T0, 2, open_idle=True), 2, None, None, T0 + timedelta(minutes=30), idle=True)
        assert (plan.changes, plan.intervals) == ({}, [])

    def test_a_first_sighting_of_idle_gpus_opens_an_idle_segment_from_the_pods_start(self, notebook):
        plan = plan_billing(at(notebook, None, 0), 2, T0, None, T0 + timedelta(minutes=5), idle=True)
        assert plan.changes == {"billed_until": T0, "open_units": 2, "charged_price": Decimal("4.10"), "started_at": T0,
                                "open_idle": True}


@pytest.mark.django_db
class TestChargedRate:
    """Issue 46: after billing began a workload's price is the rate its segment opened at, not today's."""

    def test_the_open_segment_keeps_its_rate_when_staff_change_the_price(self, notebook, flavors):
        notebook.flavor.price_per_hour = Decimal("9.00")  # staff changed the price table since
        now = T0 + timedelta(minutes=30)
        plan = plan_billing(at(notebook, T0, 2, charged_price=Decimal("4.10")), 3, None, None, now)
        assert plan.cost == Decimal("4.1")  # 2 × 4.10 × ½ h: the segment's rate, not 9.00
        assert plan.changes["charged_price"] == Decimal("9.00")  # the next segment opens at today's

    def test_an_ended_workload_keeps_the_rate_it_was_charged(self, notebook, flavors):
        notebook.flavor.price_per_hour = Decimal("9.00")  # staff changed the price table since
        end = T0 + timedelta(minutes=30)
        plan = plan_billing(at(notebook, T0, 2, charged_price=Decimal("4.10")), 2, None, end, end)
        assert plan.changes["charged_price"] == Decimal("4.10") and plan.changes["open_units"] == 0
        applied(notebook, plan)
        assert notebook.unit_price() == Decimal("4.10")
        assert notebook.price_quote().price == Decimal("4.10") and notebook.price_quote().placed

    def test_the_hour_boundary_opens_a_segment_at_todays_price(self, notebook, flavors):
        notebook.flavor.price_per_hour = Decimal("9.00")  # staff changed the price table since
        plan = plan_billing(at(notebook, T0, 2, charged_price=Decimal("4.10")), 2, None, None, T0 + timedelta(minutes=50))
        assert [i.price for i in plan.intervals] == [Decimal("4.10")]
        assert plan.changes["charged_price"] == Decimal("9.00")


@pytest.mark.django_db
def test_spend_adds_the_open_segments_of_every_kind_to_the_second(team, member, flavors, quota, mid_month):
    now = timezone.now()
    for name, flavor, spot, since, units in (("a", "a100-80gb", False, 30, 2), ("b", "l4", True, 15, 1)):
        book = Notebook.objects.create(team=team, created_by=member, name=name, flavor=flavors[flavor], spot=spot,
                                       state="running")
        QuotaHold.objects.create(team=team, ref=book.ref, flavor=flavors[flavor], units=units, spot=spot,
                                 billed_until=now - timedelta(minutes=since), open_units=units)
    segments = ledger.open_segments([team.pk], now)
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
    fake_backend.set_running("team-ml-research", run.object_name, units=2,
                             started=(t0 + timedelta(seconds=80)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    job = fake_backend.main_object("team-ml-research", run.object_name)
    job["status"]["startTime"] = t0.strftime("%Y-%m-%dT%H:%M:%SZ")
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=300))  # first seen after an outage
    run.refresh_from_db()
    assert run.started_at == t0 + timedelta(seconds=80)
    # 2 GPUs × 4.10/h for the 220 s it really ran, not the 300 s since the Job's startTime. The ledger
    # rounds each hour's interval to 1e-10: when the 220 s span an hour's end (t0 is the wall clock), two
    # rounded intervals may differ from the one rounded total by 1e-10, never by a second's cost (2.3e-3).
    expected = (Decimal("8.2") * 220 / 3600).quantize(Decimal("1E-10"))
    assert abs(run.cost_at(t0 + timedelta(seconds=300)) - expected) <= Decimal("1E-10")


@pytest.mark.django_db
def test_idle_gpus_are_billed_apart_and_flagged_after_the_window(member, team, quota, fake_backend, published,
                                                                 settings):
    settings.SLIPWAY_IDLE_UTIL_PCT, settings.SLIPWAY_IDLE_WINDOW_MINUTES = 5.0, 30
    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    apply_workload("run", run.pk)
    t0 = timezone.now().replace(microsecond=0)
    fake_backend.set_running("team-ml-research", run.object_name, units=2, started=t0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    fake_backend.utilization = {run.object_name: 80.0}
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=10))
    fake_backend.utilization = {run.object_name: 2.0}  # the GPUs go quiet
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
    fake_backend.utilization = {run.object_name: 70.0}
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=55))
    run.refresh_from_db()
    assert not run.open_idle and run.idle_since is None
    assert idle_figures([run], t0 + timedelta(minutes=90))[run.ref] == idle_figures([run], t0 + timedelta(minutes=56))[
        run.ref]
    assert fake_backend.calls.count("gpu_telemetry") == 4  # one metrics query per cycle
    row = ledger.usage_rows([team], t0 - timedelta(hours=2), t0 + timedelta(hours=3), "workload",
                            now=t0 + timedelta(minutes=55))[0]
    assert abs(row["idle_gpu_hours"] - Decimal(2 * 35) / 60) <= 2 * tenth
    assert abs(row["gpu_hours"] - Decimal(2 * 55) / 60) < tenth * 3


@pytest.mark.django_db
class TestBorrowedGpuHours:
    """The ledger's ``borrowed_gpu_hours``: the pro-rata part of each interval run on borrowed units."""

    def hold(self, notebook, units, borrowed):
        QuotaHold.objects.create(team=notebook.team, ref=notebook.ref, flavor=notebook.flavor, units=units,
                                   borrowed_units=borrowed)

    def rows(self, notebook):
        return list(UsageRecord.objects.filter(ref=notebook.ref).order_by("hour")
                    .values_list("gpu_hours", "borrowed_gpu_hours"))

    def test_a_borrowing_workloads_rows_carry_its_borrowed_share_and_a_replay_adds_nothing(self, notebook):
        self.hold(notebook, 2, 1)  # 1 of its 2 units borrowed from the cohort
        plan = plan_billing(at(notebook, T0, 2), 2, None, None, T0 + timedelta(hours=2, minutes=10))
        assert record([(notebook, plan)]) == []
        rows = self.rows(notebook)
        assert [gpu for gpu, _b in rows] == [Decimal("1.3333333333"), Decimal(2)]  # 10:20-11:00, 11:00-12:00
        assert [borrowed for _g, borrowed in rows] == [Decimal("0.6666666667"), Decimal(1)]
        assert record([(notebook, plan)]) == [notebook]  # the replay: the ledger held it already
        assert self.rows(notebook) == rows

    def test_borrowed_units_above_the_intervals_units_count_as_all_of_them(self, notebook):
        self.hold(notebook, 4, 3)  # the hold grew; the closed interval ran 2 units
        plan = plan_billing(at(notebook, T0, 2), 2, None, T0 + timedelta(minutes=30), T0 + timedelta(minutes=30))
        record([(notebook, plan)])
        assert self.rows(notebook) == [(Decimal(1), Decimal(1))]

    def test_a_workload_that_borrows_nothing_records_zero(self, notebook):
        self.hold(notebook, 2, 0)
        plan = plan_billing(at(notebook, T0, 2), 2, None, T0 + timedelta(minutes=30), T0 + timedelta(minutes=30))
        record([(notebook, plan)])
        assert self.rows(notebook) == [(Decimal(1), Decimal(0))]

    def test_one_query_reads_the_borrowed_units_of_every_workload_written(self, notebook, member, team, flavors,
                                                                          django_assert_num_queries):
        other = Notebook(pk=8, team=team, created_by=member, name="nb2", flavor=flavors["a100-80gb"], gpus=2)
        self.hold(notebook, 2, 2)
        now = T0 + timedelta(minutes=30)
        billed = [(w, plan_billing(at(w, T0, 2), 2, None, now, now)) for w in (notebook, other)]
        with django_assert_num_queries(2):  # the borrowed units, then the ledger's one upsert
            record(billed)
        assert UsageRecord.objects.get(ref=other.ref).borrowed_gpu_hours == 0
        assert UsageRecord.objects.get(ref=notebook.ref).borrowed_gpu_hours == 1


@pytest.mark.django_db
def test_a_borrowed_run_reconciled_to_its_end_leaves_its_borrowed_gpu_hours_in_the_ledger(
        member, team, quota, fake_backend, published, staff):
    lender = make_team("nlp-platform")
    seed_team_quotas(lender, {"a100-80gb": 4})
    services.set_cohort(staff, "research", teams=[team, lender])
    own = submit_run(member, team, {k: v for k, v in run_payload(name="own", gpus_per_worker=8).items() if k != "team"})
    run = submit_run(member, team, {k: v for k, v in run_payload(gpus_per_worker=2).items() if k != "team"})
    assert borrowed_units([own.ref, run.ref]) == {run.ref: 2}
    apply_workload("run", run.pk)
    t0 = timezone.now().replace(microsecond=0)
    stamp = t0.strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_backend.set_running("team-ml-research", run.object_name, units=2, started=stamp)
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=10))
    fake_backend.set_finished("team-ml-research", run.object_name, ok=True, started=stamp,
                              finished=(t0 + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=40))
    run.refresh_from_db()
    assert run.state == "succeeded" and not QuotaHold.objects.held().filter(ref=run.ref).exists()
    totals = UsageRecord.objects.filter(ref=run.ref).aggregate(gpu=Sum("gpu_hours"), borrowed=Sum("borrowed_gpu_hours"))
    assert totals["gpu"] > 0 and totals["borrowed"] == totals["gpu"]  # all of its units were borrowed
