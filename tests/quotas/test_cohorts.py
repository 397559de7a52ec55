"""Cohorts in the database: the locked admit borrows and records it, the queue re-admission
lends across members, the services audit, and the figures the API shows."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import committed, hours_left_in_month, month_spend
from billing.models import QuotaHold, TeamBudget
from fleet.models import GpuFlavor
from quotas import services
from quotas.admission import admit, admit_waiting, release, resize
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.models import Cohort, QueuedRequest, TeamQuota, TeamSharing
from quotas.queue import preview, queue_reason
from teams.models import AuditEvent
from tests.factories import make_team

pytestmark = pytest.mark.django_db


def a100(units: int, may_borrow: bool = True) -> ResourceRequest:
    return ResourceRequest("a100-80gb", units, 1, may_borrow=may_borrow)


@pytest.fixture
def pair(flavors, staff):
    """Two teams of one cohort with 4× a100-80gb each."""
    lender, borrower = make_team("nlp-platform"), make_team("vision")
    for team in (lender, borrower):
        seed_team_quotas(team, {"a100-80gb": 4})
    services.set_cohort(staff, "research", teams=[lender, borrower])
    return lender, borrower


def test_a_team_borrows_what_its_cohort_leaves_unused_and_the_hold_says_so(pair):
    lender, borrower = pair
    assert admit(lender, a100(2), "run:l1").admitted
    decision = admit(borrower, a100(6), "run:b1")
    assert decision.admitted and decision.borrows == 2 and decision.preemptible
    assert QuotaHold.objects.get(ref="run:b1").borrowed_units == 2
    queued = admit(borrower, a100(1), "run:b2")
    assert queued.queued
    assert queue_reason(borrower, "run:b2") == ("waiting for quota: needs 1\u00d7 a100-80gb, 6 of 4 in use; "
                                                "the cohort can lend 0 (nlp-platform uses 2 of its 4)")
    # The lender's own nominal quota is now lent away: it waits too (no reclaim yet).
    assert admit(lender, a100(1), "run:l2").queued
    rows = {row["flavor"]: row for row in services.usage_summary(borrower)}
    assert (rows["a100-80gb"]["borrowed"], rows["a100-80gb"]["borrowable"]) == (2, 0)


def test_releasing_lends_the_freed_units_to_another_members_queue(pair):
    lender, borrower = pair
    assert admit(lender, a100(4), "run:l1").admitted
    assert admit(borrower, a100(4), "run:b1").admitted
    assert admit(borrower, a100(3), "run:b2").queued
    release("run:l1")
    assert admit_waiting(lender) == ["run:b2"]  # the lender's re-admission serves the cohort's queue
    assert QuotaHold.objects.get(ref="run:b2", released_at=None).borrowed_units == 3
    assert not QueuedRequest.objects.exists()


def test_the_preview_says_what_would_be_borrowed(pair):
    _lender, borrower = pair
    decision = preview(borrower, a100(6))
    assert decision.admitted and decision.borrows == 2
    assert preview(borrower, a100(6, may_borrow=False)).rejected  # an endpoint's minimum
    rows = {row["flavor"]: row for row in services.usage_summary(borrower)}
    assert rows["a100-80gb"]["borrowable"] == 4


def test_an_endpoints_minimum_never_borrows_its_burst_may(pair):
    _lender, borrower = pair
    assert admit(borrower, a100(4, may_borrow=False), "ep:1").admitted
    assert admit(borrower, a100(1, may_borrow=False), "ep:2").queued
    assert QueuedRequest.objects.get(ref="ep:2").may_borrow is False
    assert resize(borrower, "ep:1", 5).rejected  # growth of the minimum
    grown = resize(borrower, "ep:1", 6, burst=True)
    assert grown.admitted and QuotaHold.objects.get(ref="ep:1").borrowed_units == 2
    assert resize(borrower, "ep:1", 5).admitted  # shrinking gives borrowed units back first
    assert QuotaHold.objects.get(ref="ep:1").borrowed_units == 1
    assert admit_waiting(borrower) == []  # ep:2 still may not borrow


def test_a_borrowing_limit_and_a_lending_limit_are_set_through_the_audited_service(pair, staff):
    lender, borrower = pair
    flavor = GpuFlavor.objects.get(name="a100-80gb")
    services.set_team_quota(staff, borrower, flavor, 4, borrowing_limit=1)
    services.set_team_quota(staff, lender, flavor, 4, lending_limit=3)
    assert TeamQuota.objects.get(team=lender, flavor=flavor).lending_limit == 3
    event = AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED, team=borrower).first()
    assert event.details["old_limits"] == {"borrowing_limit": None, "lending_limit": None}
    assert event.details["new_limits"] == {"borrowing_limit": 1, "lending_limit": None}
    assert admit(borrower, a100(6), "run:b1").rejected  # 4 + 1 at most, ever
    assert admit(borrower, a100(5), "run:b2").admitted
    # A plain limit change keeps the sharing limits.
    services.set_team_quota(staff, borrower, flavor, 4)
    assert TeamQuota.objects.get(team=borrower, flavor=flavor).borrowing_limit == 1


def test_cohorts_are_changed_through_the_audited_service(pair, staff):
    lender, borrower = pair
    cohort = Cohort.objects.get(name="research")
    assert (cohort.reclaim, cohort.min_runtime_minutes, cohort.preemption_delay_seconds) == ("any", 10, 30)
    services.set_cohort(staff, "research", reclaim="never", teams=[lender])
    assert TeamSharing.objects.get(team=borrower).cohort is None
    event = AuditEvent.objects.filter(target="cohort research").first()
    assert event.details["old"]["teams"] == ["nlp-platform", "vision"]
    assert event.details["new"] == {"reclaim": "never", "min_runtime_minutes": 10, "preemption_delay_seconds": 30,
                                    "teams": ["nlp-platform"]}
    # Outside the cohort its quota is a wall again.
    assert admit(borrower, a100(5), "run:b1").rejected
    services.set_team_sharing(staff, borrower, Decimal("2.5"))
    assert TeamSharing.objects.get(team=borrower).fair_weight == Decimal("2.5")
    services.remove_cohort(staff, cohort)
    assert not Cohort.objects.exists() and TeamSharing.objects.get(team=lender).cohort is None


def test_the_cohorts_queue_admits_no_more_than_a_teams_budget_leaves_across_its_flavors(pair):
    # The fair-share pass re-decides entries of the admitted one's flavor only; the team's budget is shared by all
    # its flavors, so an L4 entry that fit before an A100 entry of its team was admitted is asked again.
    lender, borrower = pair
    seed_team_quotas(borrower, {"a100-80gb": 4, "l4": 1})
    runs = {"run:a": ResourceRequest("a100-80gb", 4, 1, estimated_cost=Decimal("8.20"), cost_per_hour=Decimal("16.40"),
                                     committed_units=4, limit_minutes=30),
            "run:b": ResourceRequest("l4", 1, 1, estimated_cost=Decimal("0.40"), cost_per_hour=Decimal("0.80"),
                                     committed_units=1, limit_minutes=30)}
    hours = hours_left_in_month(timezone.now())
    costs = sorted(request.committed_cost(hours) for request in runs.values())
    # Either fits what the budget leaves, not both.
    TeamBudget.objects.update_or_create(team=borrower, defaults={"monthly_limit": (costs[1] + costs[0] / 2).quantize(
        Decimal("0.01"))})
    assert admit(lender, a100(4), "run:l").admitted and admit(borrower, a100(4), "run:0").admitted
    assert admit(borrower, ResourceRequest("l4", 1, 1), "run:1").admitted
    for ref, request in runs.items():
        assert admit(borrower, request, ref).queued
    release("run:0")
    release("run:1")
    assert len(admit_waiting(borrower)) == 1
    now = timezone.now()
    spent = month_spend([borrower.pk], now)[borrower.pk].spent + committed(borrower.pk, now)
    assert spent <= TeamBudget.objects.get(team=borrower).monthly_limit
    assert QueuedRequest.objects.count() == 1
