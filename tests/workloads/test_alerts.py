"""Alert episodes in the database (workloads.telemetry.alerts.observe): moved once, one open per workload and kind,
the team's tightened rules, work that ended, and what a cycle costs when nothing is in alert.

Runs are submitted, applied and seen running on the scripted cluster (tests/fakes.py) by the real
reconcile cycle; :func:`observe` is then fed the figures a cycle would hand it, minute by minute.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

import fleet.services as fleet
from cluster.backends.base import GpuReading, WorkloadTelemetry
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from notifications.constants import EventKind
from notifications.models import Event
from quotas.demo import seed_team_quotas
from teams.models import Role
from tests.factories import add_member, make_team
from tests.jobs.conftest import submit_run_as
from tests.jobs.test_reconcile import NS, applied, iso
from tests.shared_flavors import make_shared_flavors
from workloads.cycle import reconcile as rec
from workloads.identity import WorkloadId
from workloads.models import AlertEpisode, TeamAlertSettings
from workloads.telemetry import alerts
from workloads.telemetry.alert_rules import AlertKind, Move

pytestmark = pytest.mark.django_db
State = AlertEpisode.State


def figures(util=90.0, memory=0.5, temp=60.0) -> WorkloadTelemetry:
    """What a cycle measured of one workload: two GPUs, the second the fuller and the hotter."""
    total = 81920.0
    return WorkloadTelemetry((GpuReading("GPU-a", util, total * memory * 0.9, total * (1 - memory * 0.9), temp - 5, 150.0),
                              GpuReading("GPU-b", util, total * memory, total * (1 - memory), temp, 150.0)))


@pytest.fixture
def t0():
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def running(submit, fake_backend, t0):
    """``running(**fields)``: a run of the member's team, running on the default cluster since ``t0``."""

    def make(**overrides) -> TrainingRun:
        run = applied(submit(**overrides), fake_backend)
        fake_backend.set_running(NS, run.object_name, units=run.total_units, started=iso(t0))
        rec.reconcile(fake_backend, now=t0)
        run = TrainingRun.objects.select_related("team", "flavor").get(pk=run.pk)
        assert run.state == RunState.RUNNING
        return run

    return make


class Clock:
    """Feeds :func:`alerts.observe` one cycle a minute from ``t0``; keeps every move it wrote."""

    def __init__(self, t0):
        self.now, self.moves = t0, []
        self.cluster = fleet.default_cluster()

    def cycles(self, minutes: int, readings: dict) -> list:
        moves = []
        for _ in range(minutes):
            self.now += timedelta(minutes=1)
            moves += alerts.observe(self.cluster, readings, self.now)
        self.moves += moves
        return moves


def idle_events() -> list[Event]:
    return list(Event.objects.filter(event_kind=EventKind.GPU_IDLE).order_by("pk"))


def test_an_idle_run_opens_one_episode_after_the_window_and_says_so_once(running, t0):
    run = running()
    clock = Clock(t0)
    # Idle from the first cycle (minute 1) on: the 30 minutes have passed at minute 31.
    assert clock.cycles(30, {run.identity: figures(util=2.0)}) == [(run.ref, AlertKind.IDLE, Move.START)]
    assert AlertEpisode.objects.get().state == State.PENDING and idle_events() == []
    assert clock.cycles(1, {run.identity: figures(util=2.0)}) == [(run.ref, AlertKind.IDLE, Move.OPEN)]
    clock.cycles(60, {run.identity: figures(util=2.0)})  # idle for another hour: nothing more
    episode = AlertEpisode.objects.get()
    assert (episode.state, episode.since, episode.opened_at) == (
        State.OPEN, t0 + timedelta(minutes=1), t0 + timedelta(minutes=31))
    assert (episode.value, episode.threshold, episode.after_minutes) == (2.0, 10.0, 30)
    assert episode.cost_per_hour == run.cost_per_hour_at(run.open_units) and episode.cost_per_hour > 0
    [event] = idle_events()
    assert event.key == f"gpu_idle:{run.ref}:{episode.pk}"


def test_a_flapping_run_is_one_episode_and_a_real_recovery_closes_it(running, t0):
    run = running()
    clock = Clock(t0)
    clock.cycles(31, {run.identity: figures(util=1.0)})
    for _ in range(15):  # busy for 4 minutes, idle for 2: every recovery shorter than the 10 to close
        clock.cycles(4, {run.identity: figures(util=80.0)})
        clock.cycles(2, {run.identity: figures(util=1.0)})
    assert len(idle_events()) == 1 and AlertEpisode.objects.get().state == State.OPEN
    clock.cycles(11, {run.identity: figures(util=80.0)})  # clear from the first of these to the last: 10 min
    closed = AlertEpisode.objects.get()
    assert closed.state == State.CLOSED and closed.closed_at == clock.now
    clock.cycles(31, {run.identity: figures(util=1.0)})  # idle again, for the window: a new episode
    assert [e.state for e in AlertEpisode.objects.order_by("since")] == [State.CLOSED, State.OPEN]
    assert len(idle_events()) == 2


def test_a_replayed_cycle_moves_nothing_twice(running, t0):
    run = running()
    cluster = fleet.default_cluster()
    readings = {run.identity: figures(memory=0.99)}
    alerts.observe(cluster, readings, t0)
    opened_at = t0 + timedelta(minutes=5)
    assert alerts.observe(cluster, readings, opened_at) == [(run.ref, AlertKind.MEMORY, Move.OPEN)]
    # The same cycle again (a redelivered task, a second worker) and one that read before the move:
    assert alerts.observe(cluster, readings, opened_at) == []
    assert Event.objects.filter(event_kind=EventKind.GPU_MEMORY).count() == 1


def test_one_active_episode_per_workload_and_kind_is_the_databases_rule(running, t0):
    run = running()
    row = {"ref": run.ref, "alert_kind": AlertKind.IDLE, "team": run.team, "since": t0}
    AlertEpisode.objects.create(**row)
    with pytest.raises(IntegrityError), transaction.atomic():
        AlertEpisode.objects.create(**row, state=State.OPEN)
    # A racing cycle's insert of a pending episode is a no-op; closed ones are history, any number.
    AlertEpisode.objects.bulk_create([AlertEpisode(**row)], ignore_conflicts=True)
    AlertEpisode.objects.create(**row, state=State.CLOSED)
    AlertEpisode.objects.create(**row, state=State.CLOSED)
    assert AlertEpisode.objects.exclude(state=State.CLOSED).count() == 1
    assert AlertEpisode.objects.filter(alert_kind=AlertKind.MEMORY).count() == 0


def test_an_open_episode_moved_by_a_racing_cycle_is_not_opened_again(running, t0):
    run = running()
    clock = Clock(t0)
    clock.cycles(30, {run.identity: figures(util=2.0)})
    # Another cycle opens it between this one's read and write: the conditional update finds nothing.
    AlertEpisode.objects.update(state=State.OPEN, opened_at=clock.now)
    assert clock.cycles(1, {run.identity: figures(util=2.0)}) == []
    assert idle_events() == []


def test_a_run_that_ends_closes_its_open_episode_and_drops_a_pending_one_silently(running, fake_backend, t0):
    run = running()
    other = running(name="other")
    clock = Clock(t0)
    clock.cycles(31, {run.identity: figures(util=2.0), other.identity: figures(memory=0.5, util=3.0)})
    clock.cycles(2, {run.identity: figures(util=2.0), other.identity: figures(memory=0.99, util=50.0)})
    assert {(e.ref, e.alert_kind, e.state) for e in AlertEpisode.objects.all()} == {
        (run.ref, AlertKind.IDLE, State.OPEN), (other.ref, AlertKind.MEMORY, State.PENDING),
        (other.ref, AlertKind.IDLE, State.OPEN)}
    for ended in (run, other):
        fake_backend.set_finished(NS, ended.object_name, ok=True, started=iso(t0), finished=iso(clock.now))
    rec.reconcile(fake_backend, now=clock.now)
    events = Event.objects.count()
    clock.cycles(1, {})  # the cycle no longer measures them: they ended
    assert {(e.ref, e.alert_kind, e.state) for e in AlertEpisode.objects.all()} == {
        (run.ref, AlertKind.IDLE, State.CLOSED), (other.ref, AlertKind.IDLE, State.CLOSED)}
    assert Event.objects.count() == events  # closing says nothing


def test_an_unmeasured_cycle_leaves_a_running_runs_episode_as_it_was(running, t0):
    run = running()
    clock = Clock(t0)
    clock.cycles(31, {run.identity: figures(util=2.0)})
    assert clock.cycles(20, {}) == []  # the metrics say nothing of it: no evidence either way
    assert AlertEpisode.objects.get().state == State.OPEN and AlertEpisode.objects.get().clearing_since is None


def test_a_team_that_tightened_its_rule_is_alerted_by_it_and_others_by_the_platforms(
        running, t0, member, flavors, published, fake_backend):
    run = running()
    vision = make_team("vision", "Vision")
    add_member(vision, member, Role.MEMBER)
    seed_team_quotas(vision, {"a100-80gb": 2}, Decimal("100000"))
    theirs = applied(submit_run_as(member, vision, name="theirs"), fake_backend)
    fake_backend.set_running("team-vision", theirs.object_name, units=2, started=iso(t0))
    rec.reconcile(fake_backend, now=t0)
    TeamAlertSettings.objects.create(team=run.team, idle_util_pct=25.0, idle_minutes=5)
    clock = Clock(t0)
    clock.cycles(6, {run.identity: figures(util=20.0), theirs.identity: figures(util=20.0)})
    # 20 % is idle for ml-research (under its 25 %), after its 5 minutes; not for vision (the platform's 10 %).
    assert [(e.ref, e.state, e.threshold, e.after_minutes) for e in AlertEpisode.objects.all()] == [
        (run.ref, State.OPEN, 25.0, 5)]


def test_a_cycle_with_nothing_in_alert_costs_two_queries_whatever_the_number_of_workloads(
        running, t0, django_assert_num_queries):
    runs = [running(name=f"busy-{i}", gpus_per_worker=1) for i in range(3)]
    cluster = fleet.default_cluster()
    busy = {r.identity: figures(util=88.0, memory=0.4, temp=65.0) for r in runs}
    with django_assert_num_queries(2):  # the team rules; the active episodes
        assert alerts.observe(cluster, busy, t0) == []
    many = {**busy, **{WorkloadId("run", 10_000 + i): figures() for i in range(500)}}
    with django_assert_num_queries(2):
        assert alerts.observe(cluster, many, t0) == []


def test_idle_is_measured_against_the_workloads_unit(running, t0):
    """A time-sliced unit busy with all of its share shows 100/replicas % of the GPU: not idle."""
    run = running()
    assert not run.flavor.replicated  # a whole GPU: measured as it is
    assert alerts._value(AlertKind.IDLE, figures(util=6.0), run) == 6.0
    run.flavor = make_shared_flavors()["t4-ts4"]
    # A quarter of a T4, 6 % of the GPU busy: 24 % of the unit, over the 10 % threshold.
    assert alerts._value(AlertKind.IDLE, figures(util=6.0), run) == 24.0


def test_another_clusters_cycle_leaves_a_workloads_episodes_to_its_own_cluster(running, t0):
    """A cycle's report may carry several clusters' readings: each cluster judges only its own work."""
    run = running()
    clock = Clock(t0)
    clock.cycles(31, {run.identity: figures(util=2.0)})
    west = Cluster.objects.create(name="west")
    # West's cycle is handed run's busy figures (the shared report): not its run, nothing moves.
    assert alerts.observe(west, {run.identity: figures(util=90.0)}, clock.now + timedelta(minutes=20)) == []
    assert AlertEpisode.objects.get().state == State.OPEN
    # The run is re-placed on west (another attempt): the cluster it left closes its episode.
    TrainingRun.objects.filter(pk=run.pk).update(cluster=west)
    assert alerts.observe(west, {}, clock.now) == []  # not west's episode to close
    assert alerts.observe(clock.cluster, {}, clock.now) == [(run.ref, AlertKind.IDLE, Move.CLOSE)]
    assert AlertEpisode.objects.get().state == State.CLOSED
