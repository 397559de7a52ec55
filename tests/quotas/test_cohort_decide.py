"""The cohort rule of the pure decide(): Kueue's documented cohort cases as a table, and
hypothesis properties of any sequence of admissions and releases in a cohort."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.constants import AdmissionCode, Outcome
from quotas.decide import FlavorQuota, Lender, ResourceRequest, decide


def req(units: int, may_borrow: bool = True) -> ResourceRequest:
    return ResourceRequest(flavor="a100-80gb", units=units, units_per_node=1, may_borrow=may_borrow)


def quota(limit: int, *lenders: Lender, borrowing: int | None = None, lending: int | None = None) -> FlavorQuota:
    return FlavorQuota(max_units_per_node=8, limit=limit, borrowing_limit=borrowing, lending_limit=lending,
                       lenders=tuple(lenders))


NLP_IDLE2 = Lender("nlp-platform", 8, 6)  # 2 of its 8 idle

CASES = [
    # id, request, usage, quota, outcome, borrows, message fragment
    ("nominal-first", req(2), 4, quota(8, NLP_IDLE2), Outcome.ADMIT, 0, "6 of 8 now in use"),
    ("borrows-idle-units", req(4), 6, quota(8, Lender("nlp-platform", 8, 2)), Outcome.ADMIT, 2,
     "10 of 8 now in use, 2 borrowed from the cohort"),
    ("borrows-within-borrowing-limit", req(2), 8, quota(8, Lender("nlp-platform", 8, 0), borrowing=2),
     Outcome.ADMIT, 2, "2 borrowed"),
    ("beyond-borrowing-limit-waits", req(3), 8, quota(8, Lender("nlp-platform", 8, 0), borrowing=2),
     Outcome.QUEUE, 0, "the cohort can lend 2 (nlp-platform uses 0 of its 8)"),
    ("beyond-borrowing-limit-ever-rejects", req(11), 0, quota(8, Lender("nlp-platform", 8, 0), borrowing=2),
     Outcome.REJECT, 0, "more than the team's limit of 8 and what its cohort can lend (2)"),
    ("the-issue's-reason", req(4), 8, quota(8, NLP_IDLE2), Outcome.QUEUE, 0,
     "waiting for quota: needs 4\u00d7 a100-80gb, 8 of 8 in use; the cohort can lend 2 (nlp-platform uses 6 of its 8)"),
    ("lending-limit-keeps-a-private-floor", req(3), 8, quota(8, Lender("nlp-platform", 8, 0, lending_limit=2)),
     Outcome.QUEUE, 0, "the cohort can lend 2"),
    ("lending-limit-lends-its-part", req(2), 8, quota(8, Lender("nlp-platform", 8, 0, lending_limit=2)),
     Outcome.ADMIT, 2, "2 borrowed"),
    ("the-lender's-floor-is-its-own", req(6), 0, quota(8, Lender("nlp-platform", 10, 10), lending=2),
     Outcome.ADMIT, 0, "6 of 8 now in use"),
    ("nominal-lent-away-waits", req(2), 0, quota(8, Lender("vision", 2, 10)), Outcome.QUEUE, 0,
     "the cohort can lend 0 (vision uses 10 of its 2)"),
    ("nominal-zero-borrows", req(2), 0, quota(0, Lender("vision", 4, 0)), Outcome.ADMIT, 2, "2 borrowed"),
    ("endpoint-minimum-never-borrows", req(4, may_borrow=False), 6, quota(8, Lender("nlp-platform", 8, 0)),
     Outcome.QUEUE, 0, "waiting for quota"),
    ("endpoint-minimum-never-above-nominal", req(9, may_borrow=False), 0, quota(8, Lender("nlp-platform", 8, 0)),
     Outcome.REJECT, 0, "more than the team's limit of 8"),
    ("alone-in-a-cohort-is-a-wall", req(2), 8, quota(8), Outcome.QUEUE, 0, "the cohort can lend 0"),
]


@pytest.mark.parametrize(("request_", "usage", "facts", "outcome", "borrows", "fragment"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_in_a_cohort(request_, usage, facts, outcome, borrows, fragment):
    decision = decide(request_, usage, facts)
    assert (decision.outcome, decision.borrows) == (outcome, borrows), decision.reason.words
    assert fragment in decision.reason.words
    assert decision.preemptible == (borrows > 0)


def test_two_borrowers_compete_for_the_same_idle_units():
    """A lends 2 idle units; B takes them, then C (deciding with B's use counted) finds none left."""
    lender = Lender("a", 4, 2)
    b = decide(req(2), 4, quota(4, lender, Lender("c", 4, 4)))
    assert b.admitted and b.borrows == 2
    c = decide(req(1), 4, quota(4, lender, Lender("b", 4, 6)))
    assert c.queued and "the cohort can lend 0" in c.reason.words


def test_a_team_outside_any_cohort_is_unchanged():
    wall = FlavorQuota(max_units_per_node=8, limit=8)
    assert decide(req(2), 6, wall).admitted and decide(req(2), 6, wall).borrows == 0
    assert decide(req(3), 6, wall).reason.words == "waiting for quota: needs 3\u00d7 a100-80gb, 6 of 8 in use"
    assert decide(req(9), 0, wall).reason.words == "needs 9\u00d7 a100-80gb, more than the team's limit of 8"
    zero = FlavorQuota(max_units_per_node=8, limit=0)
    assert decide(req(1), 0, zero).reason.code == AdmissionCode.NO_QUOTA_FOR_FLAVOR
    # Borrowing and lending limits mean nothing outside a cohort.
    assert decide(req(3), 6, dataclasses.replace(wall, borrowing_limit=4)).queued


# -- properties ------------------------------------------------------------------------------


@st.composite
def cohorts(draw):
    size = draw(st.integers(2, 4))
    limits = draw(st.lists(st.integers(0, 8), min_size=size, max_size=size))
    borrowing = draw(st.lists(st.none() | st.integers(0, 6), min_size=size, max_size=size))
    lending = draw(st.lists(st.none() | st.integers(0, 8), min_size=size, max_size=size))
    steps = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 8), st.booleans(), st.booleans()),
                          max_size=40))
    return limits, borrowing, lending, steps


@settings(max_examples=300, deadline=None)
@given(cohorts())
def test_no_team_above_nominal_plus_borrowing_and_the_cohort_within_its_nominals(cohort):
    """Any admissions and releases, each decided with the cohort's figures of that moment."""
    limits, borrowing, lending, steps = cohort
    held: list[list[int]] = [[] for _ in limits]  # per team, the units of each admitted request
    names = [f"t{i}" for i in range(len(limits))]
    for team, units, release, may_borrow in steps:
        if release and held[team]:
            held[team].pop(0)
            continue
        used = [sum(h) for h in held]
        lenders = tuple(Lender(names[i], limits[i], used[i], lending[i]) for i in range(len(limits)) if i != team)
        facts = quota(limits[team], *lenders, borrowing=borrowing[team], lending=lending[team])
        decision = decide(req(units, may_borrow), used[team], facts)
        if decision.admitted:
            held[team].append(units)
            assert decision.borrows == max(0, used[team] + units - limits[team]) - max(0, used[team] - limits[team])
            assert may_borrow or decision.borrows == 0
        used = [sum(h) for h in held]
        for i, limit in enumerate(limits):
            if borrowing[i] is not None:
                assert used[i] <= limit + borrowing[i]
        assert sum(used) <= sum(limits)


@settings(max_examples=200, deadline=None)
@given(cohorts())
def test_a_lenders_private_floor_always_admits(cohort):
    """Whatever others borrowed, a team's request within its private floor (nominal − lending
    limit) is admitted: that part of its quota is never lent."""
    limits, borrowing, lending, steps = cohort
    held = [0 for _ in limits]
    names = [f"t{i}" for i in range(len(limits))]
    for team, units, _release, _may_borrow in steps:
        lenders = tuple(Lender(names[i], limits[i], held[i], lending[i]) for i in range(len(limits)) if i != team)
        facts = quota(limits[team], *lenders, borrowing=borrowing[team], lending=lending[team])
        floor = limits[team] - (limits[team] if lending[team] is None else min(limits[team], lending[team]))
        decision = decide(req(units), held[team], facts)
        if held[team] + units <= floor:
            assert decision.admitted
        if decision.admitted:
            held[team] += units
