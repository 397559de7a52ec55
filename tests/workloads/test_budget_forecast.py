"""Budgets over time: committed money, burn, projection, run-out date, queueing on money, the alert."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from billing.ledger import committed_by_team, month_end, record_usage
from billing.models import QuotaHold, TeamBudget
from billing.services import budget_summary
from inference.models import InferenceEndpoint
from inference.services import create_endpoint
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas import admission
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.queue import preview
from quotas.services import set_team_budget
from teams.models import AuditEvent
from workloads.cycle import reconcile as rec

pytestmark = pytest.mark.django_db


def run(member, team, name: str, gpus: int, minutes: int | None = None) -> TrainingRun:
    data = {"name": name, "image": "registry.example.com/ml/t:1", "command": ["python", "t.py"],
            "flavor": "a100-80gb", "gpus_per_worker": gpus}
    if minutes:
        data["max_runtime_minutes"] = minutes
    return submit_run(member, team, data)


def test_committed_counts_runtime_limits_and_endpoint_minimums_to_the_months_end(member, team, quota):
    now = timezone.now()
    run(member, team, "bounded", 2, minutes=90)  # 2 × 4.10 × 1.5 h = 12.30 still to come
    run(member, team, "open-ended", 1)  # no known end: an A100 until the month's end
    create_endpoint(member, team, {"name": "chat", "image": "registry.example.com/s/vllm:1", "flavor": "l4",
                                   "min_replicas": 1})
    hours_left = Decimal((month_end(now) - now).total_seconds()) / 3600
    # An A100 and an L4 on demand to the month's end.
    expected = Decimal("12.30") + (Decimal("4.10") + Decimal("0.80")) * hours_left
    assert abs(budget_summary(team, now)["committed"] - expected) < Decimal("0.01")


def test_commitments_of_every_kind_are_read_in_one_statement(member, team, quota, django_assert_num_queries):
    """Each endpoint's minimum at its flavor's on-demand or spot price, added up; runs alike, same statement."""
    now = timezone.now()
    specs = [("l4", False, 1, 1), ("l4", True, 1, 1), ("a100-80gb", False, 1, 2), ("a100-80gb", False, 2, 1)]
    for i, (flavor, spot, minimum, gpus) in enumerate(specs):
        create_endpoint(member, team, {"name": f"e{i}", "image": "registry.example.com/s/vllm:1", "flavor": flavor,
                                       "spot": spot, "min_replicas": minimum, "max_replicas": 2,
                                       "gpus_per_replica": gpus})
    hours_left = Decimal((month_end(now) - now).total_seconds()) / 3600
    # L4 on demand 0.80 and spot 0.32, A100 4.10 × (2 + 2) GPUs, each to the month's end.
    expected = (Decimal("0.80") + Decimal("0.32") + Decimal("4.10") * 4) * hours_left
    assert InferenceEndpoint.objects.filter(team=team, state="deploying").count() == 4
    with django_assert_num_queries(1):
        committed = committed_by_team([team.pk], now)[team.pk]
    assert abs(committed - expected) < Decimal("0.01")


def test_a_started_run_commits_what_is_left_of_its_limit_and_only_holding_work_of_the_asked_teams_counts(
        member, team, quota, outsider, other_team):
    now = timezone.now()
    started = run(member, team, "started", 2, minutes=120)  # began 30 min ago: 1.5 h of 2 × 4.10 left
    QuotaHold.objects.held().filter(ref=started.ref).update(started_at=now - timedelta(minutes=30))
    spent = run(member, team, "spent", 1, minutes=10)  # began an hour ago: its limit has passed
    QuotaHold.objects.held().filter(ref=spent.ref).update(started_at=now - timedelta(hours=1))
    done = run(member, team, "done", 1, minutes=60)
    admission.release(done.ref)  # it ended: its hold went back
    seed_team_quotas(other_team, {"a100-80gb": 8}, Decimal("10000"))
    theirs = run(outsider, other_team, "theirs", 1, minutes=60)  # 4.10 to come, for the other team
    assert theirs.state == "admitted"
    both = committed_by_team([team.pk, other_team.pk], now)
    assert abs(both[team.pk] - Decimal("12.30")) < Decimal("0.001")
    assert abs(both[other_team.pk] - Decimal("4.10")) < Decimal("0.001")
    assert set(committed_by_team([team.pk], now)) == {team.pk}


def test_admission_decides_at_the_bound_as_it_would_at_the_exact_committed_money(member, team, quota):
    """The bound on committed money only saves a read: at every budget around the exact figure, and
    far above it, admit() answers what decide() answers with the exact figure (quotas.queue.preview)."""
    run(member, team, "bounded", 2, minutes=90)  # 12.30 committed
    create_endpoint(member, team, {"name": "chat", "image": "registry.example.com/s/vllm:1", "flavor": "l4",
                                   "min_replicas": 1})  # 0.80 an hour to the month's end
    now = timezone.now()
    exact = committed_by_team([team.pk], now)[team.pk]
    request = ResourceRequest("a100-80gb", 1, 1, estimated_cost=Decimal("4.10"), description="run probe")
    # The bound: 3 units held (2 A100s, 1 L4) at the dearest price (an H100's 6.88) to the month's end.
    bound = Decimal("6.88") * 3 * Decimal((month_end(now) - now).total_seconds()) / 3600
    assert bound > exact
    needed = exact + Decimal("4.10")
    outcomes = []
    for limit in (needed - 1, needed - Decimal("0.01"), needed + Decimal("0.01"), needed + 1,
                  bound + Decimal("4.10") + 1):
        with transaction.atomic():
            TeamBudget.objects.filter(team=team).update(monthly_limit=limit)
            expected = preview(team, request)
            decided = admission.admit(team, request, "run:999999")
            assert (decided.outcome, decided.reason) == (expected.outcome, expected.reason), limit
            outcomes.append(decided.outcome)
            transaction.set_rollback(True)
    assert outcomes == ["queue", "queue", "admit", "admit", "admit"]


def test_a_run_without_a_limit_is_swept_at_the_bound_as_at_the_exact_committed_money(member, team, quota,
                                                                                     monkeypatch):
    """The same sweep for a request without a known end: it counts until the month's end."""
    run(member, team, "bounded", 2, minutes=90)
    # One instant for the preview and the admission: the estimate to the month's end falls a cent every 8.8 s at
    # 4.10 an hour, so the two, read a moment apart, said 3,026.51 and 3,026.52 once (CI, 2026-12-01).
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    exact = committed_by_team([team.pk], now)[team.pk]
    request = ResourceRequest("a100-80gb", 1, 1, cost_per_hour=Decimal("4.10"), description="run probe")
    needed = exact + Decimal("4.10") * Decimal((month_end(now) - now).total_seconds()) / 3600
    outcomes = []
    for limit in (needed - 1, needed - Decimal("0.05"), needed + Decimal("0.05"), needed + 1):
        with transaction.atomic():
            TeamBudget.objects.filter(team=team).update(monthly_limit=limit)
            expected = preview(team, request)
            decided = admission.admit(team, request, "run:999999")
            assert (decided.outcome, decided.reason) == (expected.outcome, expected.reason), limit
            outcomes.append(decided.outcome)
            transaction.set_rollback(True)
    assert outcomes == ["queue", "queue", "admit", "admit"]


def test_with_nothing_left_a_run_without_a_limit_no_longer_starts(member, team, quota):
    """Issue 20: with 0.00 left, the same run queued with a runtime limit but started without one."""
    holder = run(member, team, "holder", 1, minutes=60)  # commits 4.10
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("4.10"))  # 0.00 left
    assert holder.state == "admitted"
    limited = run(member, team, "limited", 1, minutes=30)
    unlimited = run(member, team, "unlimited", 1)
    assert limited.state == unlimited.state == "queued"
    assert unlimited.reason.startswith("waiting for budget: est. ")
    assert "until the month's end (no runtime limit) would exceed the 0.00 USD left this month" in unlimited.reason


def test_admitting_commits_exactly_what_the_gate_counted(member, team, quota):
    """decide() counts what ledger.committed counts once the work is admitted: a limit capped at the
    month's end, no limit until the month's end, an endpoint's minimum until the month's end."""
    now = timezone.now()
    hours_left = Decimal((month_end(now) - now).total_seconds()) / 3600
    before = committed_by_team([team.pk], now).get(team.pk, Decimal(0))
    unlimited = run(member, team, "unlimited", 2)
    assert unlimited.state == "admitted"
    after = committed_by_team([team.pk], now)[team.pk]
    assert abs((after - before) - Decimal("8.20") * hours_left) < Decimal("0.01")
    counted = preview(team, ResourceRequest("a100-80gb", 2, 2, cost_per_hour=Decimal("8.20")))
    assert counted.admitted


def test_burn_projection_and_run_out_date_follow_what_runs_now(member, team, quota, mid_month):
    now = timezone.now()
    bounded = run(member, team, "busy", 2)
    TrainingRun.objects.filter(pk=bounded.pk).update(state="running")
    QuotaHold.objects.held().filter(ref=bounded.ref).update(billed_until=now - timedelta(hours=1), open_units=2)
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("20"))
    summary = budget_summary(team, now)
    assert summary["burn_per_hour"] == Decimal("8.20")
    assert abs(summary["spent_month"] - Decimal("8.20")) < Decimal("0.001")
    hours_left = Decimal((month_end(now) - now).total_seconds()) / 3600
    assert abs(summary["projected_month_end"] - (Decimal("8.20") + Decimal("8.20") * hours_left)) < Decimal("0.01")
    # (20 − 8.20) / 8.20 per hour ≈ 1 h 26 min from now, unless the month ends first.
    expected_out = now + timedelta(hours=float(Decimal("11.80") / Decimal("8.20")))
    if expected_out < month_end(now):
        assert abs((summary["runs_out_at"] - expected_out).total_seconds()) < 1
    assert summary["alert"] is False


def test_work_whose_estimate_passes_the_budget_queues_and_starts_when_it_is_raised(
        member, team, quota, staff, django_capture_on_commit_callbacks):
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("50"))
    small = run(member, team, "small", 1, minutes=60)  # 4.10: fits
    assert small.state == "admitted"
    big = run(member, team, "big", 4, minutes=180)  # 4 × 4.10 × 3 h = 49.20 > 50 − 4.10 committed
    assert big.state == "queued"
    assert big.reason == "waiting for budget: est. 49.20 would exceed the 45.90 USD left this month"
    with django_capture_on_commit_callbacks(execute=True):
        set_team_budget(staff, team, Decimal("100"))
    big.refresh_from_db()
    assert big.state == "admitted"


def test_the_alert_is_audited_once_per_team_and_month(member, team, quota, fake_backend):
    now = timezone.now()
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("1"))
    record_usage(team, "run:old", "a100-80gb", member, now - timedelta(minutes=20), now, 1, False)  # 1.37 > 80%
    reports = [rec.reconcile(fake_backend) for _ in range(3)]
    assert [r.budget_alerts for r in reports] == [["ml-research"], [], []]
    event = AuditEvent.objects.get(action=AuditEvent.Action.BUDGET_ALERT)
    assert event.team == team and event.target == f"budget {timezone.localtime(now):%Y-%m}"


def test_the_dashboard_shows_the_alert_banner_and_the_forecast(client, member, team, quota):
    client.force_login(member)
    page = client.get("/").content.decode()
    assert 'id="budget-forecast"' in page and "Committed" in page
    assert 'id="budget-alert"' not in page
    now = timezone.now()
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("1"))
    record_usage(team, "run:old", "a100-80gb", member, now - timedelta(minutes=13), now, 1, False)  # 0.89: 89%
    page = client.get("/").content.decode()
    assert 'id="budget-alert"' in page and "80% alert threshold crossed" in page


def test_a_spent_budget_with_the_stop_policy_stops_running_work(member, team, quota, ep_quota, fake_backend,
                                                                django_capture_on_commit_callbacks, published,
                                                                mid_month):
    now = timezone.now()
    running = run(member, team, "busy", 2)
    endpoint = create_endpoint(member, team, {"name": "chat", "image": "registry.example.com/s/vllm:1",
                                              "flavor": "a100-80gb", "min_replicas": 1, "max_replicas": 3})
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state="ready", replica_ceiling=2)
    QuotaHold.objects.filter(ref=endpoint.ref).update(units=2)  # one burst replica granted
    record_usage(team, "run:old", "a100-80gb", member, now - timedelta(minutes=30), now, 1, False)  # 2.05
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("2"))
    assert rec.reconcile(fake_backend).budget_stopped == []  # the default policy only notifies
    TeamBudget.objects.filter(team=team).update(policy=TeamBudget.Policy.STOP)
    with django_capture_on_commit_callbacks(execute=True):
        report = rec.reconcile(fake_backend)
    assert sorted(report.budget_stopped) == sorted([running.ref, endpoint.ref])
    running.refresh_from_db()
    assert running.state == "cancelled" and "budget is spent" in running.reason
    assert ("workloads.tasks.delete_workload", ("run", running.pk)) in published
    endpoint.refresh_from_db()
    assert endpoint.replica_ceiling == 1 and QuotaHold.objects.held().get(ref=endpoint.ref).units == 1
    assert endpoint.state == "ready"  # it keeps serving at its guaranteed minimum


def test_the_dashboard_says_which_policy_applies(client, member, team, quota):
    client.force_login(member)
    assert "running work continues" in client.get("/").content.decode()
    TeamBudget.objects.filter(team=team).update(policy=TeamBudget.Policy.STOP)
    assert "running work stops" in client.get("/").content.decode()
