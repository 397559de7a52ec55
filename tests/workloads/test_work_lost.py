"""What a preemption throws away (issue #24) on real rows: the preemption log's lost work and
what reclaim is told of each candidate (``workloads.preemption``). Since the last start — which,
after a preemption, is the new admission (``started_at`` keeps the first start) — or since the
last checkpoint after it when the kind reports one (``WorkloadKind.last_checkpoint_at``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from jobs.models import TrainingRun
from quotas.ledger import interval_cost, interval_gpu_hours
from quotas.models import Reservation
from workloads.preemption import _candidate, last_start, lost_words, lost_work
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
        interval_gpu_hours(flavor.gpu_fraction, 2, ago(40), NOW), interval_cost(flavor.price(), 2, ago(40), NOW),
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
    assert cost == interval_cost(run.flavor.price(spot=True), 2, ago(5), NOW) > 0
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
    reservation = Reservation(team=team, ref=run.ref, flavor=flavor, units=4, borrowed_units=2, created_at=ago(20))
    candidate = _candidate(reservation, run, {team.pk: team.slug}, set(), {team.pk: 0.5}, NOW)
    assert (candidate.started_at, candidate.preemptions, candidate.price_per_hour) == (ago(20), 3, flavor.price(True))
    assert (candidate.last_checkpoint_at, candidate.reports_checkpoints) == (None, False)  # runs report none yet
    assert (candidate.units, candidate.borrowed, candidate.share) == (4, 2, 0.5)
