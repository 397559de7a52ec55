"""Fair share (docs/design.md "Sharing, preemption, clusters"): the share, the decayed memory, and the tournament that hands freed
capacity to the lowest share first — Kueue's documented fair-sharing cases as a table, a
hypothesis property of the order, and the database path through admit_waiting."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from billing.models import UsageRecord
from core.priority import Priority
from fleet.models import GpuFlavor
from quotas import fairshare, services
from quotas.admission import admit, admit_waiting, fair_order, release
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.facts import CohortFigures, cohort_figures
from quotas.models import QueuedRequest, TeamQuota
from tests.factories import make_team

NOW = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
A100 = GpuFlavor(pk=1, name="a100-80gb", active=True, max_units_per_node=8)
L4 = GpuFlavor(pk=2, name="l4", active=True, max_units_per_node=8)


def figures(*members, usage=None) -> CohortFigures:
    """Members ``(team id, limit, lending limit, weight)`` of one cohort, all for a100-80gb."""
    return CohortFigures(
        slugs={tid: f"t{tid}" for tid, *_ in members},
        quotas={(tid, A100.pk): TeamQuota(team_id=tid, flavor_id=A100.pk, limit=limit, lending_limit=lending)
                for tid, limit, lending, _w in members},
        usage=dict(usage or {}),
        weights={tid: Decimal(weight) for tid, _l, _ll, weight in members})


def entry(pk: int, team: int, units: int = 1, priority: Priority = Priority.NORMAL, minute: int | None = None,
          flavor: GpuFlavor = A100) -> QueuedRequest:
    return QueuedRequest(pk=pk, ref=f"run:{pk}", team_id=team, flavor=flavor, units=units, units_per_node=1,
                         priority=priority.rank, created_at=NOW + timedelta(minutes=pk if minute is None else minute))


def admitted(entries, cohort, remembered=None) -> list[str]:
    return [e.ref for e, _b in fair_order(entries, cohort, {}, remembered or {})]


class TestShare:
    @pytest.mark.parametrize(("borrowed", "remembered", "lendable", "weight", "expected"), [
        (0, 0.0, 8, 1, 0.0),  # borrows nothing: 0, whatever the weight
        (0, 0.0, 8, 0, 0.0),
        (4, 0.0, 8, 1, 0.5),
        (4, 0.0, 8, 2, 0.25),  # twice the weight: half the share
        (2, 2.0, 8, 1, 0.5),  # what it remembers counts like what it borrows now
        (1, 0.0, 8, 0, math.inf),  # weight 0: borrows last
        (0, 0.5, 8, 0, math.inf),
        (1, 0.0, 0, 1, math.inf),  # nothing lent, still borrowing (a quota lowered): at the back
    ])
    def test_the_share(self, borrowed, remembered, lendable, weight, expected):
        assert fairshare.share(borrowed, remembered, lendable, Decimal(weight)) == expected

    def test_the_cohort_figures_say_what_is_lent_and_borrowed(self):
        cohort = figures((1, 4, None, 1), (2, 4, 1, 1), usage={(1, A100.pk): 6})
        assert cohort.lendable(A100.pk) == 5  # 4 + the 1 of the second's lending limit
        assert (cohort.borrowed(1, A100.pk), cohort.borrowed(2, A100.pk), cohort.borrowed(2, A100.pk, 5)) == (2, 0, 1)
        assert fairshare.shares(cohort, A100.pk, {2: 1.0}) == {1: 0.4, 2: 0.2}


class TestMemory:
    def test_a_team_that_always_borrowed_b_units_remembers_b(self):
        rows = [(1, NOW - timedelta(hours=h + 1), 3.0) for h in range(168 * 8)]  # 3 units, every hour
        assert fairshare.remembered_from(rows, NOW, 168)[1] == pytest.approx(3.0, rel=0.01)

    def test_borrowing_weighs_half_after_a_half_life(self):
        hour_ago = fairshare.remembered_from([(1, NOW - timedelta(hours=1), 10.0)], NOW, 24)[1]
        day_ago = fairshare.remembered_from([(1, NOW - timedelta(hours=25), 10.0)], NOW, 24)[1]
        assert day_ago == pytest.approx(hour_ago / 2)


class TestKueueCases:
    """Kueue's fair-sharing examples: freed capacity goes to the lowest share after admission."""

    def test_two_borrowers_weighted_1_and_2_end_up_borrowing_1_to_2(self):
        # A lender's 6 idle units; teams 2 (weight 1) and 3 (weight 2) have no nominal quota of
        # their own and queue more than the pool holds, team 2's entries all older.
        cohort = figures((1, 6, None, 1), (2, 0, None, 1), (3, 0, None, 2))
        entries = [entry(i, 2) for i in range(1, 6)] + [entry(i, 3) for i in range(11, 16)]
        order = admitted(entries, cohort)
        assert len(order) == 6
        assert (cohort.borrowed(2, A100.pk), cohort.borrowed(3, A100.pk)) == (2, 4)
        assert order[0] == "run:11"  # the heavier team's 1 unit is a share of 1/12, the other's 1/6

    def test_a_team_of_weight_0_borrows_last(self):
        cohort = figures((1, 3, None, 1), (2, 0, None, 0), (3, 0, None, 1))
        entries = [entry(1, 2, priority=Priority.HIGH), entry(2, 2), entry(3, 3), entry(4, 3)]
        assert admitted(entries, cohort) == ["run:3", "run:4", "run:1"]  # older and higher, yet last

    def test_weight_0_still_uses_its_own_quota_first_come(self):
        cohort = figures((1, 2, None, 1), (2, 2, None, 0))
        assert admitted([entry(1, 2), entry(2, 1)], cohort) == ["run:1", "run:2"]  # neither borrows: queue order

    def test_a_team_that_borrowed_all_night_yields_to_one_that_did_not(self):
        cohort = figures((1, 2, None, 1), (2, 0, None, 1), (3, 0, None, 1))
        entries = [entry(1, 2), entry(2, 3)]  # team 2's is older
        assert admitted(entries, cohort) == ["run:1", "run:2"]
        cohort = figures((1, 1, None, 1), (2, 0, None, 1), (3, 0, None, 1))
        assert admitted(entries, cohort, remembered={2: 0.8}) == ["run:2"]  # it remembers; one unit free

    def test_priority_then_age_break_equal_shares(self):
        cohort = figures((1, 4, None, 1), (2, 0, None, 1), (3, 0, None, 1))
        entries = [entry(1, 2), entry(2, 3, priority=Priority.HIGH), entry(3, 3), entry(4, 2)]
        assert admitted(entries, cohort) == ["run:2", "run:1", "run:3", "run:4"]

    def test_work_within_its_own_nominal_quota_goes_before_any_that_borrows(self):
        # Team 2 reclaimed its 2 units: its queued work gets them, not the older borrower's.
        cohort = figures((1, 0, None, 1), (2, 2, None, 1))
        assert admitted([entry(1, 1, units=2, priority=Priority.HIGH), entry(2, 2, units=2)], cohort) == ["run:2"]

    def test_an_entry_that_borrows_nothing_adds_nothing_to_its_share(self):
        # Team 2 borrows 1 now; team 3 asks for 2 within its nominal quota: share after 0 < 1/6.
        cohort = figures((1, 4, None, 1), (2, 0, None, 1), (3, 2, None, 1), usage={(2, A100.pk): 1})
        assert admitted([entry(1, 2), entry(2, 3, units=2)], cohort)[0] == "run:2"

    def test_a_small_request_passes_a_large_one_that_does_not_fit(self):
        cohort = figures((1, 2, None, 1), (2, 0, None, 1))
        assert admitted([entry(1, 2, units=3), entry(2, 2, units=2)], cohort) == ["run:2"]

    def test_flavors_do_not_compete(self):
        cohort = figures((1, 1, None, 1), (2, 0, None, 1))
        cohort.quotas[(1, L4.pk)] = TeamQuota(team_id=1, flavor_id=L4.pk, limit=1)
        cohort.quotas[(2, L4.pk)] = TeamQuota(team_id=2, flavor_id=L4.pk, limit=0)
        assert sorted(admitted([entry(1, 2), entry(2, 2, flavor=L4)], cohort)) == ["run:1", "run:2"]


members = st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(0, 4)),
                             st.sampled_from([0, 1, 2, 3])), min_size=2, max_size=4)


@st.composite
def cohorts(draw):
    """Plain figures (printable when a case fails): members, usage, queue, remembered units."""
    spec = draw(members)
    ids = list(range(1, len(spec) + 1))
    usage = {tid: draw(st.integers(0, 3)) for tid in ids}
    queue = draw(st.lists(st.tuples(st.sampled_from(ids), st.integers(1, 4), st.sampled_from(list(Priority)),
                                    st.integers(0, 5)), max_size=10))
    remembered = {tid: draw(st.floats(0, 3)) for tid in ids}
    return spec, usage, queue, remembered


@hsettings(max_examples=300, deadline=None)
@given(cohorts())
def test_no_entry_is_admitted_before_a_lower_share_one_that_also_fits(case):
    """Replayed step by step: each admitted entry had, among those that fit then, the lowest
    (borrows at all, share after admission, priority, age) — nominal work first, then the
    lowest share; and when it ends, nothing left fits."""
    spec, usage, queue, remembered = case
    ids = list(range(1, len(spec) + 1))
    cohort = figures(*((tid, limit, lending, weight) for tid, (limit, lending, weight) in zip(ids, spec, strict=True)),
                     usage={(tid, A100.pk): used for tid, used in usage.items()})
    entries = [entry(i, team, units, priority, minute) for i, (team, units, priority, minute) in enumerate(queue, 1)]
    replay = CohortFigures(cohort.slugs, cohort.quotas, dict(cohort.usage), cohort.weights)
    order = fair_order(entries, cohort, {}, remembered)
    left = list(entries)

    def fitting():
        return [e for e in left if fair_order([e], CohortFigures(replay.slugs, replay.quotas, dict(replay.usage),
                                                                 replay.weights), {}, remembered)]

    def key(e):
        borrows = replay.borrowed(e.team_id, e.flavor_id, e.units) > replay.borrowed(e.team_id, e.flavor_id)
        return borrows, fairshare.share_of(replay, e.team_id, e.flavor_id, remembered, e.units), -e.priority, \
            e.created_at

    for chosen, _borrowed in order:
        fit = fitting()
        assert chosen in fit
        assert all(key(chosen) <= key(e) for e in fit)
        left.remove(chosen)
        slot = (chosen.team_id, chosen.flavor_id)
        replay.usage[slot] = replay.usage.get(slot, 0) + chosen.units
    assert fitting() == []
    assert replay.usage == cohort.usage


# -- the database ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_remembered_units_read_the_ledger_in_one_query_and_forget_beyond_the_window(
        team, member, flavors, settings, django_assert_num_queries):
    settings.SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS = 24
    other = make_team("vision")
    for hours_ago, borrowed in ((1, "4"), (2, "4"), (24 * 8 + 3, "1000")):  # the last one: out of the window
        start = NOW - timedelta(hours=hours_ago)
        UsageRecord.objects.create(team=team, ref=f"run:{hours_ago}", flavor=flavors["a100-80gb"], user=member,
                                   hour=start, start=start, end=start + timedelta(hours=1), units=4,
                                   gpu_hours=Decimal(4), cost=Decimal(16), borrowed_gpu_hours=Decimal(borrowed))
    with django_assert_num_queries(1):
        remembered = fairshare.remembered_units([team.pk, other.pk], NOW)
    expected = fairshare.remembered_from([(team.pk, NOW - timedelta(hours=1), 4), (team.pk, NOW - timedelta(hours=2), 4)],
                                         NOW, 24)
    assert remembered == pytest.approx(expected) and other.pk not in remembered


@pytest.mark.django_db
def test_in_the_morning_the_queue_serves_the_team_that_did_not_borrow_all_night(flavors, staff, member):
    night, day, lender = make_team("night-owls"), make_team("early-birds"), make_team("nlp-platform")
    seed_team_quotas(lender, {"a100-80gb": 2})
    for team in (night, day):
        seed_team_quotas(team, {"a100-80gb": 0})
    services.set_cohort(staff, "research", teams=[night, day, lender])
    now = datetime.now(UTC)
    for hours_ago in range(1, 9):  # the night team borrowed 2 units all night
        start = now - timedelta(hours=hours_ago)
        UsageRecord.objects.create(team=night, ref=f"run:n{hours_ago}", flavor=flavors["a100-80gb"], user=member,
                                   hour=start, start=start, end=start + timedelta(hours=1), units=2,
                                   gpu_hours=Decimal(2), cost=Decimal(8), borrowed_gpu_hours=Decimal(2))
    assert admit(lender, ResourceRequest("a100-80gb", 2, 1), "run:lender").admitted
    assert admit(night, ResourceRequest("a100-80gb", 1, 1), "run:night").queued  # older
    assert admit(day, ResourceRequest("a100-80gb", 1, 1), "run:day").queued
    cohort = cohort_figures(night.sharing.cohort_id)
    shares = fairshare.shares(cohort, flavors["a100-80gb"].pk, fairshare.remembered_units(list(cohort.slugs), now))
    assert shares[night.pk] > 0 and shares[day.pk] == 0 and shares[lender.pk] == 0
    release("run:lender")
    assert admit(lender, ResourceRequest("a100-80gb", 1, 1), "run:lender2").admitted  # one unit left to lend
    assert admit_waiting(lender) == ["run:day"]
    assert QueuedRequest.objects.get().ref == "run:night"
