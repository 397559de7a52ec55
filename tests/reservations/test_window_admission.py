"""Admission with reserved windows, on the database (issue 49, point 5): every path that admits — a submission
(the hot path), the queue, a cohort's queue, a resize — puts work into a team's open window on top of its quota
the same way, and work of others waits for a window that leaves it no room, with the reason naming it."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import reserved
from billing.models import QuotaHold
from fleet.models import Cluster, GpuFlavor
from quotas import admission, queue
from quotas.constants import AdmissionCode
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.facts import units_in_use
from quotas.models import QueuedRequest
from quotas.tasks import team_spec
from tests.factories import make_team
from tests.reservations.support import clusters_with

pytestmark = pytest.mark.django_db


def request(units: int = 4, may_borrow: bool = True, limit_minutes: int | None = None) -> ResourceRequest:
    return ResourceRequest(flavor="a100-80gb", units=units, units_per_node=units, may_borrow=may_borrow,
                           limit_minutes=limit_minutes)


@pytest.fixture
def a100(flavors) -> GpuFlavor:
    return flavors["a100-80gb"]


@pytest.fixture
def east(a100) -> Cluster:
    return clusters_with(a100, east=8)["east"]


def window(team, flavor, cluster, units: int, start, end) -> int:
    """A window of ``team`` as a booking writes it (open now when ``start`` is past)."""
    return reserved.hold(f"reservation:{team.pk}{units}", team, flavor, cluster, units, [(start, end)], Decimal("2"))[0].pk


def test_a_submission_goes_into_the_open_window_then_onto_the_quota(a100, east):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("100000"))
    now = timezone.now()
    pk = window(team, a100, east, 4, now - timedelta(minutes=5), now + timedelta(hours=1))
    first = admission.admit(team, request(), "run:1")
    second = admission.admit(team, request(), "run:2")
    third = admission.admit(team, request(), "run:3")
    assert (first.reserved, second.reserved) == (True, False) and second.admitted and third.queued
    assert QuotaHold.objects.get(ref="run:1").window_id == pk and QuotaHold.objects.get(ref="run:2").window_id is None
    assert units_in_use(team) == {a100.pk: 4}  # the quota's units: the window's are on top
    assert "waiting for quota" in third.reason.words


def test_the_queue_admits_into_a_window_when_it_opens(a100, east, monkeypatch):
    team = make_team("nlp")
    seed_team_quotas(team, {"l4": 1}, Decimal("100000"))  # no A100 quota at all
    now = timezone.now()
    window(team, a100, east, 4, now + timedelta(minutes=30), now + timedelta(hours=2))
    decision = admission.admit(team, request(), "run:1")
    assert decision.queued and decision.reason.words == "waiting for the team's reservation of 4\u00d7 a100-80gb"
    assert admission.admit_waiting(team) == []
    monkeypatch.setattr(timezone, "now", lambda: now + timedelta(minutes=31))
    assert admission.admit_waiting(team) == ["run:1"]
    assert QuotaHold.objects.get(ref="run:1").window_id is not None
    assert not QueuedRequest.objects.exists()


def test_a_cohorts_queue_admits_into_a_members_window(a100, east, staff):
    from tests.factories import cohort_pair

    nlp, vision = cohort_pair(staff, units=4)
    now = timezone.now()
    window(nlp, a100, east, 4, now - timedelta(minutes=1), now + timedelta(hours=1))
    for ref in ("run:1", "run:2"):
        assert admission.admit(vision, request(), ref).admitted  # vision borrows nlp's idle 4
    assert admission.admit(nlp, request(), "run:3").reserved  # its window: no reclaim needed
    QuotaHold.objects.filter(ref="run:3").update(released_at=now)
    assert admission.admit(nlp, request(), "run:4").reserved  # the path of a resubmission
    QuotaHold.objects.filter(ref="run:4").update(released_at=now)
    QueuedRequest.objects.create(team=nlp, ref="run:5", flavor=a100, units=4, units_per_node=4)
    assert admission.admit_waiting(nlp) == ["run:5"]
    assert QuotaHold.objects.get(ref="run:5", released_at=None).window_id is not None


def test_a_hold_in_a_window_grows_by_the_windows_free_units(a100, east):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("100000"))
    now = timezone.now()
    window(team, a100, east, 6, now - timedelta(minutes=1), now + timedelta(hours=1))
    assert admission.admit(team, request(2), "endpoint:1").reserved
    assert admission.resize(team, "endpoint:1", 6).admitted
    refused = admission.resize(team, "endpoint:1", 7)
    assert refused.rejected and "its reservation has 0\u00d7 a100-80gb free, 1 more needed" in refused.reason.words
    assert QuotaHold.objects.get(ref="endpoint:1").units == 6


def test_work_that_may_not_be_lent_waits_for_a_window_that_leaves_it_no_room(a100, east, settings):
    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 15
    nlp, vision = make_team("nlp"), make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    now = timezone.now()
    window(nlp, a100, east, 6, now + timedelta(hours=1), now + timedelta(hours=3))
    # An endpoint's minimum (never preemptible) finds 2 units beside the window: a worker of 4 waits...
    minimum = admission.admit(vision, request(4, may_borrow=False), "endpoint:1")
    assert minimum.queued and minimum.reason.code == AdmissionCode.WAITING_FOR_CLUSTER
    assert "6 of east's a100-80gb are reserved by team nlp from " in minimum.reason.words
    assert "6 of east's a100-80gb are reserved by team nlp" in queue.queue_reasons(vision)["endpoint:1"]
    # ... a run may be lent the units (preemptible), and work that ends before the lead is not in its way.
    assert admission.admit(vision, request(4), "run:1").admitted
    assert admission.admit(vision, request(4, may_borrow=False, limit_minutes=30), "run:2").admitted
    assert admission.admit(vision, request(4, may_borrow=False, limit_minutes=120), "run:3").queued


def test_nothing_is_lent_in_a_windows_lead(a100, east, settings, monkeypatch):
    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 15
    nlp, vision = make_team("nlp"), make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    now = timezone.now()
    window(nlp, a100, east, 6, now + timedelta(minutes=10), now + timedelta(hours=3))
    waits = admission.admit(vision, request(4), "run:1")
    assert waits.queued and "reserved by team nlp from " in waits.reason.words
    monkeypatch.setattr(timezone, "now", lambda: now + timedelta(minutes=11))  # open and idle: lent again
    assert admission.admit_waiting(vision) == ["run:1"]


def test_the_namespace_admits_the_pods_of_a_windows_work(a100, east):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 2}, Decimal("100000"))
    now = timezone.now()
    window(team, a100, east, 4, now + timedelta(hours=1), now + timedelta(hours=2))
    window(team, a100, east, 3, now + timedelta(hours=1, minutes=30), now + timedelta(hours=3))
    window(team, a100, east, 8, now - timedelta(hours=3), now - timedelta(hours=1))  # over: not counted
    assert dict(team_spec(team).quotas) == {"nvidia.com/gpu": 2 + 4 + 3}


def test_start_estimates_know_the_windows(a100, east, settings):
    from workloads.estimates.forecast import estimated_starts

    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 15
    nlp, vision = make_team("nlp"), make_team("vision")
    seed_team_quotas(nlp, {"l4": 1}, Decimal("100000"))
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    now = timezone.now()
    start, end = now + timedelta(hours=1), now + timedelta(hours=3)
    window(nlp, a100, east, 6, start, end)
    assert admission.admit(nlp, request(4), "run:1").queued  # waits for its window
    assert admission.admit(vision, request(4, may_borrow=False), "endpoint:2").queued  # kept off by it
    mine = estimated_starts(nlp, now)["run:1"]
    assert (mine.at, mine.latest) == (start, start + timedelta(seconds=settings.CELERY_RECONCILE_INTERVAL))
    theirs = estimated_starts(vision, now)["endpoint:2"]
    assert theirs.at == end and theirs.bound(now).startswith("by ")


def test_a_booking_waiting_for_approval_admits_nothing_until_it_is_approved(a100, east, member, team, staff):
    from reservations import services
    from reservations.models import FlavorPolicy
    from tests.reservations.support import booking_of

    seed_team_quotas(team, {"l4": 1}, Decimal("100000"))
    FlavorPolicy.objects.create(flavor=a100, needs_approval=True)
    start = timezone.now() + timedelta(hours=1)
    pending = services.book(member, booking_of(team, a100, units=4, name="asked", hours=2, start=start))
    assert pending.state == "pending"
    # Waiting for staff: the team has no quota and no window that acts yet — a 400's reason, as without one.
    assert admission.admit(team, request(), "run:1").reason.code == AdmissionCode.NO_QUOTA_FOR_FLAVOR
    assert dict(team_spec(team).quotas) == {"nvidia.com/gpu": 1}  # its l4 only
    services.approve(staff, pending)
    assert admission.admit(team, request(), "run:2").reason.words == "waiting for the team's reservation of 4\u00d7 a100-80gb"


def test_nothing_is_lent_in_a_later_windows_lead_while_an_earlier_one_is_open(a100, east, settings):
    """Found by bench/reservations.py: the lead was the first window's only, so work was lent an open window's
    idle units while the next one's were being cleared, and preempted again every cycle of that lead."""
    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 15
    nlp, vision = make_team("nlp"), make_team("vision")
    now = timezone.now()
    window(nlp, a100, east, 2, now - timedelta(minutes=30), now + timedelta(hours=2))
    kept = reserved.withheld(a100.pk, now, None)[east.pk]
    assert reserved.lendable(kept, now, True) and not kept.clearing
    window(vision, a100, east, 2, now + timedelta(minutes=10), now + timedelta(hours=1))  # in its lead now
    kept = reserved.withheld(a100.pk, now, None)[east.pk]
    assert kept.start < now and kept.clearing and not reserved.lendable(kept, now, True)
    later = now + timedelta(minutes=11)  # the second has started: its units may be lent again when idle
    assert reserved.lendable(reserved.withheld(a100.pk, later, None)[east.pk], later, True)


def test_a_window_keeps_the_units_its_holders_waiting_work_needs_whatever_lent_work_runs_on_it(a100, east):
    """Found by bench/reservations.py: lent work is attached to the first window counted, whatever units it sits
    on, so it could outnumber the window's and leave nothing kept for the holder's work waiting to start — work
    placed beside then took the units the window's clearing freed."""
    nlp, vision = make_team("nlp"), make_team("vision")
    seed_team_quotas(nlp, {"l4": 1}, Decimal("100000"))
    seed_team_quotas(vision, {"a100-80gb": 8}, Decimal("100000"))
    now = timezone.now()
    pk = window(nlp, a100, east, 4, now - timedelta(minutes=5), now + timedelta(hours=1))
    assert admission.admit(vision, request(6), "run:lent").admitted
    QuotaHold.objects.filter(ref="run:lent").update(window_id=pk, lent=True, open_units=6)
    assert reserved.withheld(a100.pk, now, None)[east.pk].units == 0  # nothing of the holder's waits: all lent
    assert admission.admit(nlp, request(4), "run:holder").reserved  # admitted into it, not started
    kept = reserved.withheld(a100.pk, now, None)[east.pk]
    assert kept.claimed and kept.units == 4
    assert [reserved.kept_units(4, running, waiting) for running, waiting in ((0, 0), (6, 0), (6, 4), (2, 1), (1, 9))] \
        == [4, 0, 4, 2, 4]
