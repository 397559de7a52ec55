"""Open or targeted bookings, and work that names the reservation it is for (docs/reservations.md "Open or
targeted"), at admission: the rule (pure), then every path that admits on the database — a submission, the queue,
the estimates' window — and what the cycle does with a holder's early work on a targeted window."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import reserved
from billing.models import QuotaHold, ReservedWindow
from fleet.models import Cluster, GpuFlavor
from quotas import admission, queue
from quotas.constants import AdmissionCode, Outcome
from quotas.decide import FlavorQuota, ResourceRequest, decide
from quotas.demo import seed_team_quotas
from quotas.facts import Windows
from quotas.models import QueuedRequest
from tests.factories import make_team, member_api
from tests.jobs.conftest import submit_run_as
from tests.reservations.support import clusters_with
from workloads.cycle import windows as cycle_windows
from workloads.estimates.forecast import awaited_window


def req(units: int = 4, named: int | None = None, spot: bool = False) -> ResourceRequest:
    return ResourceRequest(flavor="a100-80gb", units=units, units_per_node=units, spot=spot, for_reservation=named)


# -- the rule ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("request_", "quota", "outcome", "reserved_", "words"), [
    # Named, its window open with room: in, before quota and money, as any window work.
    (req(4, named=12), FlavorQuota(max_units_per_node=8, limit=8, reserved=4, reserved_ahead=4, reserved_named=True),
     Outcome.ADMIT, True, "admitted into the team's reservation"),
    # Named, its window not open yet (or full): it waits for it although the quota has room.
    (req(4, named=12), FlavorQuota(max_units_per_node=8, limit=8, reserved=0, reserved_ahead=8, reserved_named=True),
     Outcome.QUEUE, False, "waiting for a window of the reservation it names (8\u00d7 a100-80gb; 0 free in one now)"),
    # Named but larger than its booking's windows: the quota's rule (submission refuses it before this).
    (req(8, named=12), FlavorQuota(max_units_per_node=8, limit=8, reserved=0, reserved_ahead=4, reserved_named=True),
     Outcome.ADMIT, False, "admitted: 8\u00d7 a100-80gb"),
    # Naming none, an open window not open yet and room on the quota: the quota, as before.
    (req(4), FlavorQuota(max_units_per_node=8, limit=8, reserved=0, reserved_ahead=8), Outcome.ADMIT, False,
     "admitted: 4\u00d7 a100-80gb"),
    # Spot work never goes into a window, named or not.
    (req(4, named=12, spot=True), FlavorQuota(max_units_per_node=8, limit=8, reserved=4, reserved_ahead=4,
                                              reserved_named=True), Outcome.ADMIT, False, "admitted: 4\u00d7"),
])
def test_named_work_goes_into_its_window_or_waits_for_it(request_, quota, outcome, reserved_, words):
    decision = decide(request_, 0, quota)
    assert (decision.outcome, decision.reserved) == (outcome, reserved_), decision.reason.words
    assert words in decision.reason.words
    if outcome == Outcome.QUEUE:
        assert decision.reason.code == AdmissionCode.WAITING_FOR_QUOTA


# -- on the database --------------------------------------------------------------------------------------------


@pytest.fixture
def a100(flavors) -> GpuFlavor:
    return flavors["a100-80gb"]


@pytest.fixture
def east(a100) -> Cluster:
    return clusters_with(a100, east=16)["east"]


def book(team, flavor, cluster, number: int, units: int, start, end, targeted: bool = False) -> int:
    """A booking's window as reservations.services.book writes it; returns its window's id."""
    return reserved.hold(reserved.ref_of(number), team, flavor, cluster, units, [(start, end)], Decimal("2"),
                         targeted=targeted)[0].pk


@pytest.mark.django_db
def test_a_targeted_window_takes_only_the_work_that_names_it(a100, east):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("100000"))
    now = timezone.now()
    pk = book(team, a100, east, 12, 4, now - timedelta(minutes=5), now + timedelta(hours=1), targeted=True)
    unnamed = admission.admit(team, req(4), "run:1")
    assert unnamed.admitted and not unnamed.reserved  # on the quota, not in the window
    assert QuotaHold.objects.get(ref="run:1").window_id is None
    named = admission.admit(team, req(4, named=12), "run:2")
    assert named.reserved and QuotaHold.objects.get(ref="run:2").window_id == pk
    # Another of its team's bookings named: not this window's work.
    other = admission.admit(team, req(4, named=13), "run:3")
    assert not other.reserved and other.queued and "waiting for quota" in other.reason.words


@pytest.mark.django_db
def test_work_that_names_a_booking_waits_for_its_window_then_goes_in_ahead_of_older_work(a100, east, monkeypatch):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("100000"))
    now = timezone.now()
    pk = book(team, a100, east, 12, 4, now + timedelta(minutes=30), now + timedelta(hours=2))  # open booking
    assert admission.admit(team, req(4), "run:1").admitted  # the quota is full now
    older = admission.admit(team, req(4), "run:2")  # naming none: it would fit the open window too
    named = admission.admit(team, req(4, named=12), "run:3")
    assert older.queued and named.queued
    assert named.reason.words.startswith("waiting for a window of the reservation it names (4\u00d7 a100-80gb")
    assert QueuedRequest.objects.get(ref="run:3").for_reservation == 12
    assert queue.queue_reasons(team)["run:3"] == named.reason.words
    # The estimate of the named work: the window's start.
    entry = QueuedRequest.objects.get(ref="run:3")

    assert awaited_window(entry, named, now).pk == pk
    monkeypatch.setattr(timezone, "now", lambda: now + timedelta(minutes=31))
    # The window opens with room for one: the work that names it, although queued after the other.
    assert admission.admit_waiting(team) == ["run:3"]
    assert QuotaHold.objects.get(ref="run:3", released_at=None).window_id == pk
    assert QueuedRequest.objects.filter(ref="run:2").exists()


@pytest.mark.django_db
def test_work_naming_none_is_kept_off_the_units_queued_named_work_waits_for(a100, east):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 0}, Decimal("100000"))
    now = timezone.now()
    book(team, a100, east, 12, 8, now - timedelta(minutes=1), now + timedelta(hours=2))  # open, 8 free
    QueuedRequest.objects.create(team=team, ref="run:9", flavor=a100, units=6, units_per_node=6, for_reservation=12,
                                 not_before=now + timedelta(hours=1))  # named, held back a while (a backoff)
    windows = Windows([team.pk], now)
    assert windows.claims == {"reservation:12": 6}
    unnamed = windows.apply(FlavorQuota(max_units_per_node=8, limit=0), team.pk, a100.pk)
    named = windows.apply(FlavorQuota(max_units_per_node=8, limit=0), team.pk, a100.pk, 12)
    assert (unnamed.reserved, unnamed.reserved_named) == (2, False)
    assert (named.reserved, named.reserved_named) == (8, True)
    assert admission.admit(team, req(4), "run:1").queued  # 4 > the 2 the named work leaves
    assert admission.admit(team, req(2), "run:2").reserved


@pytest.mark.django_db
def test_named_work_whose_booking_is_over_goes_by_the_quota(a100, east):
    team = make_team("nlp")
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("100000"))
    now = timezone.now()
    book(team, a100, east, 12, 4, now - timedelta(hours=3), now - timedelta(hours=1))
    decision = admission.admit(team, req(4, named=12), "run:1")
    assert decision.admitted and not decision.reserved


@pytest.mark.django_db
def test_the_holders_early_work_moves_into_an_open_window_only(a100, east):
    """On an open booking the holder's work lent its window's units before the start moves into it when it opens
    (docs/reservations.md "Inside the window"); on a targeted one it stays lent work, as any other team's."""
    team = make_team("nlp")
    now = timezone.now()
    opened = {}
    for number, targeted in ((12, False), (13, True)):
        opened[targeted] = book(team, a100, east, number, 4, now - timedelta(minutes=1), now + timedelta(hours=1),
                                targeted=targeted)
        QuotaHold.objects.create(team=team, ref=f"run:{number}", flavor=a100, units=4, units_per_node=4,
                                 window_id=opened[targeted], lent=True, cluster=east, open_units=4)
    cycle_windows.clear(now)
    assert not QuotaHold.objects.get(ref="run:12").lent  # adopted by the open window
    assert QuotaHold.objects.get(ref="run:13").lent  # still lent on the targeted one


def _running_run(member, team, cluster, name: str, units: int = 4) -> str:
    """A run of ``team`` admitted on its quota and running on ``cluster``: its hold's ref."""
    run = submit_run_as(member, team, name=name, gpus_per_worker=units)
    hold = QuotaHold.objects.get(ref=run.ref, released_at=None)
    QuotaHold.objects.filter(pk=hold.pk).update(cluster=cluster, open_units=units)
    return run.ref


@pytest.mark.django_db
@pytest.mark.parametrize("targeted", [False, True])
def test_a_window_elsewhere_on_the_cluster_shields_none_of_its_teams_quota_work(a100, monkeypatch, targeted):
    """Clearing for a window (workloads.cycle.windows.clear): a team's quota work is spared only for its own open
    windows. Holding a window of its own on the cluster (here one open, needing nothing) shields none of it from
    another team's window — it used to, and the other team's window waited for that work to end."""
    east = clusters_with(a100, east=8)["east"]
    c_team, b_team = make_team("vision"), make_team("nlp")
    seed_team_quotas(c_team, {"a100-80gb": 8}, Decimal("100000"))
    _api, c_member = member_api("vision", "carla")
    refs = [_running_run(c_member, c_team, east, name) for name in ("one", "two")]  # the cluster's 8 units
    now = timezone.now()
    book(c_team, a100, east, 20, 2, now - timedelta(minutes=30), now + timedelta(hours=2))  # open, its work none
    book(b_team, a100, east, 21, 4, now + timedelta(minutes=5), now + timedelta(hours=2), targeted=targeted)
    noticed = []
    monkeypatch.setattr(cycle_windows, "preempt", lambda candidate, claim, team_id, at, reserved: noticed.append(
        candidate.ref) or True)
    cycle_windows.clear(now)
    assert len(noticed) == 1 and noticed[0] in refs  # 4 units for nlp's window, from vision's quota work


@pytest.mark.django_db
def test_a_holders_quota_work_is_spared_for_its_own_open_window_and_cleared_for_its_targeted_one(a100, monkeypatch):
    east = clusters_with(a100, east=8)["east"]
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("100000"))
    _api, member = member_api("vision", "carla")
    refs = [_running_run(member, team, east, name) for name in ("one", "two")]
    now = timezone.now()
    noticed = []
    monkeypatch.setattr(cycle_windows, "preempt", lambda candidate, claim, team_id, at, reserved: noticed.append(
        candidate.ref) or True)
    window = book(team, a100, east, 30, 4, now + timedelta(minutes=5), now + timedelta(hours=2))
    cycle_windows.clear(now)
    assert noticed == []  # its own open window: its work naming none would take the units anyway
    ReservedWindow.objects.filter(pk=window).update(targeted=True)
    cycle_windows.clear(now)
    assert len(noticed) == 1 and noticed[0] in refs  # the window is for the work that names it
