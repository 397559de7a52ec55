"""What a preemption throws away (issue #24) on real rows: the preemption log's lost work and
what reclaim is told of each candidate (``workloads.cycle.preemption``). Since the last start — which,
after a preemption, is the new admission (``started_at`` keeps the first start) — or since the
last checkpoint after it when the kind reports one (``Checkpoints.last_checkpoint_at``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import interval_cost, interval_gpu_hours
from billing.models import PreemptionEvent, QuotaHold, flavor_price
from jobs.models import TrainingRun
from quotas.reclaim import lost_span
from workloads.cycle.preemption import candidate_of, last_start, lost_words, lost_work, settle_lost_work
from workloads.registry import kind_for

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def make_run(team, member, flavor, **fields) -> TrainingRun:
    return TrainingRun.objects.create(team=team, created_by=member, name="r", flavor=flavor, state="running", **fields)


class Checkpointing(type(kind_for("run"))):
    """The run kind as it is once runs report checkpoints: the last one ``minutes`` ago."""

    def __init__(self, minutes: float):
        self.minutes = minutes

    def last_checkpoint_at(self, workload):
        return ago(self.minutes)


def test_a_run_without_checkpoints_loses_all_since_its_start(team, member, flavors):
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(41), started_at=ago(40))
    flavor = run.flavor
    assert lost_work(kind_for("run"), run, 2, NOW) == (
        interval_gpu_hours(flavor.gpu_fraction, 2, ago(40), NOW), interval_cost(flavor_price(flavor), 2, ago(40), NOW),
        ago(40), False)
    assert lost_words(ago(40), NOW) == "40 min of work since its start lost"


def test_after_a_preemption_it_loses_since_its_new_admission_not_its_first_start(team, member, flavors):
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(20), started_at=ago(180), preemptions=1)
    assert last_start(run, NOW) == ago(20)
    gpu_hours, _cost, since, checkpointed = lost_work(kind_for("run"), run, 2, NOW)
    assert (since, checkpointed) == (ago(20), False)
    assert gpu_hours == interval_gpu_hours(run.flavor.gpu_fraction, 2, ago(20), NOW)


def test_a_reported_checkpoint_after_its_start_is_where_the_loss_starts(team, member, flavors):
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(41), started_at=ago(40), spot=True)
    _gpu_hours, cost, since, checkpointed = lost_work(Checkpointing(5), run, 2, NOW)
    assert (since, checkpointed) == (ago(5), True)
    assert cost == interval_cost(flavor_price(run.flavor, spot=True), 2, ago(5), NOW) > 0
    assert lost_words(since, NOW, checkpointed) == "5 min of work since its last checkpoint lost"
    # One from before its last start was resumed from already: the loss starts at that start.
    assert lost_work(Checkpointing(90), run, 2, NOW)[2:] == (ago(40), False)


def test_work_not_started_loses_nothing(team, member, flavors):
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(15))
    assert lost_work(kind_for("run"), run, 2, NOW) == (Decimal(0), Decimal(0), None, False)
    assert last_start(run, NOW) == NOW  # it has run nothing: not past its min runtime either


def test_reclaim_is_told_the_start_the_price_the_preemptions_and_the_checkpoints(team, member, flavors):
    flavor = flavors["a100-80gb"]
    run = make_run(team, member, flavor, admitted_at=ago(20), started_at=ago(180), preemptions=3, spot=True)
    hold = QuotaHold(team=team, ref=run.ref, flavor=flavor, units=4, borrowed_units=2, created_at=ago(20))
    candidate = candidate_of(hold, run, {team.pk: team.slug}, set(), {team.pk: 0.5}, NOW)
    assert (candidate.started_at, candidate.preemptions, candidate.price_per_hour) == (ago(20), 3, flavor_price(flavor, True))
    assert (candidate.last_checkpoint_at, candidate.reports_checkpoints) == (None, False)  # runs report none yet
    assert (candidate.units, candidate.borrowed, candidate.share) == (4, 2, 0.5)


#: Any instant within a day of NOW, to the microsecond: events in every order, clocks a little apart.
INSTANTS = st.integers(-86_400_000_000, 86_400_000_000).map(lambda us: NOW + timedelta(microseconds=us))


@given(start=INSTANTS, checkpoint=st.none() | INSTANTS, notice=INSTANTS)
def test_lost_work_is_never_negative_nor_more_than_the_attempt_ran(start, checkpoint, notice):
    """Issue 34 item 2's property: for any order of start, checkpoint and notice, 0 <= lost <= running time."""
    resume, lost = lost_span(start, checkpoint, notice)
    assert timedelta(0) <= lost <= max(notice - start, timedelta(0))
    assert resume + lost == notice
    # A checkpoint after the start and before the notice is exactly where the loss starts.
    if checkpoint is not None and start <= checkpoint <= notice:
        assert resume == checkpoint


def test_a_checkpoint_stamped_after_the_notice_loses_nothing_and_says_so(team, member, flavors):
    """The "-1 min" and "-0.0002 GPU-h" of issue 34: a checkpoint read a moment after the cycle's clock."""
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(41), started_at=ago(40))
    gpu_hours, cost, since, checkpointed = lost_work(Checkpointing(-0.2), run, 2, NOW)
    assert (gpu_hours, cost) == (Decimal(0), Decimal(0))
    assert lost_words(since, NOW, checkpointed) == "no work lost"


def test_under_a_minute_is_said_in_words_never_0_min():
    assert lost_words(NOW - timedelta(seconds=59), NOW, True) == "under a minute of work since its last checkpoint lost"
    assert lost_words(NOW - timedelta(seconds=61), NOW) == "1 min of work since its start lost"
    assert lost_words(None, NOW) == "no work lost"


@pytest.mark.parametrize("cause, taken", [
    (PreemptionEvent.Cause.RECLAIM, "team x reclaimed 2\u00d7 a100-80gb of its quota"),
    (PreemptionEvent.Cause.WITHIN_TEAM, "the team's high-priority run big (#13) needed its 2\u00d7 a100-80gb"),
    # Found by the demo: settling once said a reservation's preemption was the cohort's reclaim.
    (PreemptionEvent.Cause.RESERVATION, "team nlp's reservation took back 2\u00d7 a100-80gb on east from 09:00"),
])
def test_a_checkpoint_saved_during_the_grace_settles_the_loss_once_the_pods_are_gone(team, member, flavors, cause,
                                                                                     taken):
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(41), started_at=ago(40))
    kind = kind_for("run")
    gpu_hours, cost, since, checkpointed = lost_work(kind, run, 2, ago(1))  # noticed a minute ago, 39 min lost
    event = PreemptionEvent.objects.create(
        ref=run.ref, team=team, by_team=team, for_ref="run:999", flavor=run.flavor, units=2, cause=cause,
        reason=f"preempted: {taken}; {lost_words(since, ago(1), checkpointed)}",
        lost_gpu_hours=gpu_hours, lost_cost=cost, at=ago(1))
    assert "39 min of work since its start lost" in event.reason
    # On the notice it saved a last checkpoint, 20 s into the grace; its pods are gone now.
    TrainingRun.objects.filter(pk=run.pk).update(last_checkpoint_at=ago(1) + timedelta(seconds=20))
    run.refresh_from_db()
    settle_lost_work(kind, run, NOW)
    event.refresh_from_db()
    assert (event.lost_gpu_hours, event.lost_cost) == (Decimal(0), Decimal(0))
    # Who took what stays as the notice said it; only the lost work is said anew.
    assert event.reason == f"preempted: {taken}; no work lost"
    settle_lost_work(kind, run, NOW)  # a replay changes nothing
    assert PreemptionEvent.objects.get(pk=event.pk).reason == event.reason


def test_a_checkpoint_reported_after_the_pods_were_gone_does_not_count(team, member, flavors):
    run = make_run(team, member, flavors["a100-80gb"], admitted_at=ago(41), started_at=ago(40))
    kind = kind_for("run")
    gpu_hours, cost, _since, _c = lost_work(kind, run, 2, ago(1))
    event = PreemptionEvent.objects.create(ref=run.ref, team=team, by_team=team, flavor=run.flavor, units=2,
                                           reason="preempted: …", lost_gpu_hours=gpu_hours, lost_cost=cost, at=ago(1))
    TrainingRun.objects.filter(pk=run.pk).update(last_checkpoint_at=NOW + timedelta(seconds=5))
    run.refresh_from_db()
    settle_lost_work(kind, run, NOW)
    event.refresh_from_db()
    assert event.lost_gpu_hours == gpu_hours > 0

