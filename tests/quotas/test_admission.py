"""Admission against the database: writes, idempotency, release and the queue."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from billing.ledger import committed, hours_left_in_month, month_spend, record_usage
from billing.models import QuotaHold, ReservedWindow, TeamBudget
from core.priority import Priority
from core.writes import insert_of, update_of
from fleet.models import Cluster
from quotas.admission import admit, admit_waiting, release
from quotas.constants import AdmissionCode, Outcome
from quotas.decide import ResourceRequest
from quotas.events import workload_admitted
from quotas.facts import units_in_use, units_of
from quotas.models import QueuedRequest
from quotas.queue import queue_position, queue_positions, queue_reason, queue_reasons
from teams.models import AuditEvent
from tests.roundtrips import round_trips


def a100(units: int, priority: int = Priority.NORMAL, per_node: int | None = None) -> ResourceRequest:
    return ResourceRequest("a100-80gb", units, per_node or min(units, 8), priority=priority)


@pytest.fixture
def admitted_signals():
    seen: list[tuple[str, str]] = []

    def handler(sender, ref, team, **kwargs):
        seen.append((ref, team.slug))

    workload_admitted.connect(handler)
    yield seen
    workload_admitted.disconnect(handler)


def test_it_admits_and_writes_one_hold(quota_team):
    decision = admit(quota_team, a100(4), "run:1")
    assert decision.admitted and decision.reason.code == AdmissionCode.ADMITTED
    hold = QuotaHold.objects.get(ref="run:1")
    assert (hold.units, hold.flavor.name, hold.released_at) == (4, "a100-80gb", None)


def test_it_queues_what_fits_the_limit_but_not_now(quota_team):
    admit(quota_team, a100(6), "run:1")
    decision = admit(quota_team, a100(4), "run:2")
    assert decision.queued and decision.reason.code == AdmissionCode.WAITING_FOR_QUOTA
    assert decision.reason.words == "waiting for quota: needs 4\u00d7 a100-80gb, 6 of 8 in use"
    assert decision.position == 1
    assert not QuotaHold.objects.filter(ref="run:2").exists()
    assert QueuedRequest.objects.get(ref="run:2").units == 4


@pytest.mark.parametrize(("request_", "reason"), [
    (ResourceRequest("a100-80gb", 16, 8), AdmissionCode.EXCEEDS_QUOTA),
    (ResourceRequest("l4", 2, 2), AdmissionCode.EXCEEDS_LARGEST_NODE),
    (ResourceRequest("tpu-v5", 1, 1), AdmissionCode.UNKNOWN_FLAVOR),
    (ResourceRequest("h100-80gb", 1, 1), AdmissionCode.NO_QUOTA_FOR_FLAVOR),
])
def test_it_rejects_and_writes_nothing(quota_team, request_, reason):
    decision = admit(quota_team, request_, "run:9")
    assert decision.rejected and decision.reason.code == reason
    assert not QuotaHold.objects.exists() and not QueuedRequest.objects.exists()


def test_it_rejects_an_inactive_flavor(quota_team, flavors):
    flavors["l4"].active = False
    flavors["l4"].save()
    assert admit(quota_team, ResourceRequest("l4", 1, 1), "run:1").reason.code == AdmissionCode.INACTIVE_FLAVOR


def test_it_rejects_when_the_monthly_budget_is_spent(budget_team, member, flavors, mid_month):
    now = timezone.now()
    # 25 hours of one A100 at 4.10/h = 102.50 > 100.00 budget.
    record_usage(budget_team, "run:0", flavors["a100-80gb"], member, now - timedelta(hours=25), now, 1, False)
    decision = admit(budget_team, a100(1), "run:1")
    assert decision.reason.code == AdmissionCode.BUDGET_EXHAUSTED
    assert "102.50 of 100.00 USD" in decision.reason.words


def test_it_does_not_double_reserve_when_admitting_a_ref_twice(quota_team):
    admit(quota_team, a100(4), "run:1")
    again = admit(quota_team, a100(4), "run:1")
    assert again.admitted
    assert QuotaHold.objects.filter(ref="run:1").count() == 1


def test_it_returns_the_queued_outcome_for_a_queued_ref_again(quota_team):
    admit(quota_team, a100(8), "run:1")
    admit(quota_team, a100(2), "run:2")
    again = admit(quota_team, a100(2), "run:2")
    assert again.queued and again.position == 1
    assert QueuedRequest.objects.filter(ref="run:2").count() == 1


def test_it_releases_idempotently(quota_team):
    admit(quota_team, a100(4), "run:1")
    assert release("run:1") is True
    assert release("run:1") is False
    assert QuotaHold.objects.get(ref="run:1").released_at is not None
    assert admit(quota_team, a100(8), "run:2").admitted  # the units are free again


def test_it_releases_a_queued_ref_by_dropping_its_entry(quota_team):
    admit(quota_team, a100(8), "run:1")
    admit(quota_team, a100(1), "run:2")
    assert release("run:2") is True
    assert not QueuedRequest.objects.exists()
    assert release("nothing:1") is False


def test_every_reader_of_a_queue_position_uses_one_tie_rule(quota_team):
    """What admit answers, the positions pages and the API show, and where a preview would land agree,
    also for entries submitted at the same instant (the earlier row goes first)."""
    admit(quota_team, a100(8), "run:0")
    answers = {ref: admit(quota_team, a100(4, priority), ref).position
               for ref, priority in (("run:a", Priority.NORMAL), ("run:b", Priority.NORMAL), ("run:c", Priority.LOW))}
    same_instant = timezone.now()
    QueuedRequest.objects.filter(ref__in=["run:a", "run:b"]).update(created_at=same_instant)
    assert answers == {"run:a": 1, "run:b": 2, "run:c": 3}
    assert queue_positions(quota_team) == answers
    assert {e.ref: queue_position(quota_team, e) for e in QueuedRequest.objects.all()} == answers
    # Not submitted yet: behind everything of its priority, ahead of lower ones.
    assert queue_position(quota_team, QueuedRequest(team=quota_team, priority=Priority.NORMAL.rank)) == 3
    assert queue_position(quota_team, QueuedRequest(team=quota_team, priority=Priority.HIGH.rank)) == 1


def test_it_admits_waiting_work_in_priority_then_fifo_order(quota_team, admitted_signals):
    admit(quota_team, a100(8), "run:0")
    admit(quota_team, a100(4, Priority.LOW), "run:low")
    admit(quota_team, a100(4), "run:first")
    admit(quota_team, a100(4), "run:second")
    admit(quota_team, a100(4, Priority.HIGH), "run:high")
    assert queue_positions(quota_team) == {"run:high": 1, "run:first": 2, "run:second": 3, "run:low": 4}

    release("run:0")
    assert admit_waiting(quota_team) == ["run:high", "run:first"]
    assert admitted_signals == [("run:high", "ml-research"), ("run:first", "ml-research")]
    assert queue_positions(quota_team) == {"run:second": 1, "run:low": 2}
    assert admit_waiting(quota_team) == []  # nothing fits: nothing changes


def test_it_lets_a_small_request_pass_a_large_one_that_does_not_fit(quota_team):
    admit(quota_team, a100(6), "run:0")
    admit(quota_team, a100(4), "run:big")  # 6 + 4 > 8: queued
    admit(quota_team, a100(2), "run:small")  # fits now: admitted at once
    assert QuotaHold.objects.held().filter(ref="run:small").exists()
    admit(quota_team, a100(3), "run:mid")  # queued behind run:big
    release("run:small")  # 6 in use: big still does not fit, mid does not either (6+3 > 8)
    assert admit_waiting(quota_team) == []
    release("run:0")  # 0 in use: big (4) then mid (3) fit
    assert admit_waiting(quota_team) == ["run:big", "run:mid"]


def test_it_rolls_back_the_admission_when_the_owner_fails(quota_team):
    admit(quota_team, a100(8), "run:0")
    admit(quota_team, a100(2), "run:1")
    release("run:0")

    def broken(sender, **kwargs):
        raise RuntimeError("owner could not move its row")

    workload_admitted.connect(broken)
    try:
        with pytest.raises(RuntimeError):
            admit_waiting(quota_team)
    finally:
        workload_admitted.disconnect(broken)
    assert QueuedRequest.objects.filter(ref="run:1").exists()
    assert not QuotaHold.objects.filter(ref="run:1").exists()


def test_it_explains_why_queued_work_waits(quota_team, flavors):
    admit(quota_team, a100(6), "run:0")
    admit(quota_team, a100(4), "run:1")
    assert queue_reason(quota_team, "run:1") == "waiting for quota: needs 4\u00d7 a100-80gb, 6 of 8 in use"
    assert queue_reason(quota_team, "run:unknown") == ""
    # Lowering the quota below the request turns the reason into the permanent obstacle.
    quota_team.quotas.filter(flavor__name="a100-80gb").update(limit=3)
    assert "more than the team's limit of 3" in queue_reasons(quota_team)["run:1"]
    quota_team.quotas.filter(flavor__name="a100-80gb").update(limit=16)
    assert queue_reasons(quota_team)["run:1"].startswith("about to be admitted")


def test_it_reads_positions_in_one_query(quota_team, django_assert_num_queries):
    admit(quota_team, a100(8), "run:0")
    for i in range(5):
        admit(quota_team, a100(1), f"run:{i + 1}")
    with django_assert_num_queries(1):
        positions = queue_positions(quota_team)
    assert list(positions.values()) == [1, 2, 3, 4, 5]


def test_it_keeps_other_teams_and_flavors_apart(quota_team, other_team, flavors):
    from quotas.demo import seed_team_quotas

    seed_team_quotas(other_team, {"a100-80gb": 8})
    assert admit(quota_team, a100(8), "run:a").admitted
    assert admit(other_team, a100(8), "run:b").admitted
    assert admit(quota_team, ResourceRequest("l4", 2, 1), "run:c").admitted


def test_it_nests_in_the_callers_transaction(quota_team):
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        admit(quota_team, a100(4), "run:1")
        1 / 0  # noqa: B018 - the caller fails after admission
    assert not QuotaHold.objects.exists()


def test_it_spends_money_per_interval_once(quota_team, member, flavors):
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(minutes=30)
    first = record_usage(quota_team, "run:1", flavors["a100-80gb"], member, start, now, 2, False)
    replay = record_usage(quota_team, "run:1", flavors["a100-80gb"], member, start, now, 2, False)
    assert first == Decimal("4.1000")  # 2 x 4.10 x 0.5 h
    assert replay == 0


def test_it_admits_in_two_round_trips(quota_team, django_assert_num_queries):
    # The lock, one read of every other fact, the open segments (money), the insert; on PostgreSQL the
    # first three go out together, behind the lock: the team's lock is held for as few round trips as
    # possible, and no savepoint of its own (it nests in the caller's).
    with django_assert_num_queries(4) as ctx, round_trips() as trips:
        admit(quota_team, a100(1), "run:1")
    statements = [q["sql"].split()[0].upper() for q in ctx.captured_queries]
    assert statements == ["SELECT", "SELECT", "SELECT", "INSERT"]
    assert "FOR NO KEY UPDATE" in ctx.captured_queries[0]["sql"] or connection.vendor != "postgresql"
    assert trips.count == (2 if connection.vendor == "postgresql" else 4)


def test_the_callers_rows_of_an_admission_are_written_with_its_hold_in_one_statement(
        quota_team, django_assert_num_queries):
    # Everything written under the team's lock holds it for a round trip: on PostgreSQL the
    # hold and the caller's rows are one statement (data-modifying CTEs), on SQLite,
    # which has none and no row locks (IMMEDIATE transactions), one each.
    seen = []

    def recorded(decision, now):
        seen.append((decision.outcome, now))
        return [insert_of(AuditEvent(action="run_submitted", target="run:1", team=quota_team,
                                     created_at=now))]

    with django_assert_num_queries(4 if connection.vendor == "postgresql" else 5), round_trips() as trips:
        assert admit(quota_team, a100(1), "run:1", recorded).admitted
    assert trips.count == (2 if connection.vendor == "postgresql" else 5)
    ((outcome, now),) = seen
    assert outcome == Outcome.ADMIT
    assert QuotaHold.objects.get(ref="run:1").created_at == AuditEvent.objects.get(target="run:1").created_at == now


def test_the_callers_rows_are_asked_for_only_when_admitted(quota_team):
    def recorded(decision, now):
        raise AssertionError(f"asked for the rows of {decision.outcome}")

    admit(quota_team, a100(8), "run:1")
    assert admit(quota_team, a100(4), "run:2", recorded).queued
    assert admit(quota_team, a100(16), "run:3", recorded).rejected


def test_a_row_of_the_admission_that_touches_nothing_fails_it_whole(quota_team):
    # A state move conditional on the state the workload was recorded in, which it left: the
    # hold written with it must not commit either.
    event = AuditEvent.objects.create(action=AuditEvent.Action.LOGIN, target="moved already")
    stale = update_of(AuditEvent.objects.filter(pk=event.pk, target="as recorded"), target="admitted")
    with pytest.raises(DatabaseError, match="1 of its 2 writes touched no row"), transaction.atomic():
        admit(quota_team, a100(1), "run:1", lambda decision, now: [stale])
    assert not QuotaHold.objects.filter(ref="run:1").exists()


def test_a_budgeted_team_reads_commitments_only_when_their_bound_could_queue_the_request(
        budget_team, flavors, django_assert_num_queries):
    estimated = dataclasses.replace(a100(1), estimated_cost=Decimal("4.10"))
    # Lock, facts (the bound's figures and the month's ledger rows included), the month's open
    # segments, insert: nothing is held, so nothing can be committed, and a request without an
    # estimate never weighs commitments.
    with django_assert_num_queries(4):
        assert admit(budget_team, a100(1), "run:1").admitted
    TeamBudget.objects.filter(team=budget_team).update(monthly_limit=Decimal("10"))
    QuotaHold.objects.filter(ref="run:1").update(units=1000)  # held: 1,000 units, the bound ≫ 10
    l4 = ResourceRequest("l4", 1, 1, estimated_cost=Decimal("4.10"))
    with django_assert_num_queries(5) as ctx:  # + the holds' commitments, one statement
        decision = admit(budget_team, l4, "run:2")
    # The exact figure is nothing (run:1's hold commits nothing): it fits and is admitted.
    assert decision.admitted, decision.reason.words
    assert sum("limit_minutes" in q["sql"] and q["sql"].startswith("SELECT") for q in ctx.captured_queries) == 1
    with django_assert_num_queries(5) as ctx:  # lock, facts, the month's open segments, queue entry, its position
        assert admit(budget_team, estimated, "run:3").reason.code == AdmissionCode.WAITING_FOR_QUOTA  # 1,000 A100s held
    assert not any("limit_minutes" in q["sql"] and q["sql"].startswith("SELECT")
                   for q in ctx.captured_queries)  # the quota decided


def test_it_releases_in_one_statement(quota_team, django_assert_num_queries):
    admit(quota_team, a100(1), "run:1")
    with django_assert_num_queries(1):
        assert release("run:1")


def test_units_in_use_are_one_figure_for_admission_pages_and_the_admin(quota_team, other_team, flavors):
    """Active holds only (released ones and queue entries hold nothing), per team and flavor."""
    from quotas.demo import seed_team_quotas
    from quotas.models import TeamQuota
    from quotas.services import usage_summary

    seed_team_quotas(other_team, {"a100-80gb": 8})
    admit(quota_team, a100(2), "run:1")
    admit(quota_team, a100(3), "run:2")
    admit(quota_team, a100(4), "run:3")  # queued: 5 of 8 in use
    admit(other_team, a100(1), "run:4")
    release("run:1")
    a100_id = flavors["a100-80gb"].pk
    assert units_in_use(quota_team) == {a100_id: 3}
    assert units_in_use() == {a100_id: 4}  # every team's: the Capacity page
    assert units_of(quota_team, a100_id) == (3, 8)
    assert admit(quota_team, a100(5), "run:5").reason.words.endswith("8 of 8 now in use")  # the hot path's sum agrees
    assert next(row for row in usage_summary(quota_team) if row["flavor"] == "a100-80gb")["in_use"] == 8
    from quotas.facts import in_use_of_row
    annotated = TeamQuota.objects.filter(team=quota_team, flavor_id=a100_id).annotate(in_use=in_use_of_row()).get()
    assert annotated.in_use == 8


def priced(flavor: str, units: int, minutes: int, per_unit_hour: str) -> ResourceRequest:
    """A run of ``units`` with a runtime limit, priced as a submission prices it (what its hold will commit)."""
    per_hour = Decimal(per_unit_hour) * units
    return ResourceRequest(flavor, units, units, estimated_cost=per_hour * minutes / 60, cost_per_hour=per_hour,
                           committed_units=units, limit_minutes=minutes)


def projected(team) -> Decimal:
    """The team's month at its end as the budget gate counts it: spent plus committed."""
    now = timezone.now()
    return month_spend([team.pk], now)[team.pk].spent + committed(team.pk, now)


def test_the_queue_admits_no_more_than_the_budget_leaves_when_capacity_frees(budget_team):
    # Two runs that each fit what the budget leaves, not both: one and a half of one's commitment.
    run = priced("a100-80gb", 4, 200, "4.10")
    one = run.committed_cost(hours_left_in_month(timezone.now()))
    TeamBudget.objects.filter(team=budget_team).update(monthly_limit=(one * Decimal("1.5")).quantize(Decimal("0.01")))
    assert admit(budget_team, ResourceRequest("a100-80gb", 8, 8), "run:0").admitted  # the whole quota, commits nothing
    assert admit(budget_team, run, "run:a").reason.code == AdmissionCode.WAITING_FOR_QUOTA
    assert admit(budget_team, run, "run:b").reason.code == AdmissionCode.WAITING_FOR_QUOTA
    release("run:0")
    # The pass decides run:b against what run:a commits, not against the budget as read before it.
    assert admit_waiting(budget_team) == ["run:a"]
    assert queue_reason(budget_team, "run:b").startswith("waiting for budget")
    assert projected(budget_team) <= TeamBudget.objects.get(team=budget_team).monthly_limit


def test_a_booked_window_counts_against_the_budget_before_any_unit_is_held(budget_team, flavors):
    # A window holds no units, so a bound of held units at the dearest price is no bound for its money.
    now = timezone.now()
    hours = min(hours_left_in_month(now) - Decimal("0.5"), Decimal(5))
    if hours < 1:
        now = now - timedelta(hours=2)  # the month's last hour: the window ends by it
        hours = Decimal(1)
    cluster = Cluster.objects.first() or Cluster.objects.create(name="east")
    ReservedWindow.objects.create(ref="reservation:1", team=budget_team, flavor=flavors["l4"], cluster=cluster,
                                  units=2, start=timezone.now() + timedelta(minutes=1),
                                  end=timezone.now() + timedelta(hours=float(hours)), price_per_unit_hour=Decimal("20"))
    window = committed(budget_team.pk, timezone.now())
    assert window > Decimal("50")
    TeamBudget.objects.filter(team=budget_team).update(monthly_limit=(window + 5).quantize(Decimal("0.01")))
    decision = admit(budget_team, priced("a100-80gb", 4, 60, "4.10"), "run:1")  # commits 16.40 > the 5 left
    assert decision.reason.code == AdmissionCode.WAITING_FOR_BUDGET, decision.reason.words
    assert not QuotaHold.objects.filter(ref="run:1").exists()


def test_a_hold_charged_before_a_price_cut_counts_at_its_rate_against_the_budget(budget_team, flavors, mid_month):
    # An endpoint's minimum whose billing began at 50 a unit-hour keeps that rate after the price list is cut:
    # every held unit at today's dearest list price is then less than it commits.
    minimum = ResourceRequest("a100-80gb", 1, 1, cost_per_hour=Decimal("4.10"), committed_units=1, may_borrow=False)
    TeamBudget.objects.filter(team=budget_team).update(monthly_limit=Decimal(10**6))  # room for the minimum's month
    assert admit(budget_team, minimum, "ep:1").admitted
    QuotaHold.objects.filter(ref="ep:1").update(charged_price=Decimal("50"))
    hours = hours_left_in_month(timezone.now())
    dearest = max(max(f.price_per_hour, f.spot_price_per_hour or 0) for f in flavors.values())
    assert dearest < 25
    # Half of what the minimum commits: over budget at its charged rate, far from it at any list price.
    TeamBudget.objects.filter(team=budget_team).update(monthly_limit=(Decimal(25) * hours).quantize(Decimal("0.01")))
    decision = admit(budget_team, priced("l4", 1, 60, "0.80"), "run:1")
    assert decision.reason.code == AdmissionCode.WAITING_FOR_BUDGET, decision.reason.words
