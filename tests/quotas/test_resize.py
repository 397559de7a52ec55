"""``admission.resize``: growing decided by the same rules as admission, shrinking always allowed."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import hours_left_in_month, record_usage
from billing.models import QuotaHold, TeamBudget
from quotas.admission import admit, resize
from quotas.constants import AdmissionCode
from quotas.decide import ResourceRequest

pytestmark = pytest.mark.django_db


def units(ref: str) -> int:
    return QuotaHold.objects.held().get(ref=ref).units


@pytest.mark.parametrize(("others", "start", "to", "admitted", "reason", "after"), [
    # (units other workloads hold, this one's units, asked, admitted?, reason, units after)
    (0, 2, 8, True, AdmissionCode.ADMITTED, 8),            # grows into the whole limit (its own units count as free)
    (4, 2, 4, True, AdmissionCode.ADMITTED, 4),            # 4 + 4 = 8, the limit exactly
    (4, 2, 5, False, AdmissionCode.WAITING_FOR_QUOTA, 2),  # 4 + 5 > 8: refused, nothing changes
    (0, 2, 9, False, AdmissionCode.EXCEEDS_QUOTA, 2),      # more than the limit can ever give
    (6, 2, 1, True, AdmissionCode.ADMITTED, 1),            # shrinking always succeeds
    (6, 2, 2, True, AdmissionCode.ADMITTED, 2),            # the same size: nothing to do
])
def test_it_resizes_a_hold_by_the_admission_rules(quota_team, others, start, to, admitted, reason, after):
    if others:
        assert admit(quota_team, ResourceRequest("a100-80gb", others, 1), "run:other").admitted
    assert admit(quota_team, ResourceRequest("a100-80gb", start, 1), "ep:1").admitted
    decision = resize(quota_team, "ep:1", to)
    assert (decision.admitted, decision.reason.code) == (admitted, reason)
    assert not decision.queued  # a resize is answered now: it never queues
    assert units("ep:1") == after
    if not admitted:
        assert "a100-80gb" in decision.reason.words


def test_it_refuses_growth_once_the_budget_is_spent(budget_team, member, mid_month):
    assert admit(budget_team, ResourceRequest("a100-80gb", 1, 1), "ep:1").admitted
    now = timezone.now()
    record_usage(budget_team, "run:old", "a100-80gb", member, now - timedelta(hours=30), now, 1, False)  # 123 > 100
    decision = resize(budget_team, "ep:1", 2)
    assert decision.rejected and decision.reason.code == AdmissionCode.BUDGET_EXHAUSTED
    assert units("ep:1") == 1
    assert resize(budget_team, "ep:1", 1).admitted  # shrinking needs no budget


def test_it_refuses_what_it_cannot_resize(quota_team):
    with pytest.raises(LookupError):
        resize(quota_team, "ep:404", 2)
    assert admit(quota_team, ResourceRequest("a100-80gb", 2, 1), "ep:1").admitted
    with pytest.raises(ValueError, match="at least one unit"):
        resize(quota_team, "ep:1", 0)


def minimum(units: int) -> ResourceRequest:
    """An endpoint's guaranteed minimum of ``units`` A100s: no runtime limit, committed to the month's end."""
    return ResourceRequest("a100-80gb", units, 1, cost_per_hour=Decimal("4.10") * units, committed_units=units,
                           may_borrow=False)


def test_a_raised_minimum_is_weighed_against_the_budget_as_a_new_one_is(budget_team):
    one = minimum(1).committed_cost(hours_left_in_month(timezone.now()))
    TeamBudget.objects.filter(team=budget_team).update(monthly_limit=(one * Decimal("2.5")).quantize(Decimal("0.01")))
    assert admit(budget_team, minimum(1), "ep:1").admitted
    assert admit(budget_team, minimum(4), "ep:2").reason.code == AdmissionCode.WAITING_FOR_BUDGET
    # The same minimum reached by raising ep:1's commits as much: refused with the budget's reason, nothing moved.
    decision = resize(budget_team, "ep:1", 4, committed=4)
    assert decision.rejected and decision.reason.code == AdmissionCode.WAITING_FOR_BUDGET, decision.reason.words
    assert (units("ep:1"), QuotaHold.objects.get(ref="ep:1").committed_units) == (1, 1)
    # A raise the budget holds (one more unit: two in all of the 2.5 it allows) is granted and commits.
    assert resize(budget_team, "ep:1", 2, committed=2).admitted
    assert QuotaHold.objects.get(ref="ep:1").committed_units == 2
    # Burst commits nothing: the budget does not weigh it (only its alert threshold holds it back).
    assert resize(budget_team, "ep:1", 4, burst=True).admitted
