"""A reserved window on the simulated cluster, end to end with the real reconcile cycle (issue 49, point 5).

The simulated cluster has 12 A100s; NLP Platform (no A100 quota of its own) books 4 of them from 09:05 to
09:15 (a lead of 2 minutes). Vision runs three 4-GPU runs at 09:00: two beside the reserved units, one lent
them while they are idle (preemptible). At 09:03 (``start − lead``) the lent run gets the preemption notice,
saves a checkpoint in its grace and goes back to Vision's queue, where it waits with a reason naming the
reservation; NLP's run, queued since 09:01 for its window, starts at 09:05 in it, on top of its (empty) quota.
Its work ends early, the idle units are lent again, and NLP's next run takes them back. At 09:15 the window
is over.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Sum
from django.test import Client

import fleet.services as fleet
from billing.models import PreemptionEvent, QuotaHold, ReservedWindow, UsageRecord
from core.formatting import format_money
from fleet.models import GpuFlavor
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from reservations import services
from tests.factories import make_team, member_api
from tests.jobs.conftest import post_run
from tests.workloads.timeline import INTERVAL, scripted_timeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)
WINDOW = (START + timedelta(minutes=5), START + timedelta(minutes=15))
LEAD = timedelta(minutes=2)
GRACE = 45


@pytest.fixture
def timeline(published, monkeypatch, settings):
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    settings.SLIPWAY_RESERVATION_LEAD_MINUTES = 2
    return scripted_timeline(published, monkeypatch, settings, START)


def run_of(pk: int) -> TrainingRun:
    return TrainingRun.objects.get(pk=pk)


def until(timeline, moment: datetime) -> None:
    """Cycles up to ``moment`` (the last one at most ``INTERVAL`` before it)."""
    while timeline.now + timedelta(seconds=INTERVAL) <= moment:
        timeline.cycle()


def cycle_until(timeline, done, limit: int = 40) -> None:
    for _ in range(limit):
        timeline.cycle()
        if done():
            return
    raise AssertionError("not reached")


def test_a_window_clears_its_units_runs_its_holder_and_lends_what_it_does_not_use(timeline, flavors):
    nlp, vision = make_team("nlp-platform"), make_team("vision")
    seed_team_quotas(nlp, {"l4": 1}, Decimal("100000"))  # no A100 quota: the window is all it has of them
    seed_team_quotas(vision, {"a100-80gb": 12}, Decimal("100000"))
    noor_api, noor = member_api("nlp-platform", "noor")
    alice, _ = member_api("vision", "alice")
    timeline.cycle()  # the cluster's nodes recorded: what a booking's room is checked against
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    cluster = fleet.clusters()[0]
    booked = services.book(noor, services.Booking(
        team=nlp, flavor=a100, cluster=cluster, units=4, start=WINDOW[0].replace(tzinfo=None),
        end=WINDOW[1].replace(tzinfo=None), zone=ZoneInfo("UTC"), recurrence=None, name="release-eval"))

    # 1. Vision's three runs: two beside the reserved units, the last lent them (preemptible, checkpointing).
    beside = post_run(alice, "3h", team="vision", name="beside", gpus_per_worker=4)["id"]
    post_run(alice, "3h", team="vision", name="beside-too", gpus_per_worker=4)
    lent = post_run(alice, "3h", team="vision", name="lent", gpus_per_worker=4,
                    checkpoint={"grace_seconds": GRACE})["id"]
    cycle_until(timeline, lambda: run_of(lent).state == RunState.RUNNING and run_of(beside).state == RunState.RUNNING)
    assert not QuotaHold.objects.get(ref=f"run:{beside}", released_at=None).lent
    body = alice.get(f"/api/v1/runs/{lent}/").json()
    assert (body["preemptible"], body["reservation"], body["borrowed_units"]) == (True, None, 0)
    assert "on units reserved from" in run_of(lent).placement_reason

    # 2. NLP submits for its window at 09:01: no quota of its own, so it waits for the window (never a 400).
    until(timeline, START + timedelta(minutes=1))
    release = post_run(noor_api, "1m", team="nlp-platform", name="release", gpus_per_worker=4)
    assert release["state"] == "queued" and "reservation" in release["reason"], release["reason"]

    # 3. At start − lead the lent run gets the notice, checkpoints in its grace and queues again; the run
    #    beside the window is not touched (the units it runs on are not the window's).
    until(timeline, WINDOW[0] - LEAD - timedelta(seconds=INTERVAL))
    assert run_of(lent).preempting_since is None
    cycle_until(timeline, lambda: run_of(lent).state == RunState.QUEUED, limit=GRACE // INTERVAL + 4)
    event = PreemptionEvent.objects.get(ref=f"run:{lent}")
    assert event.cause == PreemptionEvent.Cause.RESERVATION and event.by_team == nlp
    assert event.at - (WINDOW[0] - LEAD) <= timedelta(seconds=INTERVAL)
    assert event.reason.startswith("preempted: team nlp-platform's reservation took back 4\u00d7 a100-80gb on ")
    assert run_of(beside).state == RunState.RUNNING and run_of(beside).preemptions == 0
    # It waits in the queue, not on the cluster: the reservation is why, and the reason says so.
    timeline.cycle()
    assert QueuedRequest.objects.filter(ref=f"run:{lent}").exists()
    assert "reserved by team nlp-platform from " in alice.get(f"/api/v1/runs/{lent}/").json()["reason"]

    # 4. The window opens: NLP's run is admitted into it at the first cycle and starts as soon as its pods
    #    do (its units were cleared: the sandbox's containers take a few seconds).
    until(timeline, WINDOW[0])
    cycle_until(timeline, lambda: run_of(release["id"]).state == RunState.RUNNING, limit=4)
    mine = noor_api.get(f"/api/v1/runs/{release['id']}/").json()
    assert mine["reservation"] == booked.pk and mine["preemptible"] is False
    assert run_of(release["id"]).started_at - WINDOW[0] <= timedelta(seconds=3 * INTERVAL)
    assert run_of(release["id"]).cluster_id == booked.cluster_id
    assert "in the team's reservation" in run_of(release["id"]).placement_reason
    # Vision's run is admitted again, but waits on the cluster: the holder uses its units. It is lent them
    # when they turn idle, so it waits as preemptible work.
    assert run_of(lent).state in (RunState.ADMITTED, RunState.PENDING)
    assert alice.get(f"/api/v1/runs/{lent}/").json()["preemptible"] is True

    # 5. NLP's run ends early: the idle units are lent to Vision's queued run (preemptible again).
    cycle_until(timeline, lambda: run_of(lent).state == RunState.RUNNING, limit=(3 * 60) // INTERVAL)
    assert run_of(release["id"]).state == RunState.SUCCEEDED
    assert alice.get(f"/api/v1/runs/{lent}/").json()["preemptible"] is True

    # 6. NLP submits again inside its window: it takes the lent units back (notice, grace) and starts.
    again = post_run(noor_api, "2m", team="nlp-platform", name="again", gpus_per_worker=4)
    assert again["state"] in ("admitted", "pending"), again
    cycle_until(timeline, lambda: run_of(again["id"]).state == RunState.RUNNING, limit=GRACE // INTERVAL + 5)
    taken = PreemptionEvent.objects.filter(ref=f"run:{lent}").order_by("-at").first()
    assert taken.cause == PreemptionEvent.Cause.RESERVATION and PreemptionEvent.objects.filter(ref=f"run:{lent}").count() == 2
    assert run_of(again["id"]).started_at - taken.at <= timedelta(seconds=GRACE + 3 * INTERVAL)
    assert run_of(beside).preemptions == 0  # work beside the window is never the window's to take

    # 7. At its end the window lets go: nothing is held in it any more.
    until(timeline, WINDOW[1])
    timeline.cycle()
    assert not QuotaHold.objects.filter(released_at=None, window__isnull=False).exists()

    # 8. Its money: used by NLP, lent to Vision (credited), idle (NLP's waste) — the whole window, and the
    #    Usage page says the same figures as the ledger.
    window = ReservedWindow.objects.get(ref=booked.ref)
    assert window.billed_until == WINDOW[1]
    assert window.used_unit_hours > 0 and window.lent_unit_hours > 0 and window.idle_unit_hours > 0
    assert abs(window.used_unit_hours + window.lent_unit_hours + window.idle_unit_hours - 4 * Decimal(10) / 60) \
        <= Decimal("1e-7")
    idle = UsageRecord.objects.filter(ref=booked.ref).aggregate(total=Sum("idle_cost"))["total"]
    assert abs(idle - window.idle_unit_hours * window.price_per_unit_hour) <= Decimal("1e-6")
    (use,) = services.window_uses(nlp, START, START + timedelta(days=1))
    assert (use.idle_cost, use.credit) == (window.idle_unit_hours * window.price_per_unit_hour,
                                            window.lent_unit_hours * window.price_per_unit_hour)
    page = Client()
    page.force_login(noor)
    html = page.get("/usage/").content.decode()
    assert 'id="reservations-use-table"' in html and format_money(use.idle_cost) in html
    assert format_money(use.credit) in html


def test_work_of_the_window_goes_back_to_the_quota_when_it_ends(timeline, flavors):
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 4}, Decimal("100000"))
    alice, user = member_api("vision", "alice")
    timeline.cycle()
    a100 = GpuFlavor.objects.get(name="a100-80gb")
    start = START + timedelta(minutes=1)
    services.book(user, services.Booking(
        team=vision, flavor=a100, cluster=fleet.clusters()[0], units=4, start=start.replace(tzinfo=None),
        end=(start + timedelta(minutes=5)).replace(tzinfo=None), zone=ZoneInfo("UTC"), recurrence=None, name="short"))
    own = post_run(alice, "2h", team="vision", name="own", gpus_per_worker=4)["id"]
    until(timeline, start)
    inside = post_run(alice, "2h", team="vision", name="inside", gpus_per_worker=4)["id"]
    cycle_until(timeline, lambda: run_of(inside).state == RunState.RUNNING and run_of(own).state == RunState.RUNNING)
    assert alice.get(f"/api/v1/runs/{inside}/").json()["reservation"] is not None
    # Both run: 4 on the quota, 4 in the window on top of it.
    until(timeline, start + timedelta(minutes=5))
    timeline.cycle()
    hold = QuotaHold.objects.get(ref=f"run:{inside}", released_at=None)
    assert hold.window_id is None and hold.borrowed_units == 4  # back on the quota, above it: borrowed
    body = alice.get(f"/api/v1/runs/{inside}/").json()
    assert (body["reservation"], body["borrowed_units"], body["preemptible"]) == (None, 4, True)
