"""The pure victim choice (quotas.reclaim): Kueue's documented reclaim cases as a table, and
hypothesis properties (never above nominal + borrowing, the smallest set, no preemption loop)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.admission import FlavorQuota, Lender
from quotas.reclaim import Candidate, Claim, Never, Rules, choose_victims

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
ANY = Rules("any", timedelta(minutes=10), timedelta(seconds=30))


def claim(units: int, team: str = "vision", priority: int = 1, waited: int = 60) -> Claim:
    return Claim(team, "run:99", units, priority, NOW - timedelta(seconds=waited))


def run(ref: str, team: str, units: int, borrowed: int, age_min: int = 30, priority: int = 1, **kw) -> Candidate:
    return Candidate(ref, team, units, borrowed, priority, NOW - timedelta(minutes=age_min), **kw)


def quota(limit: int, *lenders: Lender, lending: int | None = None) -> FlavorQuota:
    return FlavorQuota(max_units_per_node=8, limit=limit, lending_limit=lending, lenders=tuple(lenders))


def refs(verdict) -> list[str]:
    return [c.ref for c in verdict.victims]


# The vision team (nominal 8) holds 0; nlp-platform (nominal 8) uses 14, 6 of them borrowed.
NLP_OVER6 = Lender("nlp-platform", 8, 14)


CASES = [
    # id, claim, vision's usage, quota, candidates, rules, victims (refs) or the Never code
    ("lender-reclaims", claim(4), 0, quota(8, Lender("nlp-platform", 8, 14)),
     [run("run:1", "nlp-platform", 4, 4)], ANY, ["run:1"]),
    ("fits-already-no-victims", claim(2), 0, quota(8, Lender("nlp-platform", 8, 14)),
     [run("run:1", "nlp-platform", 6, 6)], ANY, Never.FITS),
    ("borrowing-never-preempts", claim(4), 6, quota(8, Lender("nlp-platform", 8, 10)),
     [run("run:1", "nlp-platform", 2, 2)], ANY, Never.NOT_UNDER_NOMINAL),
    ("reclaim-never", claim(4), 0, quota(8, Lender("nlp-platform", 8, 12)),
     [run("run:1", "nlp-platform", 4, 4)], Rules("never", timedelta(0), timedelta(0)), Never.RECLAIM_OFF),
    ("preemption-delay-first", claim(4, waited=10), 0, quota(8, Lender("nlp-platform", 8, 14)),
     [run("run:1", "nlp-platform", 4, 4)], ANY, Never.DELAY),
    ("min-runtime-protects", claim(4), 0, quota(8, Lender("nlp-platform", 8, 14)),
     [run("run:1", "nlp-platform", 4, 4, age_min=5)], ANY, Never.NO_VICTIMS),
    ("lower-priority-rule", claim(6, priority=1), 0, quota(8, Lender("nlp-platform", 8, 14)),
     [run("run:1", "nlp-platform", 2, 2, priority=1), run("run:2", "nlp-platform", 2, 2, priority=0)],
     Rules("lower_priority", timedelta(0), timedelta(0)), Never.NO_VICTIMS),
    ("lower-priority-takes-lower", claim(2, priority=1), 0, quota(8, Lender("nlp-platform", 8, 16)),
     [run("run:1", "nlp-platform", 2, 2, priority=1), run("run:2", "nlp-platform", 2, 2, priority=0)],
     Rules("lower_priority", timedelta(0), timedelta(0)), ["run:2"]),
    ("two-borrowers-highest-share-first", claim(2), 0,
     quota(8, Lender("nlp-platform", 4, 8), Lender("speech", 4, 8)),
     [run("run:1", "nlp-platform", 2, 2, share=0.2), run("run:2", "speech", 2, 2, share=0.5)], ANY, ["run:2"]),
    ("endpoint-burst-first", claim(2), 0, quota(8, Lender("nlp-platform", 8, 16)),
     [run("run:1", "nlp-platform", 2, 2, age_min=60, share=0.9), run("ep:3", "nlp-platform", 2, 2, burst=True)],
     ANY, ["ep:3"]),
    ("newest-admission-first", claim(2), 0, quota(8, Lender("nlp-platform", 8, 16)),
     [run("run:1", "nlp-platform", 2, 2, age_min=60), run("run:2", "nlp-platform", 2, 2, age_min=20)],
     ANY, ["run:2"]),
    ("smallest-set-drops-the-unneeded", claim(6), 0, quota(8, Lender("nlp-platform", 8, 14)),
     [run("run:1", "nlp-platform", 2, 2, age_min=20), run("run:2", "nlp-platform", 6, 6, age_min=40)],
     ANY, ["run:2"]),
    ("only-borrowed-work", claim(4), 0, quota(8, Lender("nlp-platform", 8, 16)),
     [run("run:1", "nlp-platform", 8, 0), run("run:2", "nlp-platform", 4, 4)], ANY, ["run:2"]),
    ("stopping-counts-as-freed", claim(4), 0, quota(8, Lender("nlp-platform", 8, 12)),
     [run("run:1", "nlp-platform", 4, 4, stopping=True), run("run:2", "nlp-platform", 2, 2)], ANY, Never.FITS),
    ("lending-limit-floor-is-not-reclaimed-from-others", claim(2), 4,
     quota(8, Lender("nlp-platform", 8, 10), lending=4),
     [run("run:1", "nlp-platform", 2, 2)], ANY, Never.FITS),
    ("a-team-back-at-nominal-is-no-victim", claim(4), 0,
     quota(8, Lender("nlp-platform", 8, 10), Lender("speech", 0, 6)),
     [run("run:1", "nlp-platform", 2, 2), run("run:2", "nlp-platform", 2, 2, age_min=60)], ANY, Never.NO_VICTIMS),
]


@pytest.mark.parametrize(("claim_", "usage", "facts", "candidates", "rules", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_choose_victims(claim_, usage, facts, candidates, rules, expected):
    verdict = choose_victims(claim_, facts, usage, candidates, rules, NOW)
    if isinstance(expected, list):
        assert refs(verdict) == expected, verdict.words
        assert verdict
    else:
        assert not verdict.victims
        assert verdict.why_not == expected, verdict.words
        assert verdict.words


def test_the_delay_says_how_long_is_left():
    verdict = choose_victims(claim(4, waited=10), quota(8, Lender("nlp-platform", 8, 14)), 0,
                             [run("run:1", "nlp-platform", 4, 4)], ANY, NOW)
    assert verdict.words == "reclaims in 21 s unless capacity frees itself"


# -- properties -----------------------------------------------------------------------------

member = st.tuples(st.integers(0, 8), st.integers(0, 8))  # nominal, lending limit


@st.composite
def cohorts(draw):
    """A claimant and 1–3 other members, each holding runs admitted by decide()'s own rule."""
    own_limit = draw(st.integers(1, 8))
    others = draw(st.lists(member, min_size=1, max_size=3))
    names = [f"team-{i}" for i in range(len(others))]
    candidates, lenders = [], []
    # Each member holds its nominal plus some borrowed runs (what a cohort with an idle claimant allows).
    spare = own_limit + sum(min(limit, lending) for limit, lending in others)
    for name, (limit, lending) in zip(names, others, strict=True):
        borrowed_runs = draw(st.lists(st.integers(1, 4), max_size=3))
        held = limit
        for i, units in enumerate(borrowed_runs):
            if units > spare:
                break
            spare -= units
            held += units
            candidates.append(run(f"run:{name}-{i}", name, units, units, age_min=draw(st.integers(0, 60)),
                                  priority=draw(st.integers(0, 2)), share=draw(st.floats(0, 2))))
        lenders.append(Lender(name, limit, held, lending))
    facts = FlavorQuota(max_units_per_node=8, limit=own_limit, lenders=tuple(lenders))
    return facts, candidates, draw(st.integers(1, own_limit))


@settings(max_examples=300, deadline=None)
@given(cohorts())
def test_victims_are_a_smallest_set_of_borrowed_work_that_lets_the_claim_in(case):
    facts, candidates, units = case
    verdict = choose_victims(claim(units, team="me"), facts, 0, candidates, Rules("any", timedelta(0), timedelta(0)),
                             NOW)
    if not verdict.victims:
        return
    from quotas.reclaim import _fits, _without
    c = claim(units, team="me")
    assert _fits(c, _without(facts, list(verdict.victims)), 0)
    for victim in verdict.victims:
        assert victim.borrowed > 0 and victim.team != "me"
        rest = [v for v in verdict.victims if v is not victim]
        assert not _fits(c, _without(facts, rest), 0), "a victim the claim did not need"


@settings(max_examples=300, deadline=None)
@given(cohorts())
def test_no_preemption_loop(case):
    """After the claimant is admitted within its nominal quota, no victim's team can take it back."""
    facts, candidates, units = case
    verdict = choose_victims(claim(units, team="me"), facts, 0, candidates, Rules("any", timedelta(0), timedelta(0)),
                             NOW)
    if not verdict.victims:
        return
    # Marked borrowed on purpose (as a stale mark could be): what protects it is that its team
    # holds no more than its nominal quota, which the claim's rule guarantees.
    admitted = run("run:me", "me", units, borrowed=units, age_min=600, priority=0, share=5.0)
    for victim in verdict.victims:
        lender = next(m for m in facts.lenders if m.team == victim.team)
        back = FlavorQuota(max_units_per_node=8, limit=lender.limit, lenders=(Lender("me", facts.limit, units),))
        again = choose_victims(Claim(victim.team, victim.ref, victim.units, 2, NOW - timedelta(hours=1)), back,
                               max(0, lender.in_use - victim.units), [admitted],
                               Rules("any", timedelta(0), timedelta(0)), NOW)
        assert not again.victims


def _ceil_to(seconds: int, step: int) -> int:
    return -(-seconds // step) * step


@settings(max_examples=200, deadline=None)
@given(cohorts(), st.integers(0, 120), st.integers(0, 90))
def test_a_team_under_nominal_is_kept_out_no_longer_than_delay_grace_and_a_cycle(case, delay_s, grace_s):
    """The claim is seen at a cycle; every CYCLE seconds reclaim runs, victims' units are free
    once their grace has passed, and the claim is admitted at the first cycle where it fits.
    All borrowed work is past its min runtime. Bound: the delay and the grace, each rounded up
    to whole cycles, plus one cycle."""
    cycle = 5
    facts, candidates, units = case
    rules = Rules("any", timedelta(0), timedelta(seconds=delay_s))
    start = NOW
    want = claim(units, team="me", waited=0)
    want = Claim(want.team, want.ref, want.units, want.priority, start)
    stopping: dict[str, datetime] = {}  # ref -> when its pods are gone
    now = start
    bound = start + timedelta(seconds=_ceil_to(delay_s, cycle) + _ceil_to(grace_s, cycle) + cycle)
    while now <= bound:
        gone = [c for c in candidates if c.ref in stopping and stopping[c.ref] <= now]
        from quotas.reclaim import _fits, _without
        if _fits(want, _without(facts, gone), 0):
            return  # admitted at this cycle
        marked = [dataclasses.replace(c, stopping=c.ref in stopping) for c in candidates]
        verdict = choose_victims(want, facts, 0, marked, rules, now)
        for victim in verdict.victims:
            stopping[victim.ref] = now + timedelta(seconds=grace_s)
        # Every borrowed unit is eligible here, and a claim within its nominal quota is only ever
        # kept out by borrowers: reclaim always finds enough.
        assert verdict.why_not != Never.NO_VICTIMS, verdict.words
        now += timedelta(seconds=cycle)
    raise AssertionError(f"still kept out at {now - start} (delay {delay_s} s, grace {grace_s} s)")
