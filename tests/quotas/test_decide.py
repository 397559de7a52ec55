"""Table-driven tests of the pure admission rule, one row per reason."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.budget_rule import BudgetState
from jobs.constants import MAX_RUNTIME_MINUTES
from quotas.constants import PERMANENT_CODES, AdmissionCode, Outcome
from quotas.decide import FlavorQuota, ResourceRequest, decide

A100 = FlavorQuota(max_units_per_node=8, limit=8)
NO_BUDGET = None
BUDGET_OK = BudgetState(Decimal("100"), Decimal("99.99"), "USD")
BUDGET_SPENT = BudgetState(Decimal("100"), Decimal("100.00"), "USD")
ALERTED = BudgetState(Decimal("100"), Decimal("80.00"), "USD", alert_threshold_percent=80)


def req(units: int, per_node: int | None = None, flavor: str = "a100-80gb", cost: str | None = None,
        rate: str | None = None) -> ResourceRequest:
    return ResourceRequest(flavor=flavor, units=units, units_per_node=per_node or units,
                           estimated_cost=Decimal(cost) if cost else None, cost_per_hour=Decimal(rate) if rate else None)


#: 400 budget, 100 spent, 69.85 committed: 230.15 left; 100 hours to the month's end.
BUDGET_COMMITTED = BudgetState(Decimal("400"), Decimal("100"), "USD", Decimal("69.85"), Decimal("100"))
#: Nothing left: spent and committed money take the whole budget (spent alone does not).
NOTHING_LEFT = BudgetState(Decimal("400"), Decimal("100"), "USD", Decimal("300"), Decimal("100"))


CASES = [
    # id, request, usage, quota, budget, outcome, reason, message fragment
    ("fits", req(4), 2, A100, NO_BUDGET, Outcome.ADMIT, AdmissionCode.ADMITTED, "admitted: 4\u00d7 a100-80gb, 6 of 8 now in use"),
    ("fits-exactly", req(2), 6, A100, BUDGET_OK, Outcome.ADMIT, AdmissionCode.ADMITTED, "8 of 8 now in use"),
    ("waits", req(4), 6, A100, NO_BUDGET, Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA,
     "waiting for quota: needs 4\u00d7 a100-80gb, 6 of 8 in use"),
    ("waits-one-over", req(1), 8, A100, BUDGET_OK, Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA, "8 of 8 in use"),
    ("would-exceed-budget", req(4, cost="412.80"), 0, A100, BUDGET_COMMITTED, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_BUDGET, "waiting for budget: est. 412.80 would exceed the 230.15 USD left this month"),
    ("fits-the-budget", req(4, cost="230.15"), 0, A100, BUDGET_COMMITTED, Outcome.ADMIT, AdmissionCode.ADMITTED,
     "4 of 8 now in use"),
    # Without a runtime limit a run counts until the month's end: 16.40 an hour for 100 hours.
    ("no-limit-counts-to-the-months-end", req(4, rate="16.40"), 0, A100, BUDGET_COMMITTED, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_BUDGET, "waiting for budget: est. 1,640.00 until the month's end (no runtime limit) would "
     "exceed the 230.15 USD left this month"),
    ("no-limit-fits-until-the-months-end", req(1, rate="2.30"), 0, A100, BUDGET_COMMITTED, Outcome.ADMIT,
     AdmissionCode.ADMITTED, "1 of 8 now in use"),
    ("no-limit-with-nothing-left", req(1, rate="4.10"), 0, A100, NOTHING_LEFT, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_BUDGET, "would exceed the 0.00 USD left this month"),
    ("a-limit-counts-until-the-months-end-at-most", req(4, cost="3280.00", rate="16.40"), 0, A100,
     BUDGET_COMMITTED, Outcome.QUEUE, AdmissionCode.WAITING_FOR_BUDGET, "est. 1,640.00 would exceed"),
    # Unpriced (an endpoint's burst: never committed, reclaimed when the budget is spent).
    ("unpriced-not-weighed", req(4), 0, A100, BUDGET_COMMITTED, Outcome.ADMIT, AdmissionCode.ADMITTED, "admitted"),
    # Burst past the alert threshold (80 of 100 spent): held back, even while the quota has room.
    ("burst-past-the-alert", dataclasses.replace(req(2), burst=True), 0, A100, ALERTED, Outcome.QUEUE,
     AdmissionCode.BUDGET_ALERT, "the month's spend passed 80% of the budget"),
    ("no-burst-when-spent", dataclasses.replace(req(2), burst=True), 0, A100,
     dataclasses.replace(BUDGET_SPENT, alert_threshold_percent=80), Outcome.QUEUE, AdmissionCode.BUDGET_ALERT, "80%"),
    ("burst-below-the-alert", dataclasses.replace(req(2), burst=True), 0, A100,
     dataclasses.replace(ALERTED, spent_month=Decimal("79.99")), Outcome.ADMIT, AdmissionCode.ADMITTED, "admitted"),
    ("not-burst-past-the-alert", req(2), 0, A100, ALERTED, Outcome.ADMIT, AdmissionCode.ADMITTED, "admitted"),
    ("budget-spent", req(1), 0, A100, BUDGET_SPENT, Outcome.REJECT, AdmissionCode.BUDGET_EXHAUSTED,
     "monthly budget spent: 100.00 of 100.00 USD"),
    ("no-quota", req(1), 0, FlavorQuota(max_units_per_node=8, limit=None), NO_BUDGET, Outcome.REJECT,
     AdmissionCode.NO_QUOTA_FOR_FLAVOR, "no quota for a100-80gb"),
    ("zero-quota", req(1), 0, FlavorQuota(max_units_per_node=8, limit=0), NO_BUDGET, Outcome.REJECT,
     AdmissionCode.NO_QUOTA_FOR_FLAVOR, "no quota"),
    ("over-limit", req(16, 8), 0, FlavorQuota(max_units_per_node=8, limit=8), NO_BUDGET, Outcome.REJECT,
     AdmissionCode.EXCEEDS_QUOTA, "needs 16\u00d7 a100-80gb, more than the team's limit of 8"),
    ("over-node", req(2, 2, "l4"), 0, FlavorQuota(max_units_per_node=1, limit=4), NO_BUDGET, Outcome.REJECT,
     AdmissionCode.EXCEEDS_LARGEST_NODE, "needs 2\u00d7 l4 per worker, but the largest node has 1"),
    ("unknown", req(1, flavor="tpu"), 0, FlavorQuota(exists=False), NO_BUDGET, Outcome.REJECT,
     AdmissionCode.UNKNOWN_FLAVOR, "unknown GPU flavor 'tpu'"),
    ("inactive", req(1), 0, FlavorQuota(active=False, max_units_per_node=8, limit=8), NO_BUDGET, Outcome.REJECT,
     AdmissionCode.INACTIVE_FLAVOR, "no longer offered"),
    ("zero-units", ResourceRequest("a100-80gb", 0, 0), 0, A100, NO_BUDGET, Outcome.REJECT, AdmissionCode.INVALID_REQUEST,
     "invalid request"),
    ("per-node-above-total", ResourceRequest("a100-80gb", 2, 4), 0, A100, NO_BUDGET, Outcome.REJECT,
     AdmissionCode.INVALID_REQUEST, "invalid request"),
]


@pytest.mark.parametrize(("request_", "usage", "quota", "budget", "outcome", "reason", "message"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_it_decides_every_reason(request_, usage, quota, budget, outcome, reason, message):
    decision = decide(request_, usage, quota, budget)
    assert (decision.outcome, decision.reason.code) == (outcome, reason)
    assert message in decision.reason.words
    assert decision.admitted == (outcome == Outcome.ADMIT)
    assert decision.queued == (outcome == Outcome.QUEUE)
    assert decision.rejected == (outcome == Outcome.REJECT)


@pytest.mark.parametrize(("limit", "spent", "threshold", "left", "exhausted", "alert"), [
    (None, "500", 80, "0", False, False),  # no budget: unlimited, never an alert
    ("100", "79.99", 80, "20.01", False, False),
    ("100", "80", 80, "20", False, True),  # the threshold itself alerts
    ("100", "100", 80, "0", True, True),  # spent: exhausted, and an alert whatever the threshold
    ("100", "100", None, "0", True, True),
    ("0", "0", 80, "0", True, True),  # a zero budget is spent from the start
])
def test_a_budgets_left_exhausted_and_alert_state_has_one_rule(limit, spent, threshold, left, exhausted, alert):
    """What decide() goes by, and what budget summaries (pages, API, the budget step) report."""
    state = BudgetState(Decimal(limit) if limit else None, Decimal(spent), "USD", alert_threshold_percent=threshold)
    assert (state.exhausted, state.alert) == (exhausted, alert)
    if limit is not None:
        assert state.left == Decimal(left)


DRAINED = "a100-80gb is only offered by east, which is draining"  # what cluster.placement.no_usable_cluster says

#: Work no cluster can take now (``no_cluster``, worked out outside decide): it waits, but only
#: once nothing the team can act on holds it back — what can never work is still refused.
CLUSTER_CASES = [
    ("waits-for-a-cluster", req(4), 2, A100, NO_BUDGET, Outcome.QUEUE, AdmissionCode.WAITING_FOR_CLUSTER,
     f"waiting: {DRAINED}"),
    ("quota-is-named-first", req(4), 6, A100, NO_BUDGET, Outcome.QUEUE, AdmissionCode.WAITING_FOR_QUOTA,
     "waiting for quota"),
    ("money-is-named-first", req(4, cost="412.80"), 0, A100, BUDGET_COMMITTED, Outcome.QUEUE,
     AdmissionCode.WAITING_FOR_BUDGET, "waiting for budget"),
    ("never-is-still-refused", req(16, 8), 0, A100, NO_BUDGET, Outcome.REJECT, AdmissionCode.EXCEEDS_QUOTA, "more than"),
    ("spent-is-still-refused", req(1), 0, A100, BUDGET_SPENT, Outcome.REJECT, AdmissionCode.BUDGET_EXHAUSTED, "spent"),
]


@pytest.mark.parametrize(("request_", "usage", "quota", "budget", "outcome", "reason", "message"),
                         [case[1:] for case in CLUSTER_CASES], ids=[case[0] for case in CLUSTER_CASES])
def test_it_queues_work_no_cluster_can_take_after_every_other_check(request_, usage, quota, budget, outcome, reason,
                                                                    message):
    decision = decide(request_, usage, quota, budget, DRAINED)
    assert (decision.outcome, decision.reason.code) == (outcome, reason)
    assert message in decision.reason.words
    # Without the clusters' word the same request is decided as before: the clusters only ever queue.
    assert decide(request_, usage, quota, budget).reason.code == (AdmissionCode.ADMITTED if reason == AdmissionCode.WAITING_FOR_CLUSTER
                                                             else reason)


def test_it_covers_every_reason_in_the_table():
    reasons = {value for name, value in vars(AdmissionCode).items() if name.isupper()}
    assert reasons == {case[6] for case in CASES + CLUSTER_CASES}


def test_it_treats_every_reject_but_budget_as_permanent():
    rejects = {case[6] for case in CASES if case[5] == Outcome.REJECT}
    assert rejects - {AdmissionCode.BUDGET_EXHAUSTED} == set(PERMANENT_CODES)


def test_it_names_the_impossible_obstacle_before_the_temporary_one():
    # A request that exceeds the limit is rejected even while the quota is fully used.
    decision = decide(req(9, 8), 8, A100, BUDGET_SPENT)
    assert decision.reason.code == AdmissionCode.EXCEEDS_QUOTA


def test_with_nothing_left_a_run_without_a_limit_waits_like_one_with_a_limit():
    """The gate of issue 20: 0.00 left let a run without a runtime limit start while the same run with one queued."""
    with_limit, without = req(1, cost="4.10", rate="4.10"), req(1, rate="4.10")
    assert decide(with_limit, 0, A100, NOTHING_LEFT).reason.code == AdmissionCode.WAITING_FOR_BUDGET
    assert decide(without, 0, A100, NOTHING_LEFT).reason.code == AdmissionCode.WAITING_FOR_BUDGET


MONEY = st.decimals(min_value=0, max_value=100_000, places=2)


@settings(max_examples=500, deadline=None)
@given(units=st.integers(1, 8), usage=st.integers(0, 8), price=st.decimals(min_value=Decimal("0.01"), max_value=50,
                                                                           places=4),
       minutes=st.integers(1, MAX_RUNTIME_MINUTES), limit=MONEY, spent=MONEY, committed=MONEY,
       hours_left=st.decimals(min_value=0, max_value=31 * 24, places=4), budgeted=st.booleans())
def test_removing_the_runtime_limit_never_turns_a_queue_into_an_admission(
        units, usage, price, minutes, limit, spent, committed, hours_left, budgeted):
    rate = price * units
    with_limit = ResourceRequest("a100-80gb", units, units, cost_per_hour=rate, estimated_cost=rate * minutes / 60)
    without = dataclasses.replace(with_limit, estimated_cost=None)
    budget = BudgetState(limit, spent, "USD", committed, hours_left) if budgeted else None
    limited, unlimited = decide(with_limit, usage, A100, budget), decide(without, usage, A100, budget)
    if not limited.admitted:
        assert not unlimited.admitted, (limited.reason.words, unlimited.reason.words)
    # ...and leaving it out never counts less against the budget.
    assert without.committed_cost(hours_left) >= with_limit.committed_cost(hours_left)
